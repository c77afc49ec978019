// Attention kernels: the reference kernel (ref/attention.h): float64 gradcheck and mask semantics;
// and the definitions of the shared helpers of attention_kernel_test_util.h. The fast flash kernel's
// tests are test_flash_attention_kernels.cpp and test_flash_attention_bf16.cpp.
// Pointer-level: no Tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "attention_kernel_test_util.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/philox.h"
#include "support/test_util.h"

namespace qkv::test {

template <class T>
AttnData<T> make_attn(const AttnSpec& s0) {
    AttnData<T> a;
    a.spec      = s0;
    AttnSpec& s = a.spec;
    if (s.Hkv == 0) s.Hkv = s.H;
    if (s.Dv == 0) s.Dv = s.D;
    auto fill = [&](std::vector<T>& dst, int64_t n, uint64_t seed) {
        const auto r = random_floats(n, seed, -s.amp, s.amp);
        dst.assign(r.begin(), r.end());
    };
    fill(a.q, s.B * s.H * s.Tq * s.D, s.seed * 10 + 1);
    fill(a.k, s.B * s.Hkv * s.Tk * s.D, s.seed * 10 + 2);
    fill(a.v, s.B * s.Hkv * s.Tk * s.Dv, s.seed * 10 + 3);
    if (s.key_ramp != 0.0f) {
        EXPECT_FALSE(s.strided);
        for (size_t i = 0; i < a.q.size(); i += size_t(s.D)) a.q[i] = T(1);
        for (size_t i = 0; i < a.k.size(); i += size_t(s.D)) {
            const int64_t j = int64_t(i / size_t(s.D)) % s.Tk;
            a.k[i] = T(float(a.k[i]) + float(double(s.key_ramp) * double(j) / double(s.Tk)));
        }
    }
    {
        const auto r = random_floats(s.B * s.H * s.Tq * s.Dv, s.seed * 10 + 4);
        a.dout.assign(r.begin(), r.end());
    }
    a.out.assign(size_t(s.B * s.H * s.Tq * s.Dv), T(7));  // poison: kernels must write all
    a.lse.assign(size_t(s.B * s.H * s.Tq), T(7));
    a.lse_lo.assign(size_t(s.B * s.H * s.Tq), T(7));
    a.dq.assign(size_t(s.B * s.H * s.Tq * s.D), T(7));
    a.dk.assign(size_t(s.B * s.Hkv * s.Tk * s.D), T(7));
    a.dv.assign(size_t(s.B * s.Hkv * s.Tk * s.Dv), T(7));

    auto& p = a.p;
    p.B = s.B, p.H = s.H, p.Hkv = s.Hkv, p.Tq = s.Tq, p.Tk = s.Tk, p.D = s.D, p.Dv = s.Dv;
    p.q = a.q.data(), p.k = a.k.data(), p.v = a.v.data(), p.out = a.out.data(), p.lse = a.lse.data();
    p.lse_lo = a.lse_lo.data();
    // (B, H, T, X) or (B, T, H, X) element strides of the same buffer size.
    auto strides = [&](int64_t Hn, int64_t T_, int64_t X, int64_t& sb, int64_t& sh, int64_t& st) {
        sb = Hn * T_ * X;
        sh = s.strided ? X : T_ * X;
        st = s.strided ? Hn * X : X;
    };
    strides(s.H, s.Tq, s.D, p.q_stride_b, p.q_stride_h, p.q_stride_t);
    strides(s.Hkv, s.Tk, s.D, p.k_stride_b, p.k_stride_h, p.k_stride_t);
    strides(s.Hkv, s.Tk, s.Dv, p.v_stride_b, p.v_stride_h, p.v_stride_t);
    strides(s.H, s.Tq, s.Dv, p.o_stride_b, p.o_stride_h, p.o_stride_t);
    p.scale = s.scale != 0.0f ? s.scale : float(1.0 / std::sqrt(double(s.D)));
    p.causal = s.causal;
    p.window_left = s.window_left, p.window_right = s.window_right, p.window_shift = s.window_shift;
    p.softcap = s.softcap;
    if (!s.alibi.empty()) {
        a.alibi        = s.alibi;
        p.alibi_slopes = a.alibi.data();
    }
    if (s.valid_lens_rank) {
        a.valid_lens      = s.valid_lens;
        p.valid_lens      = a.valid_lens.data();
        p.valid_lens_rank = s.valid_lens_rank;
    }
    if (s.mask != MaskKind::none) {
        // Storage (B, H, Tq, Tk) always; strides pick the broadcast view.
        const int64_t n = s.B * s.H * s.Tq * s.Tk;
        const auto    r = random_floats(n, s.seed * 10 + 5, 0.0f, 1.0f);
        const auto    r2 = random_floats(n, s.seed * 10 + 6, -2.0f, 2.0f);
        switch (s.mask_shape) {
            case MaskShape::full:
                p.m_stride_b = s.H * s.Tq * s.Tk, p.m_stride_h = s.Tq * s.Tk, p.m_stride_q = s.Tk,
                p.m_stride_k = 1;
                break;
            case MaskShape::key_padding:
                p.m_stride_b = s.Tk, p.m_stride_h = 0, p.m_stride_q = 0, p.m_stride_k = 1;
                break;
            case MaskShape::shared:
                p.m_stride_b = 0, p.m_stride_h = 0, p.m_stride_q = s.Tk, p.m_stride_k = 1;
                break;
            case MaskShape::transposed:  // element (b, h, i, j) at b*H*Tq*Tk + h*Tq*Tk + j*Tq + i
                p.m_stride_b = s.H * s.Tq * s.Tk, p.m_stride_h = s.Tq * s.Tk, p.m_stride_q = 1,
                p.m_stride_k = s.Tq;
                break;
        }
        auto at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
            return b * p.m_stride_b + h * p.m_stride_h + i * p.m_stride_q + j * p.m_stride_k;
        };
        const bool use_bool = s.mask == MaskKind::boolean || s.mask == MaskKind::both;
        const bool use_add  = s.mask == MaskKind::additive || s.mask == MaskKind::both;
        if (use_bool) {
            a.bool_mask.resize(size_t(n));
            for (int64_t t = 0; t < n; ++t) a.bool_mask[size_t(t)] = r[size_t(t)] < s.mask_keep;
            p.bool_mask = a.bool_mask.data();
        }
        if (use_add) {
            a.add_mask.resize(size_t(n));
            for (int64_t t = 0; t < n; ++t)
                a.add_mask[size_t(t)] =
                    (use_bool || r[size_t(t)] < s.mask_keep)
                        ? T(r2[size_t(t)])
                        : -std::numeric_limits<T>::infinity();
            p.additive_mask = a.add_mask.data();
        }
        for (size_t t = 0; t + 2 < s.masked_rows.size(); t += 3)
            for (int64_t j = 0; j < s.Tk; ++j) {
                const int64_t e = at(s.masked_rows[t], s.masked_rows[t + 1], s.masked_rows[t + 2], j);
                if (use_bool) a.bool_mask[size_t(e)] = 0;
                else a.add_mask[size_t(e)] = -std::numeric_limits<T>::infinity();
            }
    }
    p.dropout_p      = s.dropout;
    p.dropout_seed   = s.seed * 7919 + 13;
    p.dropout_offset = s.seed * 4096;
    a.g.dout = a.dout.data(), a.g.dq = a.dq.data(), a.g.dk = a.dk.data(), a.g.dv = a.dv.data();
    return a;
}

template AttnData<float> make_attn<float>(const AttnSpec&);
template AttnData<double> make_attn<double>(const AttnSpec&);

// Every path the cap can select on this CPU (scalar = the portable build with AVX-512 geometry).
std::vector<cpu::Isa> isas() { return available_isas(); }

void flash_forward(const kernels::AttentionParams<float>& p, cpu::Isa isa) {
    const IsaGuard cap(isa);
    cpu::flash_attention_forward(p);
}
void flash_backward(const kernels::AttentionParams<float>& p, const kernels::AttentionGradParams<float>& g,
                    cpu::Isa isa) {
    const IsaGuard cap(isa);
    cpu::flash_attention_backward(p, g);
}

Results run_fast(const AttnSpec& s, cpu::Isa isa, bool bwd) {
    auto a = make_attn<float>(s);
    flash_forward(a.p, isa);
    if (bwd) flash_backward(a.p, a.g, isa);
    return results(a);
}

/// The 2x rule for out and lse (and dq, dk, dv with bwd): got and base each against want.
void expect_results_within_rule(const Results& got, const Results& want, const Results& base, bool bwd) {
    EXPECT_TRUE(within_rule("out", max_err(got.out, want.out), max_err(base.out, want.out)));
    EXPECT_TRUE(within_rule("lse", max_err(got.lse, want.lse), max_err(base.lse, want.lse)));
    if (!bwd) return;
    EXPECT_TRUE(within_rule("dq", max_err(got.dq, want.dq), max_err(base.dq, want.dq)));
    EXPECT_TRUE(within_rule("dk", max_err(got.dk, want.dk), max_err(base.dk, want.dk)));
    EXPECT_TRUE(within_rule("dv", max_err(got.dv, want.dv), max_err(base.dv, want.dv)));
}

// fast (each ISA) vs ref<double> with the 2x rule against ref<float>, for out, lse, dq, dk, dv.
void expect_fast_matches_ref(const AttnSpec& s, bool bwd) {
    auto r64 = make_attn<double>(s);
    auto r32 = make_attn<float>(s);
    ref::attention_forward(r64.p);
    ref::attention_forward(r32.p);
    if (bwd) {
        ref::attention_backward(r64.p, r64.g);
        ref::attention_backward(r32.p, r32.g);
    }
    const Results want = results(r64), base = results(r32);
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const Results got = run_fast(s, isa, bwd);
        expect_results_within_rule(got, want, base, bwd);
    }
}

AttnSpec shape(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv) {
    AttnSpec s;
    s.B = B, s.H = H, s.Tq = Tq, s.Tk = Tk, s.D = D, s.Dv = Dv;
    return s;
}

AttnSpec dropout_probe_spec(float p) {
    AttnSpec s;
    s.B = 2, s.H = 2, s.Tq = 100, s.Tk = 130, s.D = 4, s.Dv = 130, s.dropout = p;
    return s;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reference kernel: float64 gradcheck and mask semantics.

// PyTorch gradcheck defaults (tests/README.md): central differences in float64.
constexpr double kGradEps  = 1e-6;
constexpr double kGradAtol = 1e-5;
constexpr double kGradRtol = 1e-3;

// L(q, k, v) = sum(out * dout) (out and dout share a storage layout); its gradient is what
// attention_backward computes for that dout.
double loss(AttnData<double>& a) {
    ref::attention_forward(a.p);
    double l = 0;
    for (size_t t = 0; t < a.out.size(); ++t) l += a.out[t] * a.dout[t];
    return l;
}

// Central-difference gradient of loss() w.r.t. x (n0, n1, T, X) stored with strides (s0, s1, st),
// in logical order, compared with the analytic (contiguous) gradient g.
::testing::AssertionResult gradcheck_input(AttnData<double>& a, std::vector<double>& x,
                                           int64_t n0, int64_t n1, int64_t T, int64_t X,
                                           int64_t s0, int64_t s1, int64_t st,
                                           const std::vector<double>& g, const char* name) {
    std::vector<double> num;
    for (int64_t b = 0; b < n0; ++b)
        for (int64_t h = 0; h < n1; ++h)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e < X; ++e) {
                    double&      xe = x[size_t(b * s0 + h * s1 + t * st + e)];
                    const double x0 = xe;
                    xe              = x0 + kGradEps;
                    const double lp = loss(a);
                    xe              = x0 - kGradEps;
                    const double lm = loss(a);
                    xe              = x0;
                    num.push_back((lp - lm) / (2 * kGradEps));
                }
    auto r = all_close(g, num, kGradAtol, kGradRtol);
    if (!r) r << " (d" << name << ")";
    return r;
}

void gradcheck(const AttnSpec& s) {
    auto a = make_attn<double>(s);
    ref::attention_forward(a.p);
    ref::attention_backward(a.p, a.g);
    const std::vector<double> dq = a.dq, dk = a.dk, dv = a.dv;
    // The analytic gradient must be usable (no NaN) before comparing.
    for (double x : dq) ASSERT_TRUE(std::isfinite(x));
    const auto& p = a.p;
    EXPECT_TRUE(gradcheck_input(a, a.q, p.B, p.H, p.Tq, p.D, p.q_stride_b, p.q_stride_h,
                                p.q_stride_t, dq, "q"));
    EXPECT_TRUE(gradcheck_input(a, a.k, p.B, p.Hkv, p.Tk, p.D, p.k_stride_b, p.k_stride_h,
                                p.k_stride_t, dk, "k"));
    EXPECT_TRUE(gradcheck_input(a, a.v, p.B, p.Hkv, p.Tk, p.Dv, p.v_stride_b, p.v_stride_h,
                                p.v_stride_t, dv, "v"));
}

TEST(AttentionRefKernels, Gradcheck_Plain) {
    AttnSpec s;
    s.B = 2, s.H = 2, s.Tq = 3, s.Tk = 5, s.D = 3, s.Dv = 2, s.scale = 0.7f;
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_CausalBottomRightAndValidLens2d) {
    AttnSpec s;
    s.B = 2, s.H = 1, s.Tq = 3, s.Tk = 5, s.D = 4, s.causal = CausalAlign::bottom_right;
    s.valid_lens_rank = 2, s.valid_lens = {5, 2, 0, 4, 4, 1};  // a row with valid_len 0
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_CausalTopLeftTqGreaterTk) {
    AttnSpec s;
    s.H = 2, s.Tq = 5, s.Tk = 3, s.D = 2, s.causal = CausalAlign::top_left;
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_BoolAndAdditiveMaskWithMaskedRow) {
    AttnSpec s;
    s.B = 1, s.H = 2, s.Tq = 4, s.Tk = 5, s.D = 3, s.mask = MaskKind::both;
    s.masked_rows = {0, 1, 2};
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_DropoutGqaStrided) {
    AttnSpec s;
    s.B = 1, s.H = 4, s.Hkv = 2, s.Tq = 3, s.Tk = 4, s.D = 3, s.dropout = 0.3f, s.strided = true;
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_SoftcapAndAlibi) {
    AttnSpec s;  // a cap of 0.8 on logits up to ~3: tanh well into its curve
    s.B = 2, s.H = 2, s.Tq = 4, s.Tk = 5, s.D = 3, s.amp = 1.5f, s.softcap = 0.8f;
    gradcheck(s);
    s.alibi = {0.5f, 0.125f};
    gradcheck(s);
    s.softcap = 0.0f, s.causal = CausalAlign::bottom_right, s.mask = MaskKind::additive;
    gradcheck(s);
}

TEST(AttentionRefKernels, Gradcheck_SlidingWindow) {
    AttnSpec s;  // top-left window (1, 0) with valid_lens; rows 0 and 1 of batch 1 see no key
    s.B = 2, s.H = 2, s.Tq = 5, s.Tk = 6, s.D = 3, s.window_left = 1, s.window_right = 0;
    s.valid_lens_rank = 2, s.valid_lens = {6, 6, 6, 6, 6, 0, 0, 6, 6, 6};
    gradcheck(s);
    AttnSpec r;  // bottom-right, both sides bounded, Tq < Tk
    r.H = 2, r.Tq = 3, r.Tk = 7, r.D = 2, r.window_left = 2, r.window_right = 1, r.window_shift = 4;
    gradcheck(r);
}

// The window's visible keys, derived by hand: query i (aligned position i + shift) sees keys
// [i + shift - left, i + shift + right], clipped to [0, Tk - 1] and by valid_lens / causal.
TEST(AttentionRefKernels, SlidingWindowKeyRangesByHand) {
    kernels::AttentionParams<double> p;
    p.B = 1, p.Tq = 4, p.Tk = 6;
    p.window_left = 1, p.window_right = 2;  // top-left
    const int64_t first_tl[] = {0, 0, 1, 2}, last_tl[] = {2, 3, 4, 5};
    for (int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(kernels::attention_key_first(p, i), first_tl[i]) << i;
        EXPECT_EQ(kernels::attention_key_limit(p, 0, i), last_tl[i]) << i;
    }
    p.window_shift = 2, p.window_left = 0, p.window_right = 0;  // bottom-right, only the diagonal
    for (int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(kernels::attention_key_first(p, i), i + 2);
        EXPECT_EQ(kernels::attention_key_limit(p, 0, i), i + 2);
    }
    p.causal = kernels::CausalAlign::top_left;  // causal top-left cuts every row before its window
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(kernels::attention_key_limit(p, 0, i), -1) << "empty window " << i;
    p.causal = kernels::CausalAlign::none, p.window_shift = 0, p.window_left = 3, p.window_right = -1;
    const int64_t v[] = {2};
    p.valid_lens = v, p.valid_lens_rank = 1;
    EXPECT_EQ(kernels::attention_key_limit(p, 0, 0), 1);
    EXPECT_EQ(kernels::attention_key_limit(p, 0, 3), 1);   // keys 0..1 of window 0..6
    EXPECT_EQ(kernels::attention_key_first(p, 3), 0);
    p.window_left = 1;
    EXPECT_EQ(kernels::attention_key_limit(p, 0, 3), -1);  // window starts at key 2, length 2
}

// Index-derived masks mean exactly what the equivalent explicit bool mask means.
TEST(AttentionRefKernels, ValidLensAndCausalEqualExplicitBoolMask) {
    for (int variant = 0; variant < 6; ++variant) {
        AttnSpec s;
        s.B = 2, s.H = 2, s.Tq = 4, s.Tk = 6, s.D = 3;
        if (variant == 4) s.window_left = 1, s.window_right = 1;
        if (variant == 5) s.window_left = 0, s.window_right = 3, s.window_shift = 2, s.valid_lens_rank = 1,
                          s.valid_lens = {5, 3};
        if (variant == 0) s.valid_lens_rank = 1, s.valid_lens = {3, 6};
        if (variant == 1) s.valid_lens_rank = 2, s.valid_lens = {1, 2, 0, 6, 5, 4, 3, 2};
        if (variant == 2) s.causal = CausalAlign::top_left;
        if (variant == 3) s.causal = CausalAlign::bottom_right;
        auto a = make_attn<double>(s);  // resolves Hkv/Dv
        AttnSpec m = a.spec;
        m.valid_lens_rank = 0, m.causal = CausalAlign::none;
        m.window_left = m.window_right = -1, m.window_shift = 0;
        m.mask = MaskKind::boolean, m.mask_keep = 2.0;  // all kept, then cleared below
        auto bm = make_attn<double>(m);
        // Clear the entries the index mask removes, then compare through a fresh AttnData whose
        // bool mask buffer is this one.
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.H; ++h)
                for (int64_t i = 0; i < s.Tq; ++i)
                    for (int64_t j = 0; j < s.Tk; ++j)
                        bm.bool_mask[size_t(((b * s.H + h) * s.Tq + i) * s.Tk + j)] =
                            j <= kernels::attention_key_limit(a.p, b, i) &&
                            j >= kernels::attention_key_first(a.p, i);
        ref::attention_forward(a.p);
        ref::attention_backward(a.p, a.g);
        ref::attention_forward(bm.p);
        ref::attention_backward(bm.p, bm.g);
        EXPECT_LE(max_err(logical_out(a), logical_out(bm)), 1e-12) << variant;
        EXPECT_LE(max_err(a.lse, to_double(bm.lse)), 1e-12) << variant;
        EXPECT_LE(max_err(a.dq, to_double(bm.dq)), 1e-12) << variant;
        EXPECT_LE(max_err(a.dk, to_double(bm.dk)), 1e-12) << variant;
        EXPECT_LE(max_err(a.dv, to_double(bm.dv)), 1e-12) << variant;
    }
}

TEST(AttentionRefKernels, AdditiveMinusInfEqualsBoolFalse) {
    AttnSpec s;
    s.B = 1, s.H = 2, s.Tq = 5, s.Tk = 7, s.D = 4, s.mask = MaskKind::boolean;
    auto a = make_attn<double>(s);
    auto c = make_attn<double>(s);
    c.add_mask.assign(a.bool_mask.size(), 0.0);
    for (size_t t = 0; t < a.bool_mask.size(); ++t)
        if (!a.bool_mask[t]) c.add_mask[t] = -std::numeric_limits<double>::infinity();
    c.p.bool_mask = nullptr, c.p.additive_mask = c.add_mask.data();
    ref::attention_forward(a.p);
    ref::attention_forward(c.p);
    EXPECT_LE(max_err(logical_out(a), logical_out(c)), 1e-12);
    EXPECT_LE(max_err(a.lse, c.lse), 1e-12);
}

// A row with every key masked: output 0, lse -inf, no gradient through it, never NaN.
TEST(AttentionRefKernels, FullyMaskedRowsGiveZero) {
    AttnSpec s;
    s.B = 2, s.H = 1, s.Tq = 3, s.Tk = 4, s.D = 2;
    s.valid_lens_rank = 1, s.valid_lens = {0, 2};  // batch 0: every row masked
    auto a = make_attn<double>(s);
    ref::attention_forward(a.p);
    ref::attention_backward(a.p, a.g);
    for (int64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(a.lse[size_t(i)], -std::numeric_limits<double>::infinity());
        EXPECT_TRUE(std::isfinite(a.lse[size_t(3 + i)]));
        for (int64_t e = 0; e < 2; ++e) {
            EXPECT_EQ(a.out[size_t(i * 2 + e)], 0.0);
            EXPECT_EQ(a.dq[size_t(i * 2 + e)], 0.0);
        }
    }
    for (size_t t = 0; t < 4 * 2; ++t) {
        EXPECT_EQ(a.dk[t], 0.0);
        EXPECT_EQ(a.dv[t], 0.0);
    }
    for (size_t t = 8; t < 16; ++t) EXPECT_TRUE(std::isfinite(a.dk[t]));
    // batch 1, keys 2 and 3 are masked: they get no gradient.
    for (size_t t = 8 + 4; t < 16; ++t) {
        EXPECT_EQ(a.dk[t], 0.0);
        EXPECT_EQ(a.dv[t], 0.0);
    }
}

// D2L 11.3 check (ZH edition): keys all ones make the weights uniform over the valid keys.
TEST(AttentionRefKernels, D2lUniformWeightsOverValidKeys) {
    AttnSpec s;
    s.B = 2, s.Tq = 1, s.Tk = 10, s.D = 2, s.Dv = 4, s.valid_lens_rank = 1, s.valid_lens = {2, 6};
    auto a = make_attn<double>(s);
    std::fill(a.k.begin(), a.k.end(), 1.0);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t j = 0; j < 10; ++j)
            for (int64_t e = 0; e < 4; ++e) a.v[size_t((b * 10 + j) * 4 + e)] = double(j * 4 + e);
    ref::attention_forward(a.p);
    const std::vector<double> want = {2, 3, 4, 5, 10, 11, 12, 13};
    EXPECT_TRUE(all_close(logical_out(a), want, 1e-12, 0));
}



// The keep rate is 1 - p within 5 standard errors (n = 52,000 Bernoulli draws per p).
TEST(AttentionRefKernels, DropoutKeepRateIsOneMinusP) {
    for (float pd : {0.1f, 0.5f, 0.9f}) {
        auto       a    = make_attn<float>(dropout_probe_spec(pd));
        const auto keep = dropout_mask_via([](AttnData<float>& x) { ref::attention_forward(x.p); }, a);
        double     kept = 0;
        for (uint8_t k : keep) kept += k;
        const double n = double(keep.size()), rate = kept / n;
        EXPECT_NEAR(rate, 1.0 - pd, 5.0 * std::sqrt(pd * (1.0 - pd) / n)) << "p = " << pd;
    }
}

}  // namespace
}  // namespace qkv::test
