// scaled_dot_product_attention: backend selection (filter chain, env/forced backends) and the
// flash path against the math path through autograd (outputs and q/k/v gradients).
#include <gtest/gtest.h>

#include <functional>

#include "qkv/ops/attention.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {
struct Grads {
    std::vector<float> out, dq, dk, dv;
};

Grads run(AttentionBackend b, const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionMask& m,
          const Tensor& dout) {
    Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
    AttentionOptions o;
    o.backend = b;
    Tensor out = scaled_dot_product_attention(q, k, v, m, o);
    out.backward(dout);
    return {out.contiguous().to_vector<float>(), q.grad().to_vector<float>(), k.grad().to_vector<float>(),
            v.grad().to_vector<float>()};
}
}  // namespace

TEST(AttentionDispatch, FlashMatchesMathWithMasksAndGrads) {
    Generator g(11);
    const int64_t B = 2, H = 4, Hkv = 2, Tq = 7, Tk = 9, D = 16;
    Tensor q = randn({B, H, Tq, D}, &g), k = randn({B, Hkv, Tk, D}, &g), v = randn({B, Hkv, Tk, D}, &g);
    Tensor dout = randn({B, H, Tq, D}, &g);
    std::vector<AttentionMask> masks(4);
    masks[1].valid_lens = from_vector<int64_t>({3, 0}, {B});  // batch 1 fully masked
    masks[2].causal = CausalAlign::bottom_right;
    masks[3].valid_lens = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 9, 8, 7, 6, 5, 4, 3}, {B, Tq});
    masks[3].causal = CausalAlign::top_left;
    for (size_t i = 0; i < masks.size(); ++i) {
        const Grads m = run(AttentionBackend::math, q, k, v, masks[i], dout);
        const Grads f = run(AttentionBackend::flash, q, k, v, masks[i], dout);
        // fp32 math path vs fused fp32 kernel: both accumulate ≤ Tk·D products; 1e-5 absolute
        // is ~10 ulp of the O(1) values here.
        EXPECT_TRUE(all_close(f.out, m.out, 1e-5, 1e-4)) << "mask " << i;
        EXPECT_TRUE(all_close(f.dq, m.dq, 1e-5, 1e-4)) << "mask " << i;
        EXPECT_TRUE(all_close(f.dk, m.dk, 1e-5, 1e-4)) << "mask " << i;
        EXPECT_TRUE(all_close(f.dv, m.dv, 1e-5, 1e-4)) << "mask " << i;
    }
}

TEST(AttentionDispatch, RankThreeInputsAndWeights) {
    Generator g(3);
    Tensor q = randn({2, 10, 8}, &g), k = randn({2, 10, 8}, &g), v = randn({2, 10, 8}, &g);
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, {}, {}, &w);
    EXPECT_EQ(out.shape(), (Shape{2, 10, 8}));
    EXPECT_EQ(w.shape(), (Shape{2, 10, 10}));
    for (float s : sum(w, {-1}).to_vector<float>()) EXPECT_NEAR(s, 1.0, 1e-6);
    Tensor flash = scaled_dot_product_attention(q, k, v);
    EXPECT_TRUE(all_close(flash.to_vector<float>(), out.to_vector<float>(), 1e-5, 1e-4));
}

TEST(AttentionDispatch, SelectionExplainsWhy) {
    Tensor q = zeros({1, 1, 4, 8}), q64 = zeros({1, 1, 4, 8}, DType::f64);
    std::string why;
    EXPECT_EQ(select_attention_backend(q, q, q, {}, {}, false, &why), AttentionBackend::flash);
    EXPECT_TRUE(why.empty());
    EXPECT_EQ(select_attention_backend(q64, q64, q64, {}, {}, false, &why), AttentionBackend::math);
    EXPECT_NE(why.find("float32"), std::string::npos) << why;
    AttentionOptions o;
    o.backend = AttentionBackend::flash;
    try {
        scaled_dot_product_attention(q64, q64, q64, {}, o);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("forced but cannot run"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_attention_backend("fast"), Error);
    EXPECT_THROW(scaled_dot_product_attention(q, zeros({1, 1, 4, 7}), q), Error);
    AttentionMask bad;
    bad.valid_lens = from_vector<int64_t>({1, 2}, {2});
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, bad), Error);
}

// Every shape error names the argument (issue 28): a mask that does not broadcast to the scores
// was reported as "shapes (...) and (...) do not broadcast", without the word mask.
TEST(AttentionDispatch, ShapeErrorsNameTheArgument) {
    auto error_of = [](const std::function<void()>& f) -> std::string {
        try {
            f();
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    Tensor q = zeros({2, 1, 4, 8}), k = zeros({2, 1, 5, 8});
    for (const Shape& ms : {Shape{2, 1, 4, 4}, Shape{3, 5}, Shape{1, 1, 1, 4, 5}, Shape{2, 2, 4, 5}}) {
        AttentionMask m;
        m.mask = zeros(ms, DType::b8);
        for (AttentionBackend b : {AttentionBackend::math, AttentionBackend::automatic}) {
            AttentionOptions o;
            o.backend = b;
            const std::string e = error_of([&] { scaled_dot_product_attention(q, k, k, m, o); });
            EXPECT_NE(e.find("mask of shape " + shape_str(ms) + " does not broadcast to (2, 1, 4, 5)"), std::string::npos)
                << e;
        }
    }
    AttentionMask ok;
    ok.mask = zeros({4, 5}, DType::b8);  // (Tq, Tk) broadcasts over batch and heads
    EXPECT_NO_THROW(scaled_dot_product_attention(q, k, k, ok));
    EXPECT_NE(error_of([&] { masked_fill(zeros({2, 3}), zeros({4}, DType::b8), 0.0); }).find("mask of shape (4,)"),
              std::string::npos);
    Tensor dst = zeros({2, 3});
    EXPECT_NE(error_of([&] { copy_(dst, zeros({3, 3})); }).find("source of shape (3, 3)"), std::string::npos);
    EXPECT_TRUE(broadcasts_to({3}, {2, 3}) && broadcasts_to({1, 3}, {2, 3}) && broadcasts_to({}, {2, 3}));
    EXPECT_FALSE(broadcasts_to({2, 1, 3}, {2, 3}) || broadcasts_to({2}, {2, 3}));
}
