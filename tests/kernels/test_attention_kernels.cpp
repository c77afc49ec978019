// Attention kernels: reference (ref/attention.h) semantics and float64 gradcheck, and the fast flash
// kernel (cpu/flash_attention.h) against ref<double> with the flash-attention rule
// err_fast <= kErrFactor * err_ref32 + kErrFloor on every path (AVX-512, AVX2, scalar) this CPU has.
// Pointer-level: no Tensor. Sizes sit next to the kernel's tile edges (64 queries x 128 keys).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/params.h"
#include "kernels/ref/attention.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/philox.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

using kernels::CausalAlign;
namespace ref = kernels::ref;
namespace cpu = kernels::cpu;


enum class MaskKind { none, boolean, additive, both };
// Broadcast shape of a bool/additive mask: full (B, H, Tq, Tk), key padding (B, 1, 1, Tk), or a
// shared (Tq, Tk) with zero batch/head strides, or transposed storage (strides not last-dim-1).
enum class MaskShape { full, key_padding, shared, transposed };

struct AttnSpec {
    int64_t B = 1, H = 1, Hkv = 0, Tq = 8, Tk = 8, D = 8, Dv = 0;  // Hkv, Dv: 0 means H, D
    std::vector<int64_t>   valid_lens;  // (B) or (B * Tq) entries
    int                    valid_lens_rank = 0;
    kernels::CausalAlign   causal          = kernels::CausalAlign::none;
    MaskKind               mask            = MaskKind::none;
    MaskShape              mask_shape      = MaskShape::full;
    double                 mask_keep       = 0.7;  // fraction of kept entries in a random mask
    float                  dropout         = 0.0f;
    uint64_t               seed            = 1;
    float                  scale           = 0.0f;  // 0: 1/sqrt(D)
    bool                   strided         = false;  // q/k/v/out stored as (B, T, H, D)
    float                  amp             = 1.0f;   // inputs uniform in [-amp, amp)
    std::vector<int64_t>   masked_rows;  // (b, h, i) triples whose mask row is all False
    // Scores that drift along the keys: q[..][0] = 1 and k[..][j][0] += key_ramp * j / Tk (in
    // float, so float and double data agree); not with `strided`.
    float                  key_ramp        = 0.0f;
    // Sliding window (AttentionParams::window_*): -1 unbounded; shift Tk - Tq for bottom-right.
    int64_t                window_left = -1, window_right = -1, window_shift = 0;
    float                  softcap = 0.0f;         // AttentionParams::softcap
    std::vector<float>     alibi;                  // (H) ALiBi slopes, empty: none
};

template <class T>
struct AttnData {
    AttnSpec                     spec;
    std::vector<T>               q, k, v, out, lse, lse_lo, dout, dq, dk, dv, add_mask;
    std::vector<uint8_t>         bool_mask;
    std::vector<int64_t>         valid_lens;
    std::vector<float>           alibi;
    kernels::AttentionParams<T>  p;
    kernels::AttentionGradParams<T> g;
};

/// Builds the problem in T from the same float random numbers (so float and double agree).
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

/// Gathers out (B, H, Tq, Dv) in logical order from its possibly strided storage.
template <class T>
std::vector<double> logical_out(const AttnData<T>& a) {
    const auto&         p = a.p;
    std::vector<double> r;
    r.reserve(size_t(p.B * p.H * p.Tq * p.Dv));
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < p.Tq; ++i)
                for (int64_t e = 0; e < p.Dv; ++e)
                    r.push_back(double(p.out[b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t + e]));
    return r;
}

/// Max |x - ref| over finite pairs; +inf when the -inf/NaN/finite pattern differs anywhere.
template <class A>
double max_err(const std::vector<A>& x, const std::vector<double>& ref) {
    if (x.size() != ref.size()) return std::numeric_limits<double>::infinity();
    double m = 0;
    for (size_t t = 0; t < x.size(); ++t) {
        const double a = double(x[t]), b = ref[t];
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::infinity();
        if (std::isinf(a) || std::isinf(b)) {
            if (a != b) return std::numeric_limits<double>::infinity();
            continue;
        }
        m = std::max(m, std::abs(a - b));
    }
    return m;
}

template <class A>
std::vector<double> to_double(const std::vector<A>& x) {
    return std::vector<double>(x.begin(), x.end());
}

/// The flash-attention rule: err(fast) <= kErrFactor * err(ref32) + kErrFloor, both vs ref64.
inline ::testing::AssertionResult within_rule(const char* what, double err_fast, double err_ref32) {
    if (err_fast <= kErrFactor * err_ref32 + kErrFloor) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": err_fast " << err_fast << " > " << kErrFactor
                                         << " * err_ref32 " << err_ref32 << " + " << kErrFloor;
}

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


// Dropout mask read back through the kernel: q = 0 makes P uniform (1/Tk) and v = identity
// (Dv = Tk) makes out_ij = Z_ij / Tk, so keep_ij = out_ij * Tk * (1 - p) is 0 or 1.
template <class Run>
std::vector<uint8_t> dropout_mask_via(Run run, AttnData<float>& a) {
    std::fill(a.q.begin(), a.q.end(), 0.0f);
    std::fill(a.v.begin(), a.v.end(), 0.0f);
    const int64_t Tk = a.p.Tk;
    for (int64_t b = 0; b < a.p.B * a.p.Hkv; ++b)
        for (int64_t j = 0; j < Tk; ++j) a.v[size_t((b * Tk + j) * Tk + j)] = 1.0f;
    run(a);
    std::vector<uint8_t> keep;
    for (double o : logical_out(a)) {
        const double k = o * double(Tk) * (1.0 - double(a.p.dropout_p));
        EXPECT_TRUE(std::abs(k) < 1e-5 || std::abs(k - 1) < 1e-5) << k;
        keep.push_back(k > 0.5);
    }
    return keep;
}

AttnSpec dropout_probe_spec(float p) {
    AttnSpec s;
    s.B = 2, s.H = 2, s.Tq = 100, s.Tk = 130, s.D = 4, s.Dv = 130, s.dropout = p;
    return s;
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


// ---------------------------------------------------------------------------------------------
// Fast flash kernel vs the reference, on every instruction-set path this CPU supports.

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

struct Results {
    std::vector<double> out, lse, dq, dk, dv;
};

template <class T>
Results results(const AttnData<T>& a) {
    return {logical_out(a), to_double(a.lse), to_double(a.dq), to_double(a.dk), to_double(a.dv)};
}

Results run_fast(const AttnSpec& s, cpu::Isa isa, bool bwd = true) {
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
void expect_fast_matches_ref(const AttnSpec& s, bool bwd = true) {
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

AttnSpec shape(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv = 0) {
    AttnSpec s;
    s.B = B, s.H = H, s.Tq = Tq, s.Tk = Tk, s.D = D, s.Dv = Dv;
    return s;
}

// Sizes next to the tile edges (64 queries x 128 keys on AVX-512/AVX2, 32 x 64 scalar) and head
// dims 1..256 with odd ones; each (Tq, Tk) in {1, 7, 63, 64, 65, 97, 128, 200, 1000} and each
// D in {1, 8, 31, 64, 100, 128, 256} appears at least once.
TEST(FlashAttentionKernels, FastMatchesRef_TileEdgeSizes) {
    const int64_t cases[][5] = {
        {1, 1, 1, 1, 0},    {7, 200, 8, 8, 0},     {63, 65, 31, 31, 0},  {64, 64, 64, 64, 0},
        {65, 63, 100, 100, 0}, {97, 128, 128, 128, 0}, {128, 97, 256, 256, 0}, {200, 7, 64, 33, 0},
        {1, 1000, 64, 64, 0}, {1000, 1, 8, 8, 0},  {129, 257, 17, 1, 0},  {300, 1000, 64, 64, 0},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << c[0] << " Tk " << c[1] << " D " << c[2]
                                          << " Dv " << c[3]);
        expect_fast_matches_ref(shape(1, 2, c[0], c[1], c[2], c[3]));
    }
}

// Few queries (Tq <= one vector: incremental decoding) take query blocks of one vector instead
// of 64 rows: every mask kind, causal alignments, dropout and GQA on that path too.
TEST(FlashAttentionKernels, FastMatchesRef_FewQueriesEveryFeature) {
    for (int64_t tq : {1, 3, 8, 16}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(3, 4, tq, 37, 64);
        s.valid_lens_rank = 1, s.valid_lens = {0, 12, 500};
        expect_fast_matches_ref(s);
        s.valid_lens_rank = 2, s.valid_lens.clear();
        for (int64_t t = 0; t < 3 * tq; ++t) s.valid_lens.push_back((t * 7) % 40);
        expect_fast_matches_ref(s);
        for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
            AttnSpec c = shape(2, 2, tq, 29, 16);
            c.causal   = align;
            expect_fast_matches_ref(c);
        }
        AttnSpec m    = shape(2, 2, tq, 50, 24);
        m.mask        = MaskKind::both;
        m.mask_shape  = MaskShape::full;
        expect_fast_matches_ref(m);
        AttnSpec d = shape(2, 2, tq, 45, 32);
        d.dropout = 0.2f, d.mask = MaskKind::additive, d.mask_shape = MaskShape::key_padding;
        expect_fast_matches_ref(d);
        AttnSpec g = shape(2, 4, tq, 33, 32, 48);
        g.Hkv = 1, g.strided = true;
        expect_fast_matches_ref(g);
    }
}

TEST(FlashAttentionKernels, FastMatchesRef_ValidLens) {
    AttnSpec s = shape(3, 2, 97, 200, 31);
    s.valid_lens_rank = 1, s.valid_lens = {0, 130, 500};  // 0: fully masked batch; > Tk: clamped
    expect_fast_matches_ref(s);
    s.valid_lens_rank = 2;
    s.valid_lens.clear();
    for (int64_t t = 0; t < 3 * 97; ++t) s.valid_lens.push_back((t * 37) % 230);  // incl. 0, > Tk
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_CausalBothAlignments) {
    for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right})
        for (auto [tq, tk] : {std::pair<int64_t, int64_t>{97, 300}, {300, 97}, {200, 200}}) {
            SCOPED_TRACE(::testing::Message() << "align " << int(align) << " Tq " << tq << " Tk " << tk);
            AttnSpec s = shape(1, 2, tq, tk, 64);
            s.causal   = align;
            expect_fast_matches_ref(s);
        }
}

// Sliding windows on the fast kernel: both alignments, one-sided and two-sided, windows narrower
// and wider than a key tile, Tq != Tk, with valid_lens, causal, masks and dropout, the few-query
// path, and rows whose window is empty (window entirely past valid_lens).
TEST(FlashAttentionKernels, FastMatchesRef_SlidingWindow) {
    struct W {
        int64_t tq, tk, left, right;
        bool bottom_right;
    };
    const W cases[] = {{300, 300, 0, 0, false},   {300, 300, 16, 0, false}, {300, 300, 130, 5, false},
                       {200, 500, 64, 64, true},  {500, 200, 3, -1, false}, {257, 257, -1, 40, false},
                       {97, 1000, 256, 0, true},  {1, 700, 128, 0, true},   {8, 300, 20, 20, true},
                       {129, 129, 200, 200, false}};
    for (const W& w : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << w.tq << " Tk " << w.tk << " window (" << w.left << ", "
                                          << w.right << ")" << (w.bottom_right ? " bottom-right" : ""));
        AttnSpec s = shape(1, 2, w.tq, w.tk, 32);
        s.window_left = w.left, s.window_right = w.right, s.window_shift = w.bottom_right ? w.tk - w.tq : 0;
        expect_fast_matches_ref(s);
    }
    AttnSpec c = shape(2, 2, 260, 260, 24);
    c.window_left = 70, c.window_right = 0, c.causal = CausalAlign::top_left;
    c.valid_lens_rank = 1, c.valid_lens = {260, 100};  // batch 1: rows >= 170 see no key
    expect_fast_matches_ref(c);
    c.mask = MaskKind::both, c.dropout = 0.1f, c.Hkv = 1;
    expect_fast_matches_ref(c);
}

// Soft cap and ALiBi on the fast kernel (the masked two-pass path), alone and with masks, causal
// bottom-right, a window, dropout, GQA and the few-query path.
TEST(FlashAttentionKernels, FastMatchesRef_SoftcapAndAlibi) {
    const std::vector<float> slopes = {0.5f, 0.25f, 0.0625f, 0.01f};
    for (int64_t tq : {3, 100, 200}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(2, 4, tq, 150, 32);
        s.amp = 2.0f, s.softcap = 5.0f;
        expect_fast_matches_ref(s);
        s.softcap = 0.0f, s.alibi = slopes;
        expect_fast_matches_ref(s);
        s.softcap = 3.0f, s.causal = CausalAlign::bottom_right, s.mask = MaskKind::both, s.Hkv = 2;
        expect_fast_matches_ref(s);
        s.mask = MaskKind::none, s.causal = CausalAlign::none, s.dropout = 0.15f;
        s.window_left = 40, s.window_right = 10, s.window_shift = 150 - tq;
        expect_fast_matches_ref(s);
    }
}

TEST(FlashAttentionKernels, FastMatchesRef_CausalWithValidLens) {
    AttnSpec s = shape(2, 2, 150, 150, 40);
    s.causal = CausalAlign::top_left, s.valid_lens_rank = 1, s.valid_lens = {70, 150};
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_BoolAndAdditiveMasks) {
    for (auto kind : {MaskKind::boolean, MaskKind::additive, MaskKind::both})
        for (auto shp : {MaskShape::full, MaskShape::key_padding, MaskShape::shared,
                         MaskShape::transposed}) {
            SCOPED_TRACE(::testing::Message() << "kind " << int(kind) << " shape " << int(shp));
            AttnSpec s    = shape(2, 2, 70, 150, 24);
            s.mask        = kind;
            s.mask_shape  = shp;
            s.masked_rows = {1, 1, 5, 0, 0, 69};
            expect_fast_matches_ref(s);
        }
}

TEST(FlashAttentionKernels, FastMatchesRef_GqaMqaStrided) {
    AttnSpec s = shape(2, 4, 80, 140, 32, 48);
    s.Hkv = 2, s.strided = true;
    expect_fast_matches_ref(s);
    s.Hkv = 1, s.causal = CausalAlign::bottom_right;
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_Dropout) {
    AttnSpec s = shape(2, 2, 97, 200, 32);
    s.dropout = 0.2f, s.causal = CausalAlign::bottom_right, s.mask = MaskKind::additive;
    s.mask_shape = MaskShape::key_padding;
    expect_fast_matches_ref(s);
}

// Logits of magnitude ~1e4 (q, k ~ +-100, D = 1, scale 1): no overflow, no NaN, and with the
// lse residual (AttentionParams::lse_lo) the 2x rule holds. Without it the backward's P carries
// the rounding of lse (~ulp(1e4)/2 relative): still finite, checked below.
TEST(FlashAttentionKernels, FastMatchesRef_LargeLogits) {
    AttnSpec s = shape(1, 2, 70, 140, 1);
    s.amp = 100.0f, s.scale = 1.0f;
    expect_fast_matches_ref(s);
    for (auto isa : isas()) {
        auto a     = make_attn<float>(s);
        a.p.lse_lo = nullptr;
        flash_forward(a.p, isa);
        flash_backward(a.p, a.g, isa);
        const Results r = results(a);
        for (const auto* x : {&r.out, &r.lse, &r.dq, &r.dk, &r.dv})
            for (double e : *x) ASSERT_TRUE(std::isfinite(e)) << cpu::isa_name(isa);
    }
}

// The forward keeps a row's softmax shift across unmasked key blocks until a block's sum of
// e^(s - shift) passes 2^20, then recomputes that block with its maximum (lazy rescaling). Scores
// rising by ~38 along each 128-key block force that recomputation in every block and inside the
// first tile's span; falling scores never move the shift and underflow to 0 far from the max;
// a single late spike moves it once. Checked against the reference with the 2x rule: out and
// lse (what the lazy shift can change; lse lost up to 2x when log l was summed in float), and the
// gradients for the 64-row blocks. With one or a few queries the gradients are left out: dq
// there is dominated by the backward's D = rowsum(dO o O), which multiplies the rounding of O by
// |sum_j P_j k_j| (~40 here) while the math path forms D from P and dP, so a few rows give the
// 2x rule no margin with either forward (the two-pass forward gave dq 3.4e-6 against 3.2e-6).
TEST(FlashAttentionKernels, FastMatchesRef_ShiftingRowMaxima) {
    for (int64_t tq : {70, 1, 16}) {  // 64-row query blocks; one-vector blocks (decoding)
        for (float ramp : {300.0f, -300.0f, 40.0f}) {
            SCOPED_TRACE(::testing::Message() << "Tq " << tq << " key_ramp " << ramp);
            AttnSpec s = shape(2, 2, tq, 1000, 8);
            s.scale = 1.0f, s.key_ramp = ramp;
            expect_fast_matches_ref(s, /*bwd=*/tq > 16);
        }
    }
    AttnSpec s = shape(1, 2, 100, 700, 16);
    s.scale     = 1.0f;
    auto spike  = [](auto& a) {  // key 530 aligned with every query: a score ~+50 above the rest
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t d = 0; d < 16; ++d) a.k[size_t((h * 700 + 530) * 16 + d)] = 0;
        for (size_t i = 0; i < a.q.size(); i += 16) a.q[i] = 1;
        for (int64_t h = 0; h < 2; ++h) a.k[size_t((h * 700 + 530) * 16)] = 50;
    };
    auto r64 = make_attn<double>(s);
    auto r32 = make_attn<float>(s);
    spike(r64), spike(r32);
    ref::attention_forward(r64.p), ref::attention_forward(r32.p);
    const Results want = results(r64), base = results(r32);
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        auto a = make_attn<float>(s);
        spike(a);
        flash_forward(a.p, isa);
        const Results got = results(a);
        EXPECT_TRUE(within_rule("out", max_err(got.out, want.out), max_err(base.out, want.out)));
        EXPECT_TRUE(within_rule("lse", max_err(got.lse, want.lse), max_err(base.lse, want.lse)));
    }
}

// Fully masked rows and key blocks: out 0, lse -inf, zero gradients, exactly; keys 64..255 masked
// for every query of batch 0 (whole key blocks), every key of batch 1 row 3.
TEST(FlashAttentionKernels, FullyMaskedRowsAndBlocksGiveZero) {
    AttnSpec s = shape(2, 1, 100, 300, 16);
    s.mask = MaskKind::boolean, s.mask_keep = 2.0, s.mask_shape = MaskShape::full;
    auto a0 = make_attn<float>(s);
    for (int64_t i = 0; i < 100; ++i)
        for (int64_t j = 64; j < 256; ++j) a0.bool_mask[size_t(i * 300 + j)] = 0;
    for (int64_t j = 0; j < 300; ++j) a0.bool_mask[size_t((100 + 3) * 300 + j)] = 0;
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        auto a = a0;
        a.p.q = a.q.data(), a.p.k = a.k.data(), a.p.v = a.v.data(), a.p.out = a.out.data();
        a.p.lse = a.lse.data(), a.p.lse_lo = a.lse_lo.data(), a.p.bool_mask = a.bool_mask.data();
        a.g.dout = a.dout.data(), a.g.dq = a.dq.data(), a.g.dk = a.dk.data(), a.g.dv = a.dv.data();
        flash_forward(a.p, isa);
        flash_backward(a.p, a.g, isa);
        EXPECT_EQ(a.lse[100 + 3], -INFINITY);
        for (int64_t e = 0; e < 16; ++e) {
            EXPECT_EQ(a.out[size_t((100 + 3) * 16 + e)], 0.0f);
            EXPECT_EQ(a.dq[size_t((100 + 3) * 16 + e)], 0.0f);
        }
        for (int64_t j = 64; j < 256; ++j)
            for (int64_t e = 0; e < 16; ++e) {
                ASSERT_EQ(a.dk[size_t(j * 16 + e)], 0.0f) << j;
                ASSERT_EQ(a.dv[size_t(j * 16 + e)], 0.0f) << j;
            }
        for (float x : a.dq) ASSERT_TRUE(std::isfinite(x));
    }
    // And all values against the reference.
    expect_fast_matches_ref(s);  // (random mask variant of the same shape)
}

// valid_len 0 for a whole batch element and Tq > Tk bottom-right causal (early rows see no key).
TEST(FlashAttentionKernels, FullyMaskedByIndexGiveZero) {
    AttnSpec s = shape(2, 2, 130, 64, 8);
    s.valid_lens_rank = 1, s.valid_lens = {0, 64}, s.causal = CausalAlign::bottom_right;
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const Results r = run_fast(s, isa);
        for (int64_t t = 0; t < 2 * 130; ++t) EXPECT_EQ(r.lse[size_t(t)], -INFINITY);
        for (int64_t t = 0; t < 2 * 130 * 8; ++t) {
            ASSERT_EQ(r.out[size_t(t)], 0.0);
            ASSERT_EQ(r.dq[size_t(t)], 0.0);
        }
        for (int64_t t = 0; t < 2 * 64 * 8; ++t) ASSERT_EQ(r.dk[size_t(t)], 0.0);
        // batch 1: rows i < Tq - Tk = 66 see no key.
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t i = 0; i < 130; ++i)
                EXPECT_EQ(std::isinf(r.lse[size_t((2 + h) * 130 + i)]), i < 66) << i;
    }
    expect_fast_matches_ref(s);
}

// The fast kernel drops exactly the entries the reference drops.
TEST(FlashAttentionKernels, DropoutMaskMatchesReference) {
    auto       a    = make_attn<float>(dropout_probe_spec(0.3f));
    const auto want = dropout_mask_via([](AttnData<float>& x) { ref::attention_forward(x.p); }, a);
    for (auto isa : isas()) {
        auto       b   = make_attn<float>(dropout_probe_spec(0.3f));
        const auto got = dropout_mask_via(
            [isa](AttnData<float>& x) { flash_forward(x.p, isa); }, b);
        EXPECT_EQ(got, want) << cpu::isa_name(isa);
    }
}

// Same seed -> same outputs and gradients, on 1 and on 2 threads. out, lse, dk, dv are bit-equal;
// dq too when each thread owns whole heads (B * Hkv >= threads). With one head on 2 threads the
// backward splits key blocks and sums private dQs: dq then equals the 1-thread dq to rounding.
TEST(FlashAttentionKernels, DropoutDeterministicAcrossThreadCounts) {
    const int saved = omp_get_max_threads();
    for (int64_t B : {1, 2}) {
        AttnSpec s = shape(B, 1, 150, 400, 32);
        s.dropout = 0.25f, s.causal = CausalAlign::top_left;
        omp_set_num_threads(1);
        const Results one = run_fast(s, cpu::simd_isa());
        omp_set_num_threads(2);
        const Results two = run_fast(s, cpu::simd_isa());
        const Results two_again = run_fast(s, cpu::simd_isa());
        EXPECT_EQ(one.out, two.out);
        EXPECT_EQ(one.lse, two.lse);
        EXPECT_EQ(one.dk, two.dk);
        EXPECT_EQ(one.dv, two.dv);
        EXPECT_EQ(two.dq, two_again.dq);
        if (B == 2) EXPECT_EQ(one.dq, two.dq);
        else EXPECT_TRUE(all_close(two.dq, one.dq, 1e-6, 1e-5));  // fp32 re-association only
    }
    omp_set_num_threads(saved);
}

// Both backward work splits (whole heads per thread; key blocks per thread) against the reference.
TEST(FlashAttentionKernels, BackwardBothParallelSplits) {
    const int saved = omp_get_max_threads();
    AttnSpec  s     = shape(1, 1, 260, 700, 64);
    s.causal        = CausalAlign::top_left;
    for (int nt : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << nt << " threads");
        omp_set_num_threads(nt);
        expect_fast_matches_ref(s);
    }
    omp_set_num_threads(saved);
}

TEST(FlashAttentionKernels, EmptyShapesAndNoLse) {
    // Tk = 0: every row fully masked; Tq = 0: dk and dv are written as 0.
    auto a = make_attn<float>(shape(1, 2, 5, 0, 4));
    cpu::flash_attention_forward(a.p);
    cpu::flash_attention_backward(a.p, a.g);
    for (float x : a.out) EXPECT_EQ(x, 0.0f);
    for (float x : a.lse) EXPECT_EQ(x, -INFINITY);
    for (float x : a.dq) EXPECT_EQ(x, 0.0f);
    // lse may be omitted (inference): out is unchanged.
    for (auto isa : isas()) {
        auto c = make_attn<float>(shape(2, 2, 70, 130, 24));
        auto d = make_attn<float>(shape(2, 2, 70, 130, 24));
        flash_forward(c.p, isa);
        d.p.lse = nullptr, d.p.lse_lo = nullptr;
        flash_forward(d.p, isa);
        EXPECT_EQ(c.out, d.out) << cpu::isa_name(isa);
    }
    auto b = make_attn<float>(shape(1, 2, 0, 5, 4));
    cpu::flash_attention_forward(b.p);
    cpu::flash_attention_backward(b.p, b.g);
    for (float x : b.dk) EXPECT_EQ(x, 0.0f);
    for (float x : b.dv) EXPECT_EQ(x, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// bf16 compute (AttentionParams::bf16): the fast kernel on bf16-rounded q, k, v, dO against float64
// math on the same rounded inputs (the reference). The flash rule's baseline is a plain
// bf16 computation (plain_bf16) instead of float32: err_fast <= kErrFactor·err_plain_bf16 + floor.

/// make_attn with q, k, v and dout rounded to bf16 (the values the bf16 path computes with).
template <class T>
AttnData<T> make_attn_bf16(const AttnSpec& s) {
    auto a = make_attn<T>(s);
    for (auto* x : {&a.q, &a.k, &a.v, &a.dout})
        for (auto& e : *x) e = T(round_to_bf16(float(e)));
    return a;
}

/// Attention as a framework computing in bf16 does it: every product's result is rounded to bf16
/// (scores q·kᵀ·scale, P·V, dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO; fp32 accumulation inside each product), the
/// softmax and its backward run in fp32 on bf16 values and round their outputs, masks and score
/// modifiers are applied in fp32 and rounded. Reads a.q, a.k, a.v, a.dout (already bf16); writes
/// a.out, a.lse (fp32, of the rounded scores) and, with bwd, a.dq, a.dk, a.dv.
void plain_bf16(AttnData<float>& a, bool bwd) {
    const auto&   p     = a.p;
    const int64_t group = p.H / p.Hkv;
    const auto    bf    = [](float x) { return round_to_bf16(x); };
    const size_t  Tk    = size_t(p.Tk);
    std::vector<float> s(Tk), P(Tk), z(Tk), dcap(Tk), dp(Tk);
    std::vector<float> dk(size_t(p.B * p.Hkv * p.Tk * p.D), 0.0f), dv(size_t(p.B * p.Hkv * p.Tk * p.Dv), 0.0f);
    const uint32_t thr  = kernels::attention_dropout_threshold(p.dropout_p);
    const float    keep = 1.0f / (1.0f - p.dropout_p);
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < p.Tq; ++i) {
                const int64_t hk    = h / group;
                const float*  qi    = p.q + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_t;
                const int64_t lim   = kernels::attention_key_limit(p, b, i);
                const int64_t first = kernels::attention_key_first(p, i);
                const int64_t mo    = b * p.m_stride_b + h * p.m_stride_h + i * p.m_stride_q;
                float         mx    = -INFINITY;
                for (int64_t j = 0; j < p.Tk; ++j) {
                    const size_t u = size_t(j);
                    dcap[u]        = 1.0f;
                    s[u]           = -INFINITY;
                    if (j > lim || j < first || (p.bool_mask && p.bool_mask[mo + j * p.m_stride_k] == 0)) continue;
                    const float* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t;
                    float        dot = 0.0f;
                    for (int64_t d = 0; d < p.D; ++d) dot += qi[d] * kj[d];
                    float x = bf(p.scale * dot);
                    if (p.softcap > 0.0f) {
                        const float t = std::tanh(x / p.softcap);
                        x             = bf(p.softcap * t);
                        dcap[u]       = 1.0f - t * t;
                    }
                    if (p.alibi_slopes) {
                        const int64_t dist = i + p.Tk - p.Tq - j;
                        x = bf(x - p.alibi_slopes[h] * float(dist < 0 ? -dist : dist));
                    }
                    if (p.additive_mask) {
                        const float am = p.additive_mask[mo + j * p.m_stride_k];
                        x              = am == -INFINITY ? -INFINITY : bf(x + am);
                    }
                    s[u] = x;
                    mx   = std::max(mx, x);
                }
                float sum = 0.0f;
                for (size_t j = 0; j < Tk; ++j) sum += mx == -INFINITY ? 0.0f : std::exp(s[j] - mx);
                for (size_t j = 0; j < Tk; ++j) P[j] = mx == -INFINITY ? 0.0f : bf(std::exp(s[j] - mx) / sum);
                a.lse[size_t((b * p.H + h) * p.Tq + i)] = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
                const uint64_t base = p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i) * p.Tk);
                for (size_t j = 0; j < Tk; ++j)
                    z[j] = p.dropout_p > 0.0f
                               ? ((philox::bits(p.dropout_seed, 0, base + j) >> 8) >= thr ? keep : 0.0f)
                               : 1.0f;
                float* oi = p.out + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                for (int64_t e = 0; e < p.Dv; ++e) {
                    float acc = 0.0f;
                    for (size_t j = 0; j < Tk; ++j) {
                        const float w = bf(P[j] * z[j]);
                        if (w != 0.0f) acc += w * p.v[b * p.v_stride_b + hk * p.v_stride_h + int64_t(j) * p.v_stride_t + e];
                    }
                    oi[e] = bf(acc);
                }
                if (!bwd) continue;
                const float* doi = a.g.dout + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                float        D   = 0.0f;
                for (size_t j = 0; j < Tk; ++j) {
                    const float* vj  = p.v + b * p.v_stride_b + hk * p.v_stride_h + int64_t(j) * p.v_stride_t;
                    float        acc = 0.0f;
                    for (int64_t e = 0; e < p.Dv; ++e) acc += doi[e] * vj[e];
                    dp[j] = bf(bf(acc) * z[j]);
                    if (P[j] != 0.0f) D += P[j] * dp[j];
                }
                float* dqi = a.g.dq + ((b * p.H + h) * p.Tq + i) * p.D;
                std::vector<float> dqa(size_t(p.D), 0.0f);
                for (size_t j = 0; j < Tk; ++j) {
                    if (P[j] == 0.0f) continue;
                    const float  ds  = bf(bf(bf(P[j] * (dp[j] - D)) * dcap[j]) * p.scale);
                    const float* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + int64_t(j) * p.k_stride_t;
                    float*       dkj = dk.data() + ((b * p.Hkv + hk) * p.Tk + int64_t(j)) * p.D;
                    float*       dvj = dv.data() + ((b * p.Hkv + hk) * p.Tk + int64_t(j)) * p.Dv;
                    for (int64_t d = 0; d < p.D; ++d) dqa[size_t(d)] += ds * kj[d], dkj[d] += ds * qi[d];
                    const float w = bf(P[j] * z[j]);
                    for (int64_t e = 0; e < p.Dv; ++e) dvj[e] += w * doi[e];
                }
                for (int64_t d = 0; d < p.D; ++d) dqi[d] = bf(dqa[size_t(d)]);
            }
    if (!bwd) return;
    for (size_t t = 0; t < dk.size(); ++t) a.g.dk[t] = round_to_bf16(dk[t]);
    for (size_t t = 0; t < dv.size(); ++t) a.g.dv[t] = round_to_bf16(dv[t]);
}

// The bf16 paths: every tier of isas() (rounded_fp32 on the fp32 tiles); where the CPU has
// AVX-512-BF16, the avx512_bf16 tier's vdpbf16ps build (Bf16AttentionPath::dot, forced even where
// `automatic` would keep the fp32 tiles) and the AMX kernels with their tiles emulated in plain
// code (set_amx_tile_emulation); where Linux grants the AMX tiles, the AMX kernels on them.
struct Bf16Path {
    cpu::Isa               isa;
    cpu::Bf16AttentionPath path;
    bool                   emulate;
    std::string            name;
};
std::vector<Bf16Path> bf16_isas() {
    std::vector<Bf16Path> out;
    for (auto isa : isas()) out.push_back({isa, cpu::Bf16AttentionPath::dot, false, cpu::isa_name(isa)});
    if (cpu::cpu_isa() >= cpu::Isa::avx512_bf16) {
        out.push_back({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot, false, "avx512_bf16 (vdpbf16ps)"});
        out.push_back({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::amx, true, "amx tiles emulated"});
    }
    if (cpu::cpu_isa() == cpu::Isa::amx && cpu::amx_permitted())
        out.push_back({cpu::Isa::amx, cpu::Bf16AttentionPath::amx, false, "amx tiles"});
    return out;
}
/// Runs a kernel call on `b`'s path: its cap, path and tile emulation, restored afterwards.
struct Bf16PathGuard {
    IsaGuard               cap;
    cpu::Bf16AttentionPath old_path;
    bool                   old_emu;
    explicit Bf16PathGuard(const Bf16Path& b)
        : cap(b.isa), old_path(cpu::set_bf16_attention_path(b.path)), old_emu(cpu::set_amx_tile_emulation(b.emulate)) {}
    ~Bf16PathGuard() {
        cpu::set_bf16_attention_path(old_path);
        cpu::set_amx_tile_emulation(old_emu);
    }
};
void flash_forward(const kernels::AttentionParams<float>& p, const Bf16Path& b) {
    const Bf16PathGuard g(b);
    cpu::flash_attention_forward(p);
}
void flash_backward(const kernels::AttentionParams<float>& p, const kernels::AttentionGradParams<float>& g,
                    const Bf16Path& b) {
    const Bf16PathGuard guard(b);
    cpu::flash_attention_backward(p, g);
}
const std::string& isa_label(const Bf16Path& b) { return b.name; }

// bf16 fast kernel (each ISA) vs float64 on the rounded inputs, baseline plain_bf16.
void expect_bf16_matches_ref(const AttnSpec& s, bool bwd = true) {
    auto r64 = make_attn_bf16<double>(s);
    auto pl  = make_attn_bf16<float>(s);
    ref::attention_forward(r64.p);
    if (bwd) ref::attention_backward(r64.p, r64.g);
    plain_bf16(pl, bwd);
    const Results want = results(r64), base = results(pl);
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(::testing::Message() << "bf16 compute, " << isa_label(isa));
        auto a   = make_attn_bf16<float>(s);
        a.p.bf16 = true;
        flash_forward(a.p, isa);
        if (bwd) flash_backward(a.p, a.g, isa);
        const Results got = results(a);
        expect_results_within_rule(got, want, base, bwd);
    }
}

TEST(FlashAttentionBf16, MatchesFloat64OnRoundedInputs_TileEdgeSizes) {
    const int64_t cases[][4] = {{1, 1, 8, 0},     {7, 200, 8, 8},     {63, 65, 31, 31},   {64, 64, 64, 64},
                                {97, 128, 128, 128}, {200, 7, 64, 33}, {300, 1000, 64, 64}, {129, 257, 256, 256}};
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << c[0] << " Tk " << c[1] << " D " << c[2] << " Dv " << c[3]);
        expect_bf16_matches_ref(shape(1, 2, c[0], c[1], c[2], c[3]));
    }
    // One (batch, head): the backward splits key blocks across threads with private dQ rows.
    expect_bf16_matches_ref(shape(1, 1, 150, 400, 64, 48));
}

// Every feature on the bf16 path: valid_lens (rank 1 and 2, incl. fully masked), both causal
// alignments, bool/additive masks with masked rows, GQA/MQA with strides, dropout, sliding
// window, soft cap and ALiBi, the few-query path.
TEST(FlashAttentionBf16, MatchesFloat64OnRoundedInputs_EveryFeature) {
    AttnSpec vl = shape(3, 2, 97, 200, 32);
    vl.valid_lens_rank = 1, vl.valid_lens = {0, 130, 500};
    expect_bf16_matches_ref(vl);
    vl.valid_lens_rank = 2, vl.valid_lens.clear();
    for (int64_t t = 0; t < 3 * 97; ++t) vl.valid_lens.push_back((t * 37) % 230);
    expect_bf16_matches_ref(vl);
    for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
        AttnSpec c = shape(1, 2, 150, 300, 64);
        c.causal   = align;
        expect_bf16_matches_ref(c);
    }
    for (auto kind : {MaskKind::boolean, MaskKind::additive, MaskKind::both}) {
        AttnSpec m    = shape(2, 2, 70, 150, 24);
        m.mask        = kind;
        m.mask_shape  = kind == MaskKind::additive ? MaskShape::key_padding : MaskShape::full;
        m.masked_rows = {1, 1, 5, 0, 0, 69};
        expect_bf16_matches_ref(m);
    }
    AttnSpec g = shape(2, 4, 80, 140, 32, 48);
    g.Hkv = 2, g.strided = true;
    expect_bf16_matches_ref(g);
    g.Hkv = 1, g.causal = CausalAlign::bottom_right;
    expect_bf16_matches_ref(g);
    AttnSpec d = shape(2, 2, 97, 200, 32);
    d.dropout = 0.2f, d.causal = CausalAlign::bottom_right;
    expect_bf16_matches_ref(d);
    AttnSpec w = shape(1, 2, 300, 300, 32);
    w.window_left = 40, w.window_right = 10;
    expect_bf16_matches_ref(w);
    w.window_left = 41, w.window_right = 0;  // odd first keys (the tile forward's V^T words start mid-word)
    expect_bf16_matches_ref(w);
    AttnSpec sc = shape(2, 4, 100, 150, 32);
    sc.amp = 2.0f, sc.softcap = 5.0f, sc.alibi = {0.5f, 0.25f, 0.0625f, 0.01f};
    expect_bf16_matches_ref(sc);
    for (int64_t tq : {1, 5, 16}) {
        AttnSpec f = shape(2, 2, tq, 77, 64);
        f.causal   = CausalAlign::bottom_right;
        expect_bf16_matches_ref(f);
    }
    // Lazy rescaling (FastMatchesRef_ShiftingRowMaxima): scores rising by ~38 per key block force
    // the recomputation of every unmasked block; falling ones never move the shift.
    for (float ramp : {300.0f, -300.0f}) {
        AttnSpec r = shape(2, 2, 70, 1000, 8);
        r.scale = 1.0f, r.key_ramp = ramp;
        expect_bf16_matches_ref(r);
    }
}

// The kernel rounds q, k, v and dO itself (into its workspace): unrounded inputs give bit for bit
// what the rounded ones give, and the inputs are not written.
TEST(FlashAttentionBf16, RoundsItsInputsItself) {
    AttnSpec s = shape(2, 4, 97, 150, 40, 24);
    s.Hkv = 2, s.strided = true, s.causal = CausalAlign::bottom_right;
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        auto raw = make_attn<float>(s), pre = make_attn_bf16<float>(s);
        const auto q0 = raw.q, k0 = raw.k, v0 = raw.v, d0 = raw.dout;
        raw.p.bf16 = pre.p.bf16 = true;
        flash_forward(raw.p, isa), flash_forward(pre.p, isa);
        flash_backward(raw.p, raw.g, isa), flash_backward(pre.p, pre.g, isa);
        EXPECT_NE(raw.q, pre.q);  // the test's inputs differ, ...
        EXPECT_EQ(raw.out, pre.out);  // ... what the kernel computes with does not
        EXPECT_EQ(raw.lse, pre.lse);
        EXPECT_EQ(raw.dq, pre.dq);
        EXPECT_EQ(raw.dk, pre.dk);
        EXPECT_EQ(raw.dv, pre.dv);
        EXPECT_TRUE(raw.q == q0 && raw.k == k0 && raw.v == v0 && raw.dout == d0) << "an input was written";
    }
}

// Each rounding point by hand: one query (q = 1, D = 1, scale 1), keys k = (1, 0), values (0, 1),
// dO = 1. Forward: P~ = (1, e^-1) unnormalised, l = 1 + e^-1 summed in fp32, out = bf16(e^-1) / l
// (fp32 would give e^-1 / l, 5e-4 apart). Backward: P = (1, e^-1) / l, dV_1 = bf16(P_1); dP = (0, 1),
// dS = P ∘ (dP - P_1) = (-s, s) with s = P_0 P_1, dQ = dS_0 k_0 = bf16(-s), dK = bf16(dS).
// Tolerance: the kernels' exp (a few float ulps) and fp32 sums, kHandTol relative; every rounding
// moves its value by more than 1e-3 relative, so a missed rounding fails.
TEST(FlashAttentionBf16, RoundsPAndDsWhereTileKernelsDo) {
    constexpr double kHandTol = 1e-5;
    const double     e1 = std::exp(-1.0), l = 1.0 + e1, p1 = e1 / l, s = (1.0 / l) * p1;
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        for (bool bf16 : {false, true}) {
            auto a = make_attn<float>(shape(1, 1, 1, 2, 1));
            a.q = {1.0f}, a.k = {1.0f, 0.0f}, a.v = {0.0f, 1.0f}, a.dout = {1.0f};
            a.p.scale = 1.0f, a.p.bf16 = bf16;
            flash_forward(a.p, isa);
            flash_backward(a.p, a.g, isa);
            const auto r = [&](double x) { return bf16 ? double(round_to_bf16(float(x))) : x; };
            EXPECT_NEAR(a.out[0], r(e1) / l, kHandTol * p1) << "bf16 " << bf16;
            EXPECT_NEAR(a.dv[1], r(p1), kHandTol * p1) << "bf16 " << bf16;
            EXPECT_NEAR(a.dq[0], r(-s), kHandTol * s) << "bf16 " << bf16;
            EXPECT_NEAR(a.dk[0], r(-s), kHandTol * s) << "bf16 " << bf16;
            EXPECT_NEAR(a.dk[1], r(s), kHandTol * s) << "bf16 " << bf16;
        }
    }
}

// Accumulators do not overflow or lose the exact answer (issue 23): a row of 32,768 equal scores
// with every value row = 300 gives exactly 300 (P = 1 each, l = 32768 and O = 300 · 32768 are exact
// in fp32); huge equal logits (scores up to 2^127, finite) give exactly uniform weights (values 0
// and 1 alternating: out = 0.5 exactly), on every path, with finite gradients.
TEST(FlashAttentionBf16, EqualScoresAndHugeLogitsStayExact) {
    // bf16 forward: every output equals `want`; then the backward: every gradient finite.
    auto expect_exact = [](AttnData<float>& a, const Bf16Path& isa, float want) {
        a.p.bf16 = true;
        flash_forward(a.p, isa);
        for (float x : a.out) ASSERT_EQ(x, want);
        flash_backward(a.p, a.g, isa);
        for (const auto* g : {&a.dq, &a.dk, &a.dv})
            for (float x : *g) ASSERT_TRUE(std::isfinite(x));
    };
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        AttnSpec s = shape(1, 1, 3, 32768, 8, 16);
        auto     a = make_attn<float>(s);
        std::fill(a.q.begin(), a.q.end(), 0.5f);
        std::fill(a.k.begin(), a.k.end(), 0.25f);
        std::fill(a.v.begin(), a.v.end(), 300.0f);
        ASSERT_NO_FATAL_FAILURE(expect_exact(a, isa, 300.0f));

        // Scale 1 (D = 8, q = k = 2^60: scores 2^123), and the default 1/sqrt(D) with D = 64 (a power
        // of two, 1/8) and D = 100 (0.1) with q = k = 2^62: the unscaled sums (2^130, 1.6 · 2^130)
        // overflow float, the scaled scores (2^127, 1.25 · 2^127) do not, on every path.
        for (const auto& [D, x, scale1] : {std::tuple{int64_t(8), 0x1p60f, true}, std::tuple{int64_t(64), 0x1p62f, false},
                                           std::tuple{int64_t(100), 0x1p62f, false}}) {
            SCOPED_TRACE(::testing::Message() << "D " << D);
            auto h = make_attn<float>(shape(1, 2, 70, 256, D));
            std::fill(h.q.begin(), h.q.end(), x);
            std::fill(h.k.begin(), h.k.end(), x);
            for (size_t t = 0; t < h.v.size(); ++t) h.v[t] = float((t / size_t(D)) % 2);  // key j's row = j % 2
            if (scale1) h.p.scale = 1.0f;
            ASSERT_NO_FATAL_FAILURE(expect_exact(h, isa, 0.5f));
        }
    }
}

// K and V rows hidden from every query never reach the results on any bf16 path, even when they
// hold NaN, ±inf or a finite value that bf16 rounds to inf (3.4e38): the result is the one for the
// clean inputs (2x rule), and the hidden row's dK and dV are 0. Two ways to hide key 250 of batch
// 0: valid_lens (the forward stops at key 200 there; the backward's key tile holds key 250 next to
// visible keys, so its hand-over to the fp32 tiles runs) and an additive key-padding mask (-inf;
// the forward loads the tile too, so the vdpbf16ps forward's masked-tile fallback runs).
TEST(FlashAttentionBf16, HiddenNonFiniteKeyValueRowsAreNeverRead) {
    // 2 threads for 4 (batch, kv head) tasks: the backwards run one task per (batch, kv head), so
    // other tasks have written gradients when the AMX backward meets the bad row and redoes the call
    struct Threads {
        int saved = omp_get_max_threads();
        Threads() { omp_set_num_threads(2); }
        ~Threads() { omp_set_num_threads(saved); }
    } const two_threads;
    for (bool by_mask : {false, true}) {
    AttnSpec s = shape(2, 2, 100, 300, 32);
    if (!by_mask) s.valid_lens_rank = 1, s.valid_lens = {200, 300};
    std::vector<float> am(size_t(s.Tk), 0.0f);  // by_mask: key 250 hidden in every batch and head
    am[250] = -INFINITY;
    std::vector<double> am64(am.begin(), am.end());
    auto with_mask = [&](auto& x) {
        if (!by_mask) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(*x.p.additive_mask)>, double>) x.p.additive_mask = am64.data();
        else x.p.additive_mask = am.data();
        x.p.m_stride_b = x.p.m_stride_h = x.p.m_stride_q = 0, x.p.m_stride_k = 1;
    };
    auto r64 = make_attn_bf16<double>(s);
    auto pl  = make_attn_bf16<float>(s);
    with_mask(r64), with_mask(pl);
    ref::attention_forward(r64.p);
    ref::attention_backward(r64.p, r64.g);
    plain_bf16(pl, true);
    const Results   want = results(r64), base = results(pl);
    for (const float bad_v : {INFINITY, -INFINITY, 3.4e38f})
        for (auto isa : bf16_isas()) {
            SCOPED_TRACE(::testing::Message() << isa_label(isa) << ", V row " << bad_v << ", by mask " << by_mask);
            auto a = make_attn_bf16<float>(s);
            with_mask(a);
            for (int64_t d = 0; d < s.D; ++d) {  // batch 0 (Hkv = H = 2): key 250 of head 0
                a.k[size_t(250 * s.D + d)] = NAN;
                a.v[size_t(250 * s.D + d)] = bad_v;
            }
            a.p.bf16 = true;
            flash_forward(a.p, isa);
            flash_backward(a.p, a.g, isa);
            // dk/dv of the hidden row are 0 on every path (nothing reads it); the rule covers the rest
            for (int64_t d = 0; d < s.D; ++d) {
                ASSERT_EQ(a.dk[size_t(250 * s.D + d)], 0.0f);
                ASSERT_EQ(a.dv[size_t(250 * s.D + d)], 0.0f);
            }
            expect_results_within_rule(results(a), want, base, true);
        }
    }
}

// The avx512_bf16 tier's forward is its own build (vdpbf16ps): with the dot path it computes in
// another order than the fp32 tiles on rounded values (so some output differs in its last bits,
// D = 128, scale 1/sqrt(128)); the cap below avx512_bf16 and the rounded_fp32 setting turn it off;
// `automatic` takes it exactly where vdpbf16ps runs at full rate.
TEST(FlashAttentionBf16, DotPathWhereTheCpuHasIt) {
    if (cpu::cpu_isa() < cpu::Isa::avx512_bf16) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
    auto run = [](cpu::Isa isa, cpu::Bf16AttentionPath path) {
        const auto old = cpu::set_bf16_attention_path(path);
        auto       a   = make_attn<float>(shape(1, 2, 100, 300, 128));
        a.p.bf16       = true;
        flash_forward(a.p, isa);
        cpu::set_bf16_attention_path(old);
        return a.out;
    };
    EXPECT_NE(run(cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot),
              run(cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::rounded_fp32));
    EXPECT_EQ(run(cpu::Isa::avx512, cpu::Bf16AttentionPath::dot),
              run(cpu::Isa::avx512, cpu::Bf16AttentionPath::rounded_fp32));
    {
        const IsaGuard cap(cpu::Isa::avx512_bf16);
        const auto     old = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_uses_dot(), cpu::cpu_features().bf16_dot_full_rate);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::dot);
        EXPECT_TRUE(cpu::bf16_attention_uses_dot());
        cpu::set_bf16_attention_path(old);
    }
    const IsaGuard cap(cpu::Isa::avx512);
    const auto     old = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::dot);
    EXPECT_FALSE(cpu::bf16_attention_uses_dot());
    cpu::set_bf16_attention_path(old);
}

// The AMX kernels (Bf16AttentionPath::amx): `automatic` takes them exactly where Linux grants the
// tiles and a call has at least kAmxMinQueries queries and kAmxMinKeys keys; the dot and
// rounded_fp32 settings and a
// cap below amx turn them off; the emulation hook runs them on the avx512_bf16 tier (and they
// compute in another order than the vdpbf16ps build: O, dQ, dK and dV accumulate inside the tiles
// across blocks, so some output and some dq of 100 x 300 x 128 differ in their last bits).
TEST(FlashAttentionBf16, AmxTilesWhereTheCpuHasThem) {
    using Tiles      = cpu::Bf16AttentionTiles;
    const bool amx   = cpu::cpu_isa() == cpu::Isa::amx && cpu::amx_permitted();
    const auto old   = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
    const bool old_e = cpu::set_amx_tile_emulation(false);
    EXPECT_EQ(cpu::bf16_attention_tiles(cpu::kAmxMinQueries, cpu::kAmxMinKeys), amx ? Tiles::amx : Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), amx ? Tiles::amx : Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(cpu::kAmxMinQueries - 1, 1000), Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(1000, cpu::kAmxMinKeys - 1), Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(10, 10), Tiles::none);  // the D2L training step's shapes
    cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::amx);
    EXPECT_EQ(cpu::bf16_attention_tiles(1, 1), amx ? Tiles::amx : Tiles::none);
    for (auto p : {cpu::Bf16AttentionPath::dot, cpu::Bf16AttentionPath::rounded_fp32}) {
        cpu::set_bf16_attention_path(p);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);
    }
    {
        const IsaGuard cap(cpu::Isa::avx512_bf16);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::amx);
        cpu::set_amx_tile_emulation(true);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000),
                  cpu::cpu_isa() >= cpu::Isa::avx512_bf16 ? Tiles::emulated : Tiles::none);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);  // emulation only when asked for
    }
    cpu::set_amx_tile_emulation(old_e);
    cpu::set_bf16_attention_path(old);
    if (cpu::cpu_isa() < cpu::Isa::avx512_bf16) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
    auto run = [](const Bf16Path& b) {
        auto a   = make_attn<float>(shape(1, 2, 100, 300, 128));
        a.p.bf16 = true;
        flash_forward(a.p, b);
        flash_backward(a.p, a.g, b);
        return std::pair{a.out, a.dq};
    };
    const auto dot = run({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot, false, ""});
    const auto emu = run({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::amx, true, ""});
    EXPECT_NE(emu.first, dot.first);
    EXPECT_NE(emu.second, dot.second);
    if (amx) {
        const auto hw = run({cpu::Isa::amx, cpu::Bf16AttentionPath::amx, false, ""});
        EXPECT_NE(hw.first, dot.first);
        EXPECT_NE(hw.second, dot.second);
    }
}

// Gradients written through strides (AttentionGradParams::d*_stride_*: dq, dk, dv stored as
// (B, T, H, D), the layout the head split's backward reshapes without a copy) equal the
// contiguous ones bit for bit: the kernels do the same arithmetic at other addresses. Every fp32
// tier, every bf16 path (vdpbf16ps, AMX emulated and on tiles where present), the reference, and
// both schedules (a head per task: B*Hkv >= threads; few heads: key blocks split across threads).
struct StridedGrads {
    std::vector<float> dq, dk, dv;  // (B, T, H, X) storage, poisoned
    kernels::AttentionGradParams<float> g;
};
StridedGrads strided_grads(const AttnData<float>& a) {
    const AttnSpec& s = a.spec;
    StridedGrads r;
    r.dq.assign(a.dq.size(), 7.0f), r.dk.assign(a.dk.size(), 7.0f), r.dv.assign(a.dv.size(), 7.0f);
    r.g      = a.g;
    r.g.dq   = r.dq.data(), r.g.dk = r.dk.data(), r.g.dv = r.dv.data();
    r.g.dq_stride_b = s.Tq * s.H * s.D, r.g.dq_stride_h = s.D, r.g.dq_stride_t = s.H * s.D;
    r.g.dk_stride_b = s.Tk * s.Hkv * s.D, r.g.dk_stride_h = s.D, r.g.dk_stride_t = s.Hkv * s.D;
    r.g.dv_stride_b = s.Tk * s.Hkv * s.Dv, r.g.dv_stride_h = s.Dv, r.g.dv_stride_t = s.Hkv * s.Dv;
    return r;
}
/// (B, T, H, X) storage back in (B, H, T, X) order.
std::vector<float> unstride(const std::vector<float>& x, int64_t B, int64_t H, int64_t T, int64_t X) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e < X; ++e) out[size_t(((b * H + h) * T + t) * X + e)] = x[size_t(((b * T + t) * H + h) * X + e)];
    return out;
}
void expect_strided_grads_equal(const AttnData<float>& a, const StridedGrads& r) {
    const AttnSpec& s = a.spec;
    EXPECT_EQ(unstride(r.dq, s.B, s.H, s.Tq, s.D), a.dq);
    EXPECT_EQ(unstride(r.dk, s.B, s.Hkv, s.Tk, s.D), a.dk);
    EXPECT_EQ(unstride(r.dv, s.B, s.Hkv, s.Tk, s.Dv), a.dv);
}

TEST(FlashAttentionKernels, StridedGradientsEqualContiguousOnes) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    // {B, H, Hkv}: 4 kv heads (a head per task) and 1 (key blocks split over 2 threads); Tk spans
    // several key blocks, D != Dv, dropout and a causal mask on.
    const int64_t heads[][3] = {{2, 4, 2}, {1, 2, 1}};
    for (const auto& hd : heads) {
        AttnSpec s = shape(hd[0], hd[1], 37, 300, 24);
        s.Hkv = hd[2], s.Dv = 40, s.dropout = 0.2f, s.causal = CausalAlign::bottom_right;
        SCOPED_TRACE(::testing::Message() << "B " << hd[0] << " H " << hd[1] << " Hkv " << hd[2]);
        {
            SCOPED_TRACE("reference");
            auto a = make_attn<float>(s);
            ref::attention_forward(a.p);
            StridedGrads r = strided_grads(a);
            ref::attention_backward(a.p, a.g);
            ref::attention_backward(a.p, r.g);
            expect_strided_grads_equal(a, r);
        }
        for (auto isa : isas()) {
            SCOPED_TRACE(cpu::isa_name(isa));
            auto a = make_attn<float>(s);
            flash_forward(a.p, isa);
            StridedGrads r = strided_grads(a);
            flash_backward(a.p, a.g, isa);
            flash_backward(a.p, r.g, isa);
            expect_strided_grads_equal(a, r);
        }
        for (const auto& path : bf16_isas()) {
            SCOPED_TRACE(::testing::Message() << "bf16 compute, " << isa_label(path));
            auto a   = make_attn_bf16<float>(s);
            a.p.bf16 = true;
            flash_forward(a.p, path);
            StridedGrads r = strided_grads(a);
            flash_backward(a.p, a.g, path);
            flash_backward(a.p, r.g, path);
            expect_strided_grads_equal(a, r);
        }
    }
    omp_set_num_threads(saved);
}

// Few queries (Tq <= 16) take the backward with one-vector query blocks (SimdAvx512ShortQ,
// SimdAvx512DotShortQ) on the AVX-512 tiers: every feature in bf16 as FewQueriesEveryFeature does
// in fp32, and both backward schedules (a head per task; key blocks split over 2 threads) in both.
TEST(FlashAttentionBf16, FewQueriesEveryFeatureAndBothSchedules) {
    for (int64_t tq : {1, 10, 16}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(3, 4, tq, 37, 64);
        s.valid_lens_rank = 1, s.valid_lens = {0, 12, 500};
        expect_bf16_matches_ref(s);
        AttnSpec c = shape(2, 2, tq, 29, 16);
        c.causal   = CausalAlign::bottom_right;
        expect_bf16_matches_ref(c);
        AttnSpec m   = shape(2, 2, tq, 50, 24);
        m.mask       = MaskKind::both;
        m.mask_shape = MaskShape::full;
        expect_bf16_matches_ref(m);
        AttnSpec d = shape(2, 2, tq, 45, 32);
        d.dropout = 0.2f, d.mask = MaskKind::additive, d.mask_shape = MaskShape::key_padding;
        expect_bf16_matches_ref(d);
        AttnSpec g = shape(2, 4, tq, 33, 32, 48);
        g.Hkv = 1, g.strided = true;
        expect_bf16_matches_ref(g);
    }
    const int saved = omp_get_max_threads();
    AttnSpec  split = shape(1, 1, 10, 700, 64);  // one head, six key blocks of 128
    split.causal    = CausalAlign::bottom_right;
    for (int nt : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << nt << " threads");
        omp_set_num_threads(nt);
        expect_fast_matches_ref(split);
        expect_bf16_matches_ref(split);
    }
    omp_set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::test
