// A tiny MLP learns XOR with SGD (momentum) and with Adam; seed-deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "qkv/nn/layers.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"
#include "support/test_util.h"

using namespace qkv;

namespace {
struct Mlp : nn::Module {
    std::shared_ptr<nn::Linear> fc1, fc2;
    Mlp() {
        fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 8));
        fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 1));
    }
    Tensor forward(const Tensor& x) const { return fc2->forward(tanh(fc1->forward(x))); }
};

double train_xor(bool adam, std::vector<float>* final_pred) {
    manual_seed(0);
    Mlp m;
    Tensor x = from_vector<float>({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
    Tensor y = from_vector<float>({0, 1, 1, 0}, {4, 1});
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) opt = std::make_unique<optim::Adam>(m.parameters(), 0.05);
    else opt = std::make_unique<optim::SGD>(m.parameters(), 0.2, optim::SGDOptions{0.9});
    double loss = 0;
    for (int step = 0; step < 1000; ++step) {
        opt->zero_grad();
        Tensor d = m.forward(x) - y;
        Tensor l = mean(d * d);
        l.backward();
        opt->step();
        loss = l.item();
    }
    *final_pred = m.forward(x).to_vector<float>();
    return loss;
}
}  // namespace

TEST(Xor, SgdAndAdamLearnIt) {
    for (bool adam : {false, true}) {
        std::vector<float> p1, p2;
        const double l1 = train_xor(adam, &p1);
        const double l2 = train_xor(adam, &p2);
        EXPECT_LT(l1, 1e-3) << (adam ? "Adam" : "SGD");
        EXPECT_EQ(l1, l2) << "not seed-deterministic";
        EXPECT_EQ(p1, p2);
    }
}

TEST(Optim, AdamAndSgdMatchHandComputedSteps) {
    // loss = 2p, so g = 2 every step. Adam (lr 0.1): step 1 m̂ = 2, v̂ = 4 -> p -= 0.1·2/2;
    // step 2 again exactly 0.1 (m̂ = 2, v̂ = 4 after bias correction).
    Tensor p = from_vector<double>({1.0}, {1}).requires_grad_();
    optim::Adam adam({p}, 0.1);
    std::vector<double> seen;
    for (int i = 0; i < 2; ++i) {
        adam.zero_grad();
        sum(mul(p, 2.0)).backward();
        adam.step();
        seen.push_back(p.item());
    }
    const double step = 0.1 * 2.0 / (2.0 + 1e-8);  // eps = 1e-8 sits outside the square root
    EXPECT_NEAR(seen[0], 1.0 - step, 1e-12);
    EXPECT_NEAR(seen[1], 1.0 - 2 * step, 1e-12);
    // SGD momentum 0.5 (PyTorch: buf = g at step 1, then 0.5·buf + g): 1 - 0.1·2 = 0.8, then
    // 0.8 - 0.1·(0.5·2 + 2) = 0.5.
    Tensor q = from_vector<double>({1.0}, {1}).requires_grad_();
    optim::SGD sgd({q}, 0.1, optim::SGDOptions{0.5});
    for (int i = 0; i < 2; ++i) {
        sgd.zero_grad();
        sum(mul(q, 2.0)).backward();
        sgd.step();
    }
    EXPECT_NEAR(q.item(), 0.5, 1e-12);
}

TEST(Optim, ClipGradNormScalesAndRejectsNaN) {
    Tensor a = from_vector<float>({3.f}, {1}).requires_grad_(), b = from_vector<float>({4.f}, {1}).requires_grad_();
    sum(mul(a, 3.0) + mul(b, 4.0)).backward();  // grads 3, 4: norm 5
    EXPECT_NEAR(optim::clip_grad_norm({a, b}, 1.0), 5.0, 1e-6);
    EXPECT_NEAR(a.grad().item(), 0.6, 1e-6);
    EXPECT_NEAR(b.grad().item(), 0.8, 1e-6);
    a.set_grad(from_vector<float>({NAN}, {1}));
    EXPECT_THROW(optim::clip_grad_norm({a, b}, 1.0), Error);
}

TEST(Optim, ClipGradNormRefusesATensorListedTwice) {
    // Listed twice, a gradient used to count twice in the norm (here sqrt(3² + 3² + 4²) instead of
    // 5) and be scaled twice; refused as the optimizers refuse a parameter listed twice.
    Tensor a = from_vector<float>({3.f}, {1}).requires_grad_(), b = from_vector<float>({4.f}, {1}).requires_grad_();
    sum(mul(a, 3.0) + mul(b, 4.0)).backward();
    test::expect_error_containing([&] { optim::clip_grad_norm({a, b, a}, 1.0); },
                                  "clip_grad_norm: parameter 2 is the same tensor as parameter 0 (listed twice)");
    test::expect_error_containing([&] { optim::grad_clip_factor({b, a, b}, 1.0); },
                                  "clip_grad_norm: parameter 2 is the same tensor as parameter 0 (listed twice)");
    EXPECT_EQ(a.grad().item(), 3.0);  // nothing was scaled
    EXPECT_EQ(b.grad().item(), 4.0);
    // Two handles on one memory are two tensors with their own gradients: both count.
    Tensor d = a.detach().requires_grad_();
    d.set_grad(from_vector<float>({4.f}, {1}));
    EXPECT_NEAR(optim::grad_clip_factor({a, d}, 1.0).norm, 5.0, 1e-6);
}

// Optimizer::step(grad_clip_factor(...).scale) must update the parameters exactly as
// clip_grad_norm followed by step() does (the trainer relies on it), leave .grad untouched, and
// a factor of 1 (norm below max_norm) must change nothing.
static bool same_values(const Tensor& a, const Tensor& b) {
    // Exact equality in the tensors' own dtype (both are f32 or both f64; widening is exact).
    return a.dtype() == b.dtype() && a.shape() == b.shape() && a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

TEST(Optim, ClipFactorFoldedIntoStepEqualsClipThenStepBitwise) {
    auto grads_for = [](DType dt, int which) {
        // 17 + 4096 elements: a SIMD tail and a full-vector body; norm ≈ 33 > max_norm 1.
        std::vector<Tensor> g;
        for (int64_t n : {int64_t(17), int64_t(4096)}) {
            std::vector<double> v(static_cast<size_t>(n), 0.0);
            for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.37 * double(i + 1) * (which + 1)) * 0.7;
            g.push_back(from_vector<double>(v, {n}).to(dt));
        }
        return g;
    };
    for (DType dt : {DType::f32, DType::f64})
        for (double max_norm : {1.0, 1e6})
            for (int opt_kind : {0, 1}) {
                std::vector<Tensor> p_clip, p_fold;
                for (int64_t n : {int64_t(17), int64_t(4096)}) {
                    p_clip.push_back(full({n}, 0.25, dt));
                    p_fold.push_back(full({n}, 0.25, dt));
                }
                auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
                    if (opt_kind == 0) return std::make_unique<optim::Adam>(ps, 1e-2, optim::AdamOptions{0.9, 0.98, 1e-9});
                    return std::make_unique<optim::SGD>(ps, 1e-1, optim::SGDOptions{0.9});
                };
                auto oc = make(p_clip), of = make(p_fold);
                for (int step = 0; step < 3; ++step) {
                    const auto g = grads_for(dt, step);
                    for (size_t i = 0; i < g.size(); ++i) {
                        p_clip[i].set_grad(g[i].clone());
                        p_fold[i].set_grad(g[i].clone());
                    }
                    const double norm = optim::clip_grad_norm(p_clip, max_norm);
                    oc->step();
                    const optim::ClipFactor f = optim::grad_clip_factor(p_fold, max_norm);
                    EXPECT_EQ(f.norm, norm);
                    EXPECT_EQ(f.scale == 1.0, max_norm > norm);
                    of->step(f.scale);
                    for (size_t i = 0; i < g.size(); ++i)
                        EXPECT_TRUE(same_values(p_fold[i].grad(), g[i])) << "step() changed .grad";
                }
                for (size_t i = 0; i < p_clip.size(); ++i)
                    EXPECT_TRUE(same_values(p_clip[i], p_fold[i]))
                        << dtype_name(dt) << " max_norm " << max_norm << (opt_kind ? " SGD" : " Adam") << " param " << i;
            }
}

TEST(Optim, GradScaleAndMaxNormMustBeFiniteAndNonNegative) {
    // A NaN, infinite or negative factor would turn every parameter into NaN or step uphill
    // without a word; a NaN max_norm used to switch clipping off, a negative one flipped the signs.
    Tensor p = from_vector<float>({1.f, 2.f}, {2}).requires_grad_();
    p.set_grad(from_vector<float>({3.f, 4.f}, {2}));
    optim::Adam adam({p}, 0.1);
    optim::SGD sgd({p}, 0.1);
    for (double bad : {std::nan(""), double(INFINITY), -1.0}) {
        EXPECT_THROW(adam.step(bad), Error) << bad;
        EXPECT_THROW(sgd.step(bad), Error) << bad;
    }
    EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.f, 2.f}));  // nothing was applied
    for (double bad : {std::nan(""), double(INFINITY), -1.0, 0.0}) {
        EXPECT_THROW(optim::grad_clip_factor({p}, bad), Error) << bad;
        EXPECT_THROW(optim::clip_grad_norm({p}, bad), Error) << bad;
    }
    EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{3.f, 4.f}));
    adam.step(0.0);  // a zero factor is a valid (empty) update of the gradient
}

TEST(Optim, ParameterListedTwiceOrOverlappingAnotherIsRefused) {
    // Listed twice, a parameter used to get two updates per step without a word.
    Tensor a = from_vector<float>({1.f, 2.f}, {2}).requires_grad_();
    Tensor b = from_vector<float>({3.f, 4.f, 5.f}, {3}).requires_grad_();
    test::expect_error_containing([&] { optim::Adam({a, b, a}, 0.1); },
                                  "Adam: parameter 2 is the same tensor as parameter 0 (listed twice)");
    test::expect_error_containing([&] { optim::SGD({b, a, a}, 0.1); },
                                  "SGD: parameter 2 is the same tensor as parameter 1 (listed twice)");
    optim::AdamOptions adamw;
    adamw.decoupled_weight_decay = true;
    test::expect_error_containing([&] { optim::Adam({b, b}, 0.1, adamw); },
                                  "AdamW: parameter 1 is the same tensor as parameter 0 (listed twice)");
    // Another handle on the same memory, and overlapping slices of one buffer.
    test::expect_error_containing([&] { optim::SGD({a, b, a.detach()}, 0.1); },
                                  "SGD: parameter 2 shares memory with parameter 0");
    Tensor flat = zeros({6});
    test::expect_error_containing([&] { optim::Adam({flat.slice(0, 0, 4), flat.slice(0, 3, 6)}, 0.1); },
                                  "Adam: parameter 1 shares memory with parameter 0");
    test::expect_error_containing([&] { optim::SGD({a}, -1.0); }, "SGD: learning rate must be >= 0");
    // Disjoint slices of one buffer (and an empty one inside another) are distinct parameters:
    // each element is updated once. SGD lr 1, grad 1: every element goes from 0 to -1.
    std::vector<Tensor> halves{flat.slice(0, 0, 3), flat.slice(0, 3, 6), flat.slice(0, 2, 2)};
    optim::SGD sgd(halves, 1.0);
    for (int i = 0; i < 2; ++i) halves[size_t(i)].set_grad(ones({3}));
    sgd.step();
    EXPECT_EQ(flat.to_vector<float>(), std::vector<float>(6, -1.f));
}

TEST(Optim, AdamArgumentChecksNameTheClassConstructed) {
    // AdamW's beta, eps and grad_scale checks used to say "Adam".
    Tensor a = from_vector<float>({1.f, 2.f}, {2}).requires_grad_();
    test::expect_error_containing([&] { optim::Adam({a}, 0.1, optim::AdamOptions{1.0, 0.999, 1e-8, 0, true}); },
                                  "AdamW: betas must be in [0, 1), got 1, 0.999");
    test::expect_error_containing([&] { optim::Adam({a}, 0.1, optim::AdamOptions{0.9, 0.999, -1, 0, true}); },
                                  "AdamW: eps must be >= 0, got -1");
    test::expect_error_containing([&] { optim::Adam({a}, 0.1, optim::AdamOptions{0.9, 0.999, -1}); },
                                  "Adam: eps must be >= 0, got -1");
    optim::AdamOptions adamw;
    adamw.decoupled_weight_decay = true;
    optim::Adam adamw_ok({a}, 0.1, adamw);
    test::expect_error_containing([&] { adamw_ok.step(-1.0); }, "AdamW::step: grad_scale must be finite");
}
