// scaled_dot_product_attention: backend selection (filter chain, env/forced backends) and the
// flash path against the math path through autograd (outputs and q/k/v gradients).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
          const Tensor& dout, AttentionOptions o = {}) {
    Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
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
    std::vector<AttentionMask> masks(8);
    masks[1].valid_lens = from_vector<int64_t>({3, 0}, {B});  // batch 1 fully masked
    masks[2].causal = CausalAlign::bottom_right;
    masks[3].valid_lens = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 9, 8, 7, 6, 5, 4, 3}, {B, Tq});
    masks[3].causal = CausalAlign::top_left;
    masks[4].window = {2, 0, CausalAlign::top_left};
    masks[5].window = {1, 1, CausalAlign::bottom_right};
    masks[5].valid_lens = from_vector<int64_t>({9, 4}, {B});  // batch 1: rows 0..2 see no key
    masks[6].window = {0, 0, CausalAlign::bottom_right};
    masks[6].causal = CausalAlign::bottom_right;
    masks[7].window = {-1, 3, CausalAlign::top_left};
    masks[7].mask = from_vector<float>({0, -1, 2, -INFINITY, 0, 0.5f, 0, 0, 1}, {Tk});  // additive, per key
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
    // Soft cap and ALiBi, with each mask above.
    AttentionOptions o;
    o.softcap      = 1.5;
    o.alibi_slopes = alibi_slopes(H);
    for (size_t i = 0; i < masks.size(); ++i) {
        const Grads m = run(AttentionBackend::math, q, k, v, masks[i], dout, o);
        const Grads f = run(AttentionBackend::flash, q, k, v, masks[i], dout, o);
        EXPECT_TRUE(all_close(f.out, m.out, 1e-5, 1e-4)) << "softcap + alibi, mask " << i;
        EXPECT_TRUE(all_close(f.dq, m.dq, 1e-5, 1e-4)) << "softcap + alibi, mask " << i;
        EXPECT_TRUE(all_close(f.dk, m.dk, 1e-5, 1e-4)) << "softcap + alibi, mask " << i;
        EXPECT_TRUE(all_close(f.dv, m.dv, 1e-5, 1e-4)) << "softcap + alibi, mask " << i;
    }
}

// Hand-derived windows in float64 (math path): window (0, 0) makes every query read only its own
// key, so out_i = v_i; (1, 0) mixes v_{i-1} and v_i with softmax weights of the two scores; a row
// whose window lies past valid_lens gives 0. The flash path gives the same in float32.
TEST(AttentionDispatch, SlidingWindowHandValues) {
    Generator g(5);
    const int64_t T = 6, D = 4;
    Tensor q = randn({1, 1, T, D}, &g).to(DType::f64), k = randn({1, 1, T, D}, &g).to(DType::f64),
           v = randn({1, 1, T, D}, &g).to(DType::f64);
    AttentionMask m;
    m.window = {0, 0, CausalAlign::top_left};
    const auto out0 = scaled_dot_product_attention(q, k, v, m).to_vector<double>();
    const auto vv = v.to_vector<double>(), qv = q.to_vector<double>(), kv = k.to_vector<double>();
    for (int64_t t = 0; t < T * D; ++t) EXPECT_NEAR(out0[size_t(t)], vv[size_t(t)], 1e-15);
    m.window = {1, 0, CausalAlign::top_left};
    m.valid_lens = from_vector<int64_t>({4}, {1});  // rows 5, 6 (1-based) see no key in their window
    const auto out1 = scaled_dot_product_attention(q, k, v, m).to_vector<double>();
    auto score = [&](int64_t i, int64_t j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qv[size_t(i * D + d)] * kv[size_t(j * D + d)];
        return s / std::sqrt(double(D));
    };
    for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
            double want = 0;
            if (i == 0) {
                want = vv[size_t(d)];
            } else if (i < 4) {
                const double a = std::exp(score(i, i - 1)), b = std::exp(score(i, i));
                want = (a * vv[size_t((i - 1) * D + d)] + b * vv[size_t(i * D + d)]) / (a + b);
            } else if (i == 4) {
                want = vv[size_t(3 * D + d)];  // window {3, 4}, valid keys 0..3: only key 3
            }
            EXPECT_NEAR(out1[size_t(i * D + d)], want, 1e-12) << "row " << i;
        }
    AttentionOptions o;
    o.backend = AttentionBackend::flash;
    const auto f = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), m, o)
                       .to_vector<float>();
    for (int64_t t = 0; t < T * D; ++t) EXPECT_NEAR(double(f[size_t(t)]), out1[size_t(t)], 1e-5);
    m.window = {-2, 0, CausalAlign::top_left};
    EXPECT_NE(error_of([&] { scaled_dot_product_attention(q, k, v, m); }).find("window (left, right) must be >= 0"),
              std::string::npos);
}

TEST(AttentionDispatch, AlibiSlopesOfThePaper) {
    const auto s8 = alibi_slopes(8).to_vector<float>();
    ASSERT_EQ(s8.size(), 8u);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(s8[size_t(i)], std::ldexp(1.0f, -(i + 1))) << i;  // 1/2 .. 1/256
    const auto s12 = alibi_slopes(12).to_vector<float>();
    ASSERT_EQ(s12.size(), 12u);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(s12[size_t(i)], s8[size_t(i)]);
    const float extra[] = {0.70710677f, 0.35355338f, 0.17677669f, 0.088388346f};  // 2^-0.5, -1.5, -2.5, -3.5
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(s12[size_t(8 + i)], extra[i]) << i;
    const auto s1 = alibi_slopes(1).to_vector<float>();
    EXPECT_EQ(s1[0], std::ldexp(1.0f, -8));
    EXPECT_NE(error_of([] { alibi_slopes(0); }).find("num_heads must be >= 1"), std::string::npos);
}

// Hand-derived in float64: with q = 0 every logit is 0, so ALiBi alone sets the weights,
// w_ij ∝ exp(−m_h |i + Tk − Tq − j|); a soft cap of c on logits of ±L gives logits ±c·tanh(L/c).
TEST(AttentionDispatch, SoftcapAndAlibiHandValues) {
    Generator g(8);
    const int64_t H = 2, Tq = 3, Tk = 5, D = 2;
    Tensor q = zeros({1, H, Tq, D}, DType::f64), v = randn({1, H, Tk, D}, &g).to(DType::f64);
    Tensor k = randn({1, H, Tk, D}, &g).to(DType::f64);
    AttentionOptions o;
    o.alibi_slopes = from_vector<float>({0.5f, 2.0f}, {H});
    const auto out = scaled_dot_product_attention(q, k, v, {}, o).to_vector<double>();
    const auto vv = v.to_vector<double>();
    const double m[] = {0.5, 2.0};
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
            for (int64_t d = 0; d < D; ++d) {
                double num = 0, den = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    const double w = std::exp(-m[h] * std::abs(double(i + Tk - Tq - j)));
                    num += w * vv[size_t((h * Tk + j) * D + d)];
                    den += w;
                }
                EXPECT_NEAR(out[size_t((h * Tq + i) * D + d)], num / den, 1e-14) << h << " " << i;
            }
    // Soft cap: q·k/√D = ±4 for two keys; cap 2 gives logits ±2 tanh(2).
    Tensor q1 = from_vector<double>({4.0, 0.0}, {1, 1, 1, 2}), k1 = from_vector<double>({1, 0, -1, 0}, {1, 1, 2, 2});
    Tensor v1 = from_vector<double>({1, 0, 0, 1}, {1, 1, 2, 2});
    AttentionOptions c;
    c.softcap = 2.0;
    c.scale   = 1.0;
    const auto o1 = scaled_dot_product_attention(q1, k1, v1, {}, c).to_vector<double>();
    const double a = 2.0 * std::tanh(2.0), w0 = std::exp(a) / (std::exp(a) + std::exp(-a));
    EXPECT_NEAR(o1[0], w0, 1e-15);
    EXPECT_NEAR(o1[1], 1 - w0, 1e-15);
    c.softcap = -1;
    EXPECT_NE(error_of([&] { scaled_dot_product_attention(q1, k1, v1, {}, c); }).find("softcap must be finite and >= 0"),
              std::string::npos);
    AttentionOptions bad;
    bad.alibi_slopes = from_vector<float>({1, 2, 3}, {3});
    EXPECT_NE(error_of([&] { scaled_dot_product_attention(q, k, v, {}, bad); }).find("alibi_slopes must be a float (H) = (2)"),
              std::string::npos);
}

// Zero-length query or key dimensions on both backends: Tk = 0 gives zero rows and zero
// gradients, Tq = 0 an empty output and zero dk, dv.
TEST(AttentionDispatch, ZeroLengthOnBothBackends) {
    Generator g(4);
    for (auto [tq, tk] : {std::pair<int64_t, int64_t>{3, 0}, {0, 5}, {0, 0}})
        for (auto b : {AttentionBackend::math, AttentionBackend::flash}) {
            SCOPED_TRACE(::testing::Message() << "Tq " << tq << " Tk " << tk << " backend " << int(b));
            Tensor q = randn({2, 2, tq, 8}, &g), k = randn({2, 2, tk, 8}, &g), v = randn({2, 2, tk, 8}, &g);
            const Grads r = run(b, q, k, v, {}, randn({2, 2, tq, 8}, &g));
            EXPECT_EQ(r.out.size(), size_t(2 * 2 * tq * 8));
            for (float x : r.out) EXPECT_EQ(x, 0.0f);
            for (float x : r.dq) EXPECT_EQ(x, 0.0f);
            for (float x : r.dk) EXPECT_EQ(x, 0.0f);
            for (float x : r.dv) EXPECT_EQ(x, 0.0f);
        }
}

// Non-contiguous q, k, v (a transposed last dimension) and a non-contiguous upstream gradient
// give what their contiguous copies give, on both backends.
TEST(AttentionDispatch, StridedInputsAndGradientEqualContiguous) {
    Generator g(6);
    const int64_t B = 2, H = 2, T = 37, D = 16;
    Tensor qt = randn({B, H, D, T}, &g), kt = randn({B, H, D, T}, &g), vt = randn({B, H, D, T}, &g);
    Tensor q = qt.transpose(-1, -2), k = kt.transpose(-1, -2), v = vt.transpose(-1, -2);  // last dim stride T
    Tensor dout = randn({B, H, D, T}, &g).transpose(-1, -2);
    ASSERT_NE(q.strides().back(), 1);
    AttentionMask m;
    m.causal = CausalAlign::top_left;
    for (auto b : {AttentionBackend::math, AttentionBackend::flash}) {
        const Grads s = run(b, q, k, v, m, dout);
        const Grads c = run(b, q.contiguous(), k.contiguous(), v.contiguous(), m, dout.contiguous());
        EXPECT_EQ(s.out, c.out) << int(b);
        EXPECT_EQ(s.dq, c.dq) << int(b);
        EXPECT_EQ(s.dk, c.dk) << int(b);
        EXPECT_EQ(s.dv, c.dv) << int(b);
    }
}

// Packed sequences of lengths 5, 0, 9 and 3 (queries) against 7, 4, 9 and 1 keys: each
// sequence's rows and gradients equal that sequence run alone, and (no causal mask) equal the
// padded batch with key valid_lens; on both backends, causal and a window included.
TEST(AttentionDispatch, VarlenEqualsEachSequenceAlone) {
    Generator g(12);
    const std::vector<int64_t> lq = {5, 0, 9, 3}, lk = {7, 4, 9, 1};
    const int64_t H = 2, Hkv = 1, D = 8, Nq = 17, Nk = 21;
    const Tensor q0 = randn({Nq, H, D}, &g), k0 = randn({Nk, Hkv, D}, &g), v0 = randn({Nk, Hkv, D}, &g);
    const Tensor dout = randn({Nq, H, D}, &g);
    const Tensor cq = from_vector<int64_t>({0, 5, 5, 14, 17}, {5}), ck = from_vector<int64_t>({0, 7, 11, 20, 21}, {5});
    std::vector<AttentionMask> masks(3);
    masks[1].causal = CausalAlign::bottom_right;
    masks[2].window = {2, 1, CausalAlign::bottom_right};
    for (auto b : {AttentionBackend::math, AttentionBackend::flash})
        for (size_t mi = 0; mi < masks.size(); ++mi) {
            SCOPED_TRACE(::testing::Message() << "backend " << int(b) << " mask " << mi);
            AttentionOptions o;
            o.backend = b;
            Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
            Tensor out = varlen_attention(q, k, v, cq, ck, masks[mi], o);
            ASSERT_EQ(out.shape(), (Shape{Nq, H, D}));
            out.backward(dout);
            const auto got = out.contiguous().to_vector<float>(), gq = q.grad().to_vector<float>();
            const auto gk = k.grad().to_vector<float>();
            int64_t at_q = 0, at_k = 0;
            for (size_t s = 0; s < lq.size(); ++s) {
                auto one = [&](const Tensor& x, int64_t a, int64_t n) {
                    return x.slice(0, a, a + n).unsqueeze(0).transpose(1, 2).contiguous().detach().requires_grad_();
                };
                Tensor qs = one(q0, at_q, lq[s]), ks = one(k0, at_k, lk[s]), vs = one(v0, at_k, lk[s]);
                Tensor os = scaled_dot_product_attention(qs, ks, vs, masks[mi], o);
                os.backward(one(dout, at_q, lq[s]).detach());
                const auto want = os.transpose(1, 2).contiguous().to_vector<float>();
                const auto wq = qs.grad().transpose(1, 2).contiguous().to_vector<float>();
                const auto wk = ks.grad().transpose(1, 2).contiguous().to_vector<float>();
                for (size_t t = 0; t < want.size(); ++t) {
                    EXPECT_FLOAT_EQ(got[size_t(at_q * H * D) + t], want[t]) << "sequence " << s;
                    EXPECT_FLOAT_EQ(gq[size_t(at_q * H * D) + t], wq[t]) << "sequence " << s;
                }
                for (size_t t = 0; t < wk.size(); ++t) EXPECT_FLOAT_EQ(gk[size_t(at_k * Hkv * D) + t], wk[t]) << s;
                at_q += lq[s], at_k += lk[s];
            }
        }
    // The padded batch (B 4, Tq 9, Tk 9) with key valid_lens gives the same rows (no causal mask).
    std::vector<float> qp(4 * 9 * H * D, 0.f), kp(4 * 9 * Hkv * D, 0.f), vp(4 * 9 * Hkv * D, 0.f);
    const auto qv = q0.to_vector<float>(), kv = k0.to_vector<float>(), vv = v0.to_vector<float>();
    for (int64_t s = 0, aq = 0, ak = 0; s < 4; aq += lq[size_t(s)], ak += lk[size_t(s)], ++s) {
        std::copy_n(qv.begin() + aq * H * D, lq[size_t(s)] * H * D, qp.begin() + s * 9 * H * D);
        std::copy_n(kv.begin() + ak * Hkv * D, lk[size_t(s)] * Hkv * D, kp.begin() + s * 9 * Hkv * D);
        std::copy_n(vv.begin() + ak * Hkv * D, lk[size_t(s)] * Hkv * D, vp.begin() + s * 9 * Hkv * D);
    }
    AttentionMask pm;
    pm.valid_lens = from_vector<int64_t>({7, 4, 9, 1}, {4});
    const auto padded = scaled_dot_product_attention(from_vector(qp, {4, 9, H, D}).transpose(1, 2),
                                                     from_vector(kp, {4, 9, Hkv, D}).transpose(1, 2),
                                                     from_vector(vp, {4, 9, Hkv, D}).transpose(1, 2), pm)
                            .transpose(1, 2).contiguous().to_vector<float>();
    const auto packed = varlen_attention(q0, k0, v0, cq, ck).to_vector<float>();
    for (int64_t s = 0, aq = 0; s < 4; aq += lq[size_t(s)], ++s)
        for (int64_t t = 0; t < lq[size_t(s)] * H * D; ++t)
            EXPECT_NEAR(packed[size_t(aq * H * D + t)], padded[size_t(s * 9 * H * D + t)], 1e-6) << s;
    AttentionMask bad;
    bad.valid_lens = from_vector<int64_t>({1, 2, 3, 4}, {4});
    EXPECT_NE(error_of([&] { varlen_attention(q0, k0, v0, cq, ck, bad); }).find("valid_lens and mask tensors do not apply"),
              std::string::npos);
    EXPECT_NE(error_of([&] { varlen_attention(q0, k0, v0, from_vector<int64_t>({0, 5, 4, 14, 17}, {5}), ck); })
                  .find("cu_seqlens_q decreases at 2"),
              std::string::npos);
    EXPECT_NE(error_of([&] { varlen_attention(q0, k0, v0, from_vector<int64_t>({0, 17}, {2}), ck); })
                  .find("different batch sizes"),
              std::string::npos);
    EXPECT_NE(error_of([&] { varlen_attention(q0, k0, v0, from_vector<int64_t>({0, 5, 5, 14, 16}, {5}), ck); })
                  .find("must start at 0 and end at 17"),
              std::string::npos);
}

// A NaN in a key row and an infinity in a value row that every query's mask hides never reach the
// outputs or gradients, whichever way the mask is given, on both backends: the results equal those
// with finite values there. Where a query does see the row (causal, later rows), its output is NaN.
TEST(AttentionDispatch, HiddenNonFiniteKeyValueRowsAreNeverRead) {
    Generator g(17);
    const int64_t B = 2, H = 2, Hkv = 1, Tq = 6, Tk = 8, D = 16;
    const Tensor q = randn({B, H, Tq, D}, &g), k0 = randn({B, Hkv, Tk, D}, &g), v0 = randn({B, Hkv, Tk, D}, &g);
    const Tensor dout = randn({B, H, Tq, D}, &g);
    auto poison = [&](const Tensor& x, int64_t b, int64_t j, float value) {
        auto d = x.contiguous().to_vector<float>();
        for (int64_t e = 0; e < D; ++e) d[size_t((b * Hkv * Tk + j) * D + e)] = value;
        return from_vector(d, x.shape());
    };
    struct Case {
        const char* name;
        AttentionMask m;
        std::vector<int64_t> batches;  // batches whose row j is poisoned
        int64_t j;
    };
    std::vector<Case> cases(6);
    cases[0] = {"valid_lens (B)", {}, {0}, 6};
    cases[0].m.valid_lens = from_vector<int64_t>({5, 8}, {B});
    cases[1] = {"valid_lens (B, Tq)", {}, {0, 1}, 7};
    cases[1].m.valid_lens = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1}, {B, Tq});
    cases[2] = {"bool mask", {}, {0, 1}, 3};
    cases[2].m.mask = from_vector<bool>({true, true, true, false, true, true, true, true}, {Tk});
    cases[3] = {"additive -inf", {}, {0, 1}, 3};
    cases[3].m.mask = from_vector<float>({0, 0.5f, 0, -INFINITY, 0, 0, -1, 0}, {Tk});
    cases[4] = {"window (1, 0)", {}, {0, 1}, 7};
    cases[4].m.window = {1, 0, CausalAlign::top_left};
    cases[5] = {"causal top-left", {}, {0, 1}, 7};
    cases[5].m.causal = CausalAlign::top_left;
    for (const auto& c : cases)
        for (auto b : {AttentionBackend::math, AttentionBackend::flash}) {
            SCOPED_TRACE(::testing::Message() << c.name << ", backend " << int(b));
            Tensor k = k0, v = v0;
            for (int64_t bb : c.batches) k = poison(k, bb, c.j, NAN), v = poison(v, bb, c.j, INFINITY);
            const Grads bad = run(b, q, k, v, c.m, dout), clean = run(b, q, k0, v0, c.m, dout);
            // Only the hidden row differs, and nothing reads it: equal up to summation order.
            EXPECT_TRUE(all_close(bad.out, clean.out, 1e-6, 1e-5));
            EXPECT_TRUE(all_close(bad.dq, clean.dq, 1e-6, 1e-5));
            EXPECT_TRUE(all_close(bad.dk, clean.dk, 1e-6, 1e-5));
            EXPECT_TRUE(all_close(bad.dv, clean.dv, 1e-6, 1e-5));
        }
    // Larger: the poisoned row shares a 128-key tile with visible keys, so the flash kernel's masked
    // tile takes the path that skips hidden rows (forward P.V, backward dS and dQ).
    {
        const int64_t Tq2 = 100, Tk2 = 300;
        const Tensor q2 = randn({B, H, Tq2, D}, &g), k2 = randn({B, Hkv, Tk2, D}, &g), v2 = randn({B, Hkv, Tk2, D}, &g);
        const Tensor d2 = randn({B, H, Tq2, D}, &g);
        auto poison2 = [&](const Tensor& x, int64_t j, float value) {
            auto d = x.contiguous().to_vector<float>();
            for (int64_t e = 0; e < D; ++e) d[size_t(j * D + e)] = value;  // batch 0
            return from_vector(d, x.shape());
        };
        AttentionMask m;
        m.valid_lens = from_vector<int64_t>({200, 300}, {B});
        for (auto b : {AttentionBackend::math, AttentionBackend::flash}) {
            const Grads bad = run(b, q2, poison2(k2, 250, NAN), poison2(v2, 250, -INFINITY), m, d2);
            const Grads clean = run(b, q2, k2, v2, m, d2);
            EXPECT_TRUE(all_close(bad.out, clean.out, 1e-6, 1e-5)) << int(b);
            EXPECT_TRUE(all_close(bad.dq, clean.dq, 1e-6, 1e-5)) << int(b);
            EXPECT_TRUE(all_close(bad.dk, clean.dk, 1e-6, 1e-5)) << int(b);
            EXPECT_TRUE(all_close(bad.dv, clean.dv, 1e-6, 1e-5)) << int(b);
        }
    }
    // Causal with key 3 poisoned: rows 0..2 do not see it (finite, as without it), rows 3..5 do.
    AttentionMask causal;
    causal.causal = CausalAlign::top_left;
    for (auto b : {AttentionBackend::math, AttentionBackend::flash}) {
        const Tensor v = poison(v0, 0, 3, NAN);
        AttentionOptions o;
        o.backend = b;
        const auto bad = scaled_dot_product_attention(q, k0, v, causal, o).to_vector<float>();
        const auto clean = scaled_dot_product_attention(q, k0, v0, causal, o).to_vector<float>();
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i)
                for (int64_t e = 0; e < D; ++e) {
                    const size_t t = size_t((h * Tq + i) * D + e);  // batch 0
                    if (i < 3) EXPECT_NEAR(bad[t], clean[t], 1e-6) << "backend " << int(b) << " row " << i;
                    else EXPECT_TRUE(std::isnan(bad[t])) << "backend " << int(b) << " row " << i << " sees the NaN";
                }
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

// The flash path's layouts for a head split of (B, T, H, D) rows (multi-head attention): out is
// (B, Tq, H, Dv) memory, so merging the heads back is a view, and dq/dk/dv come back in q/k/v's
// layout, so the split's backward is a view too. Values as the math path's; a contiguous dout
// (another layout than out's) gives the same gradients.
TEST(AttentionDispatch, FlashKeepsTheHeadSplitLayoutBothWays) {
    Generator g(12);
    const int64_t B = 2, T = 11, H = 4, D = 8;
    const Tensor x = randn({B, T, H * D}, &g), dmerged = randn({B, T, H * D}, &g);
    auto run_split = [&](AttentionBackend backend, bool contiguous_dout) {
        Tensor xr = x.detach().requires_grad_();
        const Tensor heads = xr.reshape({B, T, H, D}).permute({0, 2, 1, 3});  // q = k = v
        AttentionOptions o;
        o.backend = backend;
        Tensor out = scaled_dot_product_attention(heads, heads, heads, AttentionMask{}, o);
        if (backend == AttentionBackend::flash) {
            EXPECT_TRUE(out.permute({0, 2, 1, 3}).is_contiguous()) << "out is not (B, Tq, H, Dv) memory";
        }
        if (contiguous_dout) out.backward(dmerged.reshape({B, T, H, D}).permute({0, 2, 1, 3}).contiguous());
        else out.permute({0, 2, 1, 3}).reshape({B, T, H * D}).backward(dmerged);
        return std::pair<Tensor, Tensor>{out.contiguous(), xr.grad()};
    };
    const auto m = run_split(AttentionBackend::math, false);
    const auto f = run_split(AttentionBackend::flash, false);
    const auto fc = run_split(AttentionBackend::flash, true);
    // fp32 math path vs the fused kernel, ≤ T·D products per value: as above.
    EXPECT_TRUE(all_close(f.first.to_vector<float>(), m.first.to_vector<float>(), 1e-5, 1e-4));
    EXPECT_TRUE(all_close(f.second.to_vector<float>(), m.second.to_vector<float>(), 1e-5, 1e-4));
    EXPECT_EQ(fc.second.to_vector<float>(), f.second.to_vector<float>());
}
