#pragma once
// The SIMD layer of the fast fp32 kernels: the one place (with its siblings simd_philox.h,
// simd_bf16.h and simd_amx.h) where intrinsics are written. In translation units compiled with an
// ISA's flags (cpu/variants_avx2.cpp, cpu/variants_avx512.cpp, cpu/flash_attention_<isa>.cpp) it
// gives the vector wrappers V8 (AVX2+FMA, 8 lanes) and V16 (AVX-512F/BW, 16 lanes), Vec<Isa> to
// name them from an Isa, the one polynomial exp every kernel uses (flash included), row reductions
// (max, Σ, Σ exp), and the lane masks, selects and bit-level operations the kernels need (tails,
// -inf handling, bf16 rounding and bit patterns, float16 conversions (F16C), int8 saturation,
// dropout's mask bytes, the 8 x 8 transpose). Kernel bodies are written once as templates over the Isa (cpu/*_simd.h) or over a
// traits struct derived from V8 / V16 (flash attention, cpu/flash_traits.h) and call only these.
// Siblings: simd_philox.h (Philox4x32-10 per vector width), simd_bf16.h (bf16 word operands and
// vdpbf16ps), simd_amx.h (the AMX tiles, their emulation). Elsewhere the header only declares
// exp_simd and Vec. docs/kernels/recipe.md says where a new operation goes.
//
// simd::exp<V>(x), the one exp (Cephes expf polynomial; written down here and in
// docs/kernels/flash_attention.md):
//   flush rule: x < -87 gives exactly +0 (so exp(-inf) = 0, and no subnormal — slow on x86 and
//   below any weight these kernels keep — ever reaches a GEMM or a sum); x > 88.72 gives +inf
//   (x is clamped to 88.8, whose exp overflows); NaN gives NaN. In between (results >= e^-87,
//   all normal floats) the error is at most 1.3 ulp on both ISAs (ExpSimd.* in
//   tests/kernels/test_softmax_kernels.cpp measures it against double exp).
//   AVX2:    n = round(x·log2 e); r = x − n·ln2 (two-constant Cody–Waite, FMA), |r| <= ln2/2;
//            e^r = 1 + r + r²·P(r), P of degree 5; 2^n as two exact power-of-two factors
//            2^⌊n/2⌋·2^(n−⌊n/2⌋) so that x up to 88.72 does not overflow early.
//   AVX-512: the same function in base 2 with fewer operations: n = round(x·log2 e) by the
//            1.5·2^23 shifter, f = x·log2e − n by two FMAs (log2e split hi + lo), 2^f = 1 + f·Q(f)
//            (Cephes exp2f, Q of degree 5), and 2^n applied by vscalefps (which saturates to +inf
//            itself). 11 instructions instead of 15 (bench/RESULTS_attention.md).
//
// ODR note: everything ISA-specific sits in an unnamed namespace so that copies compiled with
// AVX-512 flags can never be linked into code that runs on an AVX2-only CPU.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/isa.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's own avx512fintrin.h trips -W(maybe-)uninitialized (_mm512_undefined_ps, GCC PR 105593);
// the warning is reported where the intrinsics are inlined, so it is off for the whole AVX-512 TU.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qkv::kernels::cpu {

/// y[i] = e^{x[i]} for i < n with simd::exp of the capped ISA (std::exp when scalar).
/// y may alias x. Used by the tests to measure the exp's accuracy; single-threaded.
void exp_simd(float* y, const float* x, int64_t n);

namespace simd {
namespace {

/// The vector type of an ISA tier: V8 for avx2, V16 for avx512 (defined in the ISA's TUs only).
template <Isa I>
struct VecOf;
template <Isa I>
using Vec = typename VecOf<I>::type;

// ---- exp constants (Cephes expf) ----------------------------------------------------------------
constexpr float kExpHi   = 88.8f;   // e^88.8 > FLT_MAX: saturates to +inf
constexpr float kExpLo   = -87.0f;  // flush rule: x < -87 gives +0 (e^-87 ~ 1.6e-38 > FLT_MIN)
constexpr float kLog2e   = 1.44269504088896341f;
constexpr float kLog2eLo = 1.925963033500011e-08f;  // log2e - float(log2e)
constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi has 9 bits
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f;
constexpr float kExpP1 = 1.3981999507e-3f;
constexpr float kExpP2 = 8.3334519073e-3f;
constexpr float kExpP3 = 4.1665795894e-2f;
constexpr float kExpP4 = 1.6666665459e-1f;
constexpr float kExpP5 = 5.0000001201e-1f;
constexpr float kExp2Q0 = 1.535336188319500e-4f;  // Cephes exp2f: 2^f = 1 + f (Q5 + f (Q4 + ...))
constexpr float kExp2Q1 = 1.339887440266574e-3f;
constexpr float kExp2Q2 = 9.618437357674640e-3f;
constexpr float kExp2Q3 = 5.550332471162809e-2f;
constexpr float kExp2Q4 = 2.402264791363012e-1f;
constexpr float kExp2Q5 = 6.931472028550421e-1f;

#if defined(__AVX2__) && defined(__FMA__)
/// 8 fp32 lanes (AVX2 + FMA).
struct V8 {
    using R                    = __m256;
    static constexpr int64_t W = 8;

    static R zero() { return _mm256_setzero_ps(); }
    static R set1(float a) { return _mm256_set1_ps(a); }
    static R load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, R a) { _mm256_storeu_ps(p, a); }
    /// Lanes [0, n) from p, the others `fill`; 0 <= n < W. Never reads past p + n.
    static R load_tail(const float* p, int64_t n, float fill) {
        const __m256i m = tail_mask(n);
        return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m),
                                _mm256_castsi256_ps(m));
    }
    static void store_tail(float* p, R a, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), a); }

    static R add(R a, R b) { return _mm256_add_ps(a, b); }
    static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
    static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
    static R div(R a, R b) { return _mm256_div_ps(a, b); }
    static R sqrt(R a) { return _mm256_sqrt_ps(a); }
    static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a*b + c
    static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b
    /// max/min return the second operand when either is NaN (x86 semantics).
    static R max(R a, R b) { return _mm256_max_ps(a, b); }
    static R min(R a, R b) { return _mm256_min_ps(a, b); }
    static R round(R a) {
        return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    static R floor(R a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
    /// 2^k for integer-valued k in [-126, 127] (exact, built from the exponent bits).
    static R pow2i(R k) {
        const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    }
    static float reduce_add(R a) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s        = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s        = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static float reduce_max(R a) {
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s        = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s        = _mm_max_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

    static R exp(R x) {
        // Lanes below kExpLo (incl. -inf) compute garbage and are zeroed by the final andnot.
        const R under = _mm256_cmp_ps(x, set1(kExpLo), _CMP_LT_OQ);
        x             = _mm256_min_ps(set1(kExpHi), x);  // NaN (second operand) passes through
        const R n     = round(_mm256_mul_ps(x, set1(kLog2e)));
        R r           = _mm256_fnmadd_ps(n, set1(kLn2Hi), x);
        r             = _mm256_fnmadd_ps(n, set1(kLn2Lo), r);
        R y           = set1(kExpP0);
        y             = _mm256_fmadd_ps(y, r, set1(kExpP1));
        y             = _mm256_fmadd_ps(y, r, set1(kExpP2));
        y             = _mm256_fmadd_ps(y, r, set1(kExpP3));
        y             = _mm256_fmadd_ps(y, r, set1(kExpP4));
        y             = _mm256_fmadd_ps(y, r, set1(kExpP5));
        y             = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
        // 2^n = 2^n1 · 2^(n − n1), n1 = n >> 1: n in [-126, 128], so each factor is a normal float.
        const __m256i ni = _mm256_cvtps_epi32(n);
        const __m256i n1 = _mm256_srai_epi32(ni, 1);
        y = _mm256_mul_ps(_mm256_mul_ps(y, pow2i_bits(n1)), pow2i_bits(_mm256_sub_epi32(ni, n1)));
        return _mm256_andnot_ps(under, y);
    }


    // ---- lane masks, selects and bit-level ops (flash attention, dropout, quantize, bf16) ----
    /// A lane mask: all ones or zero per 32-bit lane (compare results; loadm/storem's mask).
    using M = __m256i;
    /// Lanes [0, n) set (n >= W: all).
    static M tail(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    /// Lanes of m from p, 0 elsewhere; never touches memory outside m's lanes.
    static R loadm(const float* p, M m) { return _mm256_maskload_ps(p, m); }
    static void storem(float* p, R v, M m) { _mm256_maskstore_ps(p, m, v); }
    /// a >= b per lane (false for NaN).
    static M ge(R a, R b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GE_OQ)); }
    /// a where k, else b.
    static R select(M k, R a, R b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(k)); }
    /// a·b where k, else +0.
    static R maskz_mul(M k, R a, R b) { return _mm256_and_ps(_mm256_castsi256_ps(k), _mm256_mul_ps(a, b)); }
    static R abs(R a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
    /// Bit l set when lane l is NaN.
    static unsigned nan_bits(R a) { return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q))); }
    /// Lanes equal to b (ordered: a NaN lane is never equal), one bit each.
    static unsigned eq_bits(R a, R b) { return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ))); }
    /// W int32 values converted to fp32 (round to nearest even, as float(int32_t)).
    static R load_i32(const int32_t* p) {
        return _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    /// s where j <= lim, -inf where j > lim (lane-wise).
    static R mask_gt(R s, R j, R lim) {
        return _mm256_blendv_ps(s, _mm256_set1_ps(-__builtin_inff()), _mm256_cmp_ps(j, lim, _CMP_GT_OQ));
    }
    /// x with -inf lanes replaced by 0 / +inf / the lanes of y.
    static R neginf_to_zero(R x) {
        return _mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ));
    }
    static R neginf_to_posinf(R x) {
        return _mm256_blendv_ps(x, _mm256_set1_ps(__builtin_inff()),
                                _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ));
    }
    static R neginf_to(R x, R y) {
        return _mm256_blendv_ps(x, y, _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ));
    }
    /// True when every lane has a <= b (false for NaN lanes).
    static bool all_le(R a, R b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ)) == 0xFF; }
    /// x rounded to bf16 (round to nearest even on the bits, as core/bf16.h), as floats; NaN lanes
    /// are kept as they are (the carry of the rounding bias could change a NaN's class).
    static R round_bf16(R x) {
        const __m256i u   = _mm256_castps_si256(x);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r   = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                                             _mm256_set1_epi32(int(0xffff0000u)));
        return _mm256_blendv_ps(_mm256_castsi256_ps(r), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    /// core/bf16.h's bf16_bits of each lane in the high half (u + 0x7fff + lsb; a NaN made quiet,
    /// its sign kept); the low halves are not 0.
    static __m256i bf16_bits_high(R x) {
        const __m256i u   = _mm256_castps_si256(x);
        const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        const __m256i r   = _mm256_add_epi32(
            u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
        return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
    }
    /// The 8 high halves of r as consecutive uint16 (pack within lanes, then the two 64-bit halves).
    static void store_high16(uint16_t* p, __m256i r) {
        const __m256i s = _mm256_srli_epi32(r, 16);
        const __m256i q = _mm256_permute4x64_epi64(_mm256_packus_epi32(s, s), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(q));
    }
    /// r with the low halves cleared, as floats (the bf16 values of bf16_bits_high in fp32).
    static void store_high_bits(float* p, __m256i r) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
    }
    /// W float16 values (core/fp16.h) from p, widened exactly (F16C vcvtph2ps; a signalling NaN
    /// comes back quiet).
    static R load_fp16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    /// The lanes rounded to float16 (F16C vcvtps2ph, imm 0: round to nearest even whatever the
    /// MXCSR says; its FTZ does not apply), W values to p: core/fp16.h's fp16_bits lane by lane.
    static void store_fp16(uint16_t* p, R x) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
    /// The int8 of each lane truncated to int32 and saturated, W bytes to p.
    static void store_i8_sat(int8_t* p, R t) {
        const __m256i i32 = _mm256_cvttps_epi32(t);
        const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(i16, i16));
    }
    /// 4W bytes: byte i is 1 where lane i % W of k[i / W] is set, else 0.
    static void store_bytes01(uint8_t* p, const M k[4]) {
        const __m256i k0 = _mm256_srli_epi32(k[0], 31), k1 = _mm256_srli_epi32(k[1], 31);
        const __m256i k2 = _mm256_srli_epi32(k[2], 31), k3 = _mm256_srli_epi32(k[3], 31);
        const __m256i b  = _mm256_packs_epi16(_mm256_packs_epi32(k0, k1), _mm256_packs_epi32(k2, k3));
        const __m256i o  = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), o);
    }
    /// Lanes whose byte of p[0, W) is not 0.
    static M bytes_nonzero(const uint8_t* p) {
        const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        return _mm256_cmpgt_epi32(w, _mm256_setzero_si256());
    }
    /// dst[c * ds + r] = scale * src[r * ss + c] for an 8 x 8 block (unpack/shuffle/permute).
    static void transpose8_scaled(const float* src, int64_t ss, float* dst, int64_t ds, float scale) {
        const __m256 k = _mm256_set1_ps(scale);
        __m256 r[8], t[8], u[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
        for (int i = 0; i < 8; i += 2) {
            t[i]     = _mm256_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 8; i += 4) {
            u[i]     = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
            u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
            u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
            u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int c = 0; c < 4; ++c) {
            _mm256_storeu_ps(dst + c * ds, _mm256_mul_ps(k, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20)));
            _mm256_storeu_ps(dst + (c + 4) * ds, _mm256_mul_ps(k, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31)));
        }
    }
private:
    static __m256i tail_mask(int64_t n) {
        alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                      0,  0,  0,  0,  0,  0,  0,  0};
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
    }
    static R pow2i_bits(__m256i k) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
    }
};
template <>
struct VecOf<Isa::avx2> {
    using type = V8;
};
#endif

#if defined(__AVX512F__)
/// 16 fp32 lanes (AVX-512F; tails use mask registers).
struct V16 {
    using R                    = __m512;
    static constexpr int64_t W = 16;

    static R zero() { return _mm512_setzero_ps(); }
    static R set1(float a) { return _mm512_set1_ps(a); }
    static R load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, R a) { _mm512_storeu_ps(p, a); }
    static R load_tail(const float* p, int64_t n, float fill) {
        return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
    }
    static void store_tail(float* p, R a, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), a); }

    static R add(R a, R b) { return _mm512_add_ps(a, b); }
    static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
    static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
    static R div(R a, R b) { return _mm512_div_ps(a, b); }
    static R sqrt(R a) { return _mm512_sqrt_ps(a); }
    static R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
    static R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
    static R max(R a, R b) { return _mm512_max_ps(a, b); }
    static R min(R a, R b) { return _mm512_min_ps(a, b); }
    static R round(R a) {
        return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    static R floor(R a) {
        return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    static R pow2i(R k) {
        const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127));
        return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    }
    static float reduce_add(R a) { return _mm512_reduce_add_ps(a); }
    static float reduce_max(R a) { return _mm512_reduce_max_ps(a); }

    static R exp(R x) {
        // Lanes below kExpLo (incl. -inf) compute garbage and are zeroed by the final mask.
        const __mmask16 under = _mm512_cmp_ps_mask(x, set1(kExpLo), _CMP_LT_OQ);
        x                     = _mm512_min_ps(set1(kExpHi), x);  // NaN passes through
        // n = round(x log2e) by the 1.5 * 2^23 shifter: one FMA and one subtraction instead of
        // vmulps + vrndscaleps (2 uops), |x log2e| <= 128 << 2^22.
        const R sh = set1(12582912.0f);
        const R n  = _mm512_sub_ps(_mm512_fmadd_ps(x, set1(kLog2e), sh), sh);
        R f        = _mm512_fmsub_ps(x, set1(kLog2e), n);
        f          = _mm512_fmadd_ps(x, set1(kLog2eLo), f);
        R y        = set1(kExp2Q0);
        y          = _mm512_fmadd_ps(y, f, set1(kExp2Q1));
        y          = _mm512_fmadd_ps(y, f, set1(kExp2Q2));
        y          = _mm512_fmadd_ps(y, f, set1(kExp2Q3));
        y          = _mm512_fmadd_ps(y, f, set1(kExp2Q4));
        y          = _mm512_fmadd_ps(y, f, set1(kExp2Q5));
        y          = _mm512_fmadd_ps(y, f, set1(1.0f));
        return _mm512_maskz_scalef_ps(__mmask16(~under), y, n);
    }


    // ---- lane masks, selects and bit-level ops (flash attention, dropout, quantize, bf16) ----
    /// A lane mask: one bit per lane (compare results; loadm/storem's mask).
    using M = __mmask16;
    /// Lanes [0, n) set (n >= W: all).
    static M tail(int n) { return n >= W ? M(0xFFFF) : M((1u << n) - 1u); }
    /// Lanes of m from p, 0 elsewhere; never touches memory outside m's lanes.
    static R loadm(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
    static void storem(float* p, R v, M m) { _mm512_mask_storeu_ps(p, m, v); }
    /// a >= b per lane (false for NaN).
    static M ge(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
    /// a where k, else b.
    static R select(M k, R a, R b) { return _mm512_mask_blend_ps(k, b, a); }
    /// a·b where k, else +0.
    static R maskz_mul(M k, R a, R b) { return _mm512_maskz_mul_ps(k, a, b); }
    static R abs(R a) { return _mm512_abs_ps(a); }
    /// Bit l set when lane l is NaN.
    static unsigned nan_bits(R a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
    static unsigned eq_bits(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
    static R load_i32(const int32_t* p) { return _mm512_cvtepi32_ps(_mm512_loadu_si512(p)); }
    /// s where j <= lim, -inf where j > lim (lane-wise).
    static R mask_gt(R s, R j, R lim) {
        return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(j, lim, _CMP_GT_OQ), _mm512_set1_ps(-__builtin_inff()));
    }
    /// x with -inf lanes replaced by 0 / +inf / the lanes of y.
    static R neginf_to_zero(R x) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ),
                                  _mm512_setzero_ps());
    }
    static R neginf_to_posinf(R x) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ),
                                  _mm512_set1_ps(__builtin_inff()));
    }
    static R neginf_to(R x, R y) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ), y);
    }
    /// True when every lane has a <= b (false for NaN lanes).
    static bool all_le(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ) == 0xFFFF; }
    /// x rounded to bf16 (round to nearest even on the bits, as core/bf16.h), as floats; NaN lanes
    /// are kept as they are (the carry of the rounding bias could change a NaN's class).
    static R round_bf16(R x) {
        const __m512i u   = _mm512_castps_si512(x);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r   = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                                             _mm512_set1_epi32(int(0xffff0000u)));
        return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
    }
    /// core/bf16.h's bf16_bits of each lane in the high half (u + 0x7fff + lsb; a NaN made quiet,
    /// its sign kept); the low halves are not 0.
    static __m512i bf16_bits_high(R x) {
        const __m512i   u   = _mm512_castps_si512(x);
        const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        const __m512i   r   = _mm512_add_epi32(
            u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
        return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    }
    /// The 16 high halves of r as consecutive uint16.
    static void store_high16(uint16_t* p, __m512i r) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
    /// r with the low halves cleared, as floats (the bf16 values of bf16_bits_high in fp32).
    static void store_high_bits(float* p, __m512i r) {
        _mm512_storeu_si512(p, _mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u))));
    }
    /// W float16 values from p, widened exactly (vcvtph2ps, as V8::load_fp16).
    static R load_fp16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    /// The lanes rounded to float16 (vcvtps2ph, round to nearest even), W values to p.
    static void store_fp16(uint16_t* p, R x) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
    /// The int8 of each lane truncated to int32 and saturated, W bytes to p.
    static void store_i8_sat(int8_t* p, R t) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(t)));
    }
    /// Lanes whose byte of p[0, W) is not 0.
    static M bytes_nonzero(const uint8_t* p) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm_test_epi8_mask(b, b);
    }
    /// 4W bytes: byte i is 1 where lane i % W of k[i / W] is set, else 0.
    static void store_bytes01(uint8_t* p, const M k[4]) {
        for (int j = 0; j < 4; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16 * j), _mm_maskz_set1_epi8(k[j], 1));
    }

private:
    static __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }
};
template <>
struct VecOf<Isa::avx512> {
    using type = V16;
};
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
/// e^x per lane: the one exp (the file comment gives the algorithm and the flush rule).
template <class V>
inline typename V::R exp(typename V::R x) {
    return V::exp(x);
}

constexpr float kNegInf = -__builtin_inff();

// ---- row helpers over n contiguous floats (tails use masked loads, never read past the end) ----

/// A whole block's lane count (W) as a type: the row helpers below pass it for every block but a
/// row's last partial one, so that whole blocks take plain loads and stores at compile time.
template <class V>
using Whole = std::integral_constant<int64_t, V::W>;

/// Lanes [0, k) from p: a whole vector when k is Whole<V>, else k < W lanes and the others `fill`.
template <class V, class K>
inline typename V::R load_n(const float* p, K k, float fill) {
    if constexpr (std::is_same_v<K, Whole<V>>) return V::load(p);
    else return V::load_tail(p, k, fill);
}
/// Stores lanes [0, k) of a to p (k as load_n's).
template <class V, class K>
inline void store_n(float* p, typename V::R a, K k) {
    if constexpr (std::is_same_v<K, Whole<V>>) V::store(p, a);
    else V::store_tail(p, a, k);
}

/// The loop every row helper runs: f(j, k) over the blocks [j, j + k) of W lanes of a row of n
/// floats, k = Whole<V> but for a last partial block (k = n − j < W).
template <class V, class F>
__attribute__((always_inline)) inline void row_blocks(int64_t n, F f) {
    int64_t j = 0;
    for (; j + V::W <= n; j += V::W) f(j, Whole<V>{});
    if (j < n) f(j, n - j);
}

/// row_blocks' blocks folded lane-wise, acc = step(acc, j, k), on two accumulators (two dependency
/// chains) joined at the end.
template <class V, class Step, class Join>
__attribute__((always_inline)) inline typename V::R row_fold(int64_t n, typename V::R init, Step step, Join join) {
    typename V::R a0 = init, a1 = init;
    int64_t j = 0;
    for (; j + 2 * V::W <= n; j += 2 * V::W) {
        a0 = step(a0, j, Whole<V>{});
        a1 = step(a1, j + V::W, Whole<V>{});
    }
    for (; j + V::W <= n; j += V::W) a0 = step(a0, j, Whole<V>{});
    if (j < n) a0 = step(a0, j, n - j);
    return join(a0, a1);
}

/// row_blocks storing f(j, k) to y[j, j + k).
template <class V, class F>
__attribute__((always_inline)) inline void row_map(float* y, int64_t n, F f) {
    row_blocks<V>(n, [&](int64_t j, auto k) { store_n<V>(y + j, f(j, k), k); });
}

/// Σ_j of step's lanes over a row (row_fold with additions).
template <class V, class Step>
__attribute__((always_inline)) inline float row_sum_of(int64_t n, Step step) {
    using R = typename V::R;
    return V::reduce_add(row_fold<V>(n, V::zero(), step, [](R a, R b) { return V::add(a, b); }));
}

/// max_j x[j] (a NaN may or may not survive; callers' sums turn NaN rows into NaN anyway).
template <class V>
float row_max(const float* x, int64_t n) {
    using R = typename V::R;
    const auto step = [x](R a, int64_t j, auto k) { return V::max(a, load_n<V>(x + j, k, kNegInf)); };
    return V::reduce_max(row_fold<V>(n, V::set1(kNegInf), step, [](R a, R b) { return V::max(a, b); }));
}

/// Σ_j exp(x[j] − m); with kStore also stores each exp(x[j] − m) to y[j] (y may alias x).
template <class V, bool kStore>
float row_sum_exp(float* y, const float* x, int64_t n, float m) {
    using R    = typename V::R;
    const R vm = V::set1(m);
    return row_sum_of<V>(n, [=](R a, int64_t j, auto k) {
        // Lanes past the end hold −inf, so they add exp(−inf) = 0.
        const R e = exp<V>(V::sub(load_n<V>(x + j, k, kNegInf), vm));
        if constexpr (kStore) store_n<V>(y + j, e, k);
        return V::add(a, e);
    });
}

/// y[j] = a·x[j] + b.
template <class V>
void row_affine(float* y, const float* x, int64_t n, float a, float b) {
    using R    = typename V::R;
    const R va = V::set1(a), vb = V::set1(b);
    row_map<V>(y, n, [=](int64_t j, auto k) { return V::fmadd(load_n<V>(x + j, k, 0.f), va, vb); });
}

/// Σ_j x[j].
template <class V>
float row_sum(const float* x, int64_t n) {
    using R = typename V::R;
    return row_sum_of<V>(n, [x](R a, int64_t j, auto k) { return V::add(a, load_n<V>(x + j, k, 0.f)); });
}

/// Σ_j x[j]·y[j] (one FMA per lane and step).
template <class V>
float row_dot(const float* x, const float* y, int64_t n) {
    using R = typename V::R;
    return row_sum_of<V>(n, [x, y](R a, int64_t j, auto k) {
        return V::fmadd(load_n<V>(x + j, k, 0.f), load_n<V>(y + j, k, 0.f), a);
    });
}
#endif

}  // namespace
}  // namespace simd
}  // namespace qkv::kernels::cpu
