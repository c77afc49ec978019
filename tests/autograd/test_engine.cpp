// The autograd engine's gradient accumulation: a tensor used several times gets the sum of its
// gradients; sums happen in place only when nothing else can see the accumulator, so a gradient
// handed to two inputs, or a .grad() handle the caller holds, is never modified behind its back.
#include <gtest/gtest.h>

#include <vector>

#include "qkv/autograd/gradcheck.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;

namespace {
std::vector<double> vals(const Tensor& t) { return t.contiguous().to_vector<double>(); }
}  // namespace

TEST(AutogradEngine, LeafUsedSeveralTimesGetsTheSum) {
    // y = sum(x·x + x + x): dy/dx = 2x + 2.
    Tensor x = from_vector<double>({1.0, -2.0, 0.5}, {3});
    x.requires_grad_();
    sum(add(add(mul(x, x), x), x), {0}).backward();
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{4.0, -2.0, 3.0}));
}

TEST(AutogradEngine, OneGradientForTwoInputsIsNotCountedTwice) {
    // u = 3x; y = sum(u + u). AddBackward hands the same gradient tensor to both of its inputs,
    // which are the same node: dy/du = 2, dy/dx = 6 (an in-place sum into the shared tensor
    // would give 8).
    Tensor x = from_vector<double>({1.0, 2.0}, {2});
    x.requires_grad_();
    Tensor u = mul(x, 3.0);
    sum(add(u, u), {0}).backward();
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{6.0, 6.0}));
}

TEST(AutogradEngine, GradientsAccumulateAcrossBackwardCallsWithoutTouchingHeldHandles) {
    Tensor w = from_vector<double>({1.0, 2.0, 3.0}, {3});
    w.requires_grad_();
    sum(mul(w, 2.0), {0}).backward();
    const Tensor first = w.grad();  // the caller keeps this handle
    EXPECT_EQ(vals(first), (std::vector<double>{2.0, 2.0, 2.0}));
    sum(mul(w, 5.0), {0}).backward();
    EXPECT_EQ(vals(w.grad()), (std::vector<double>{7.0, 7.0, 7.0}));
    EXPECT_EQ(vals(first), (std::vector<double>{2.0, 2.0, 2.0}));  // not modified in place
    // Without an outside handle the third call may sum in place; the value is the same.
    sum(mul(w, 1.0), {0}).backward();
    EXPECT_EQ(vals(w.grad()), (std::vector<double>{8.0, 8.0, 8.0}));
}

TEST(AutogradEngine, WeightReusedAtEveryStepMatchesFiniteDifferences) {
    // An RNN-like chain h_{t+1} = tanh(h_t·W + x_t·U): W and U collect one gradient per step
    // (in-place sums after the first), float64 gradcheck.
    Generator g(4);
    const Tensor W = mul(randn({3, 3}, &g, 0.0, 1.0, DType::f64), 0.5);
    const Tensor U = mul(randn({2, 3}, &g, 0.0, 1.0, DType::f64), 0.5);
    const Tensor X = randn({6, 4, 2}, &g, 0.0, 1.0, DType::f64);  // (T, B, in)
    const Tensor h0 = randn({4, 3}, &g, 0.0, 1.0, DType::f64);
    auto fn = [&](const std::vector<Tensor>& in) {
        Tensor h = in[2];
        for (int64_t t = 0; t < 6; ++t) h = tanh(add(matmul(h, in[0]), matmul(in[3].select(0, t), in[1])));
        return h;
    };
    const GradcheckResult r = gradcheck(fn, {W.detach().requires_grad_(), U.detach().requires_grad_(),
                                             h0.detach().requires_grad_(), X.detach().requires_grad_()});
    EXPECT_TRUE(r.ok) << r.message;
}

TEST(AutogradEngine, SetGradRefusesAWrongShapeOrDtypeAtOnce) {
    // A mis-shaped gradient used to be stored and fail only inside the optimizer's step.
    Tensor w = zeros({2, 3}).requires_grad_();
    test::expect_error_containing([&] { w.set_grad(zeros({3, 2})); },
                                  "set_grad: expected a gradient of shape (2, 3) and dtype float32 (the tensor's), "
                                  "got shape (3, 2) and dtype float32");
    test::expect_error_containing([&] { w.set_grad(zeros({2, 3}, DType::f64)); },
                                  "got shape (2, 3) and dtype float64");
    test::expect_error_containing([&] { w.set_grad(zeros({6})); }, "got shape (6,)");
    EXPECT_FALSE(w.grad().defined());  // nothing was stored
    Tensor idx = zeros({2}, DType::i64);
    test::expect_error_containing([&] { idx.set_grad(zeros({2}, DType::i64)); },
                                  "(only float tensors have gradients)");
    // The right shape and dtype in any layout is stored as given; an undefined tensor drops it.
    const Tensor g = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}).transpose(0, 1);
    w.set_grad(g);
    EXPECT_TRUE(w.grad().is_same(g));
    w.set_grad(Tensor());
    EXPECT_FALSE(w.grad().defined());
}
