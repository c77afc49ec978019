#pragma once
// Shared by the attention kernel tests (test_attention_kernels.cpp: the reference kernel;
// test_flash_attention_kernels.cpp: the fast flash kernel; test_flash_attention_bf16.cpp: its bf16
// compute): the problem spec and its data, the comparison helpers and the flash rule (err_fast <=
// kErrFactor * err_ref32 + kErrFloor against ref<double>) on every ISA path this CPU has. The
// non-template functions are defined in test_attention_kernels.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/params.h"
#include "kernels/ref/attention.h"

namespace qkv::test {

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
/// Defined for float and double.
template <class T>
AttnData<T> make_attn(const AttnSpec& s0);

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

// Every path the cap can select on this CPU (scalar = the portable build with AVX-512 geometry).
std::vector<cpu::Isa> isas();
void flash_forward(const kernels::AttentionParams<float>& p, cpu::Isa isa);
void flash_backward(const kernels::AttentionParams<float>& p, const kernels::AttentionGradParams<float>& g,
                    cpu::Isa isa);

struct Results {
    std::vector<double> out, lse, dq, dk, dv;
};

template <class T>
Results results(const AttnData<T>& a) {
    return {logical_out(a), to_double(a.lse), to_double(a.dq), to_double(a.dk), to_double(a.dv)};
}

Results run_fast(const AttnSpec& s, cpu::Isa isa, bool bwd = true);

/// The 2x rule for out and lse (and dq, dk, dv with bwd): got and base each against want.
void expect_results_within_rule(const Results& got, const Results& want, const Results& base, bool bwd);

// fast (each ISA) vs ref<double> with the 2x rule against ref<float>, for out, lse, dq, dk, dv.
void expect_fast_matches_ref(const AttnSpec& s, bool bwd = true);

AttnSpec shape(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv = 0);

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

/// The dropout probe: q = 0, v = identity (Dv = Tk), dropout p.
AttnSpec dropout_probe_spec(float p);

}  // namespace qkv::test
