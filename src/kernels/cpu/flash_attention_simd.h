#pragma once
// SIMD traits for the flash attention kernel (flash_attention_impl.h): one struct per instruction
// set, each defined only in the translation unit compiled for it (flash_attention_avx512.cpp,
// flash_attention_avx2.cpp; the portable one in flash_attention.cpp). Everything here is
// static-inline inside the per-ISA namespace chosen by the includer, so no ISA-specific code can
// be merged into another translation unit by the linker.
//
// Each struct gives: V (vector of W floats), M (tail mask), W, an 8 x 8 scaled transpose, 8
// Philox blocks at once (dropout), the
// register tile of the GEMM
// micro-kernel (kR rows x kNV vectors of accumulators) and the attention block sizes
// kBlockQ x kBlockK (queries x keys; chosen by bench/bench_attention.cpp, see the docs).
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_attention_simd.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {

// exp(x) = 2^n e^r, n = round(x log2 e), r = x - n ln 2 (Cody-Waite split of ln 2), e^r by the
// Cephes expf minimax polynomial (about 1 ulp on |r| <= ln2/2). Results below e^-87 (~1.6e-38,
// just above FLT_MIN) are flushed to exactly 0, so exp(-inf) = 0 and no denormal reaches the
// GEMMs. The scalar and AVX2 versions use this recipe, lane by lane.
//
// The AVX-512 version computes the same function in base 2 with one operation fewer per step:
// exp(x) = 2^n 2^f, f = x log2e - n by two FMAs (log2e split hi + lo, so f is exact to ~1e-8 for
// |x| <= 87; no separate x log2e product and no ln 2 split), 2^f = 1 + f q(f) with the Cephes
// exp2f coefficients (q of degree 5: 6 FMAs in all), and 2^n applied by vscalefps, which also
// gives +inf above ~88.7 without a clamp. Measured: at most 9.4e-8 relative error (1.6 units of
// 2^-24) on [-87, 0] against exp in float64, as the e^r recipe. 11 instructions instead of 15;
// the forward spent ~13 % of its time in this loop; docs/kernels/flash_attention.md §6.
constexpr float kExpLo   = -87.0f;
constexpr float kExpHi   = 88.0f;
constexpr float kLog2e   = 1.44269504088896341f;
constexpr float kLog2eLo = 1.925963033500011e-08f;  // log2e - float(log2e)
constexpr float kLn2Hi   = 0.693359375f;
constexpr float kLn2Lo   = -2.12194440e-4f;
constexpr float kExpP0   = 1.9875691500e-4f;
constexpr float kExpP1   = 1.3981999507e-3f;
constexpr float kExpP2   = 8.3334519073e-3f;
constexpr float kExpP3   = 4.1665795894e-2f;
constexpr float kExpP4   = 1.6666665459e-1f;
constexpr float kExpP5   = 5.0000001201e-1f;
constexpr float kExp2Q0  = 1.535336188319500e-4f;  // Cephes exp2f: 2^f = 1 + f (Q5 + f (Q4 + ...))
constexpr float kExp2Q1  = 1.339887440266574e-3f;
constexpr float kExp2Q2  = 9.618437357674640e-3f;
constexpr float kExp2Q3  = 5.550332471162809e-2f;
constexpr float kExp2Q4  = 2.402264791363012e-1f;
constexpr float kExp2Q5  = 6.931472028550421e-1f;

// Philox4x32-10 with the constants and round of include/qkv/core/philox.h (not included here: this
// header is compiled per ISA, and an inline function shared across ISA builds could be merged by
// the linker into a build for the wrong CPU). The tests compare the dropped entries with the
// reference kernel's, which uses philox.h, exactly.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

#if defined(__AVX2__)
/// Philox blocks blk0 .. blk0 + 7 (counter (blk_lo, blk_hi, 0, 0), key seed) in the 8 lanes:
/// w[k][l] = word k of block blk0 + l. 32x32 -> 64-bit products by two vpmuludq (even and odd
/// lanes). The AVX-512 build uses it too, so the AVX2 tests cover it.
static inline void philox8_avx2(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
    alignas(32) uint32_t lo[8], hi[8];
    for (int l = 0; l < 8; ++l) lo[l] = uint32_t(blk0 + uint64_t(l)), hi[l] = uint32_t((blk0 + uint64_t(l)) >> 32);
    __m256i       c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
    __m256i       c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
    __m256i       c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    const __m256i m0 = _mm256_set1_epi32(int(kPhiloxM0)), m1 = _mm256_set1_epi32(int(kPhiloxM1));
    uint32_t      k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        const __m256i e0  = _mm256_mul_epu32(c0, m0);
        const __m256i o0  = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
        const __m256i e1  = _mm256_mul_epu32(c2, m1);
        const __m256i o1  = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
        const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(e0, 32), o0, 0xAA);
        const __m256i lo0 = _mm256_blend_epi32(e0, _mm256_slli_epi64(o0, 32), 0xAA);
        const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(e1, 32), o1, 0xAA);
        const __m256i lo1 = _mm256_blend_epi32(e1, _mm256_slli_epi64(o1, 32), 0xAA);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(k0)));
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(k1)));
        c1 = lo1;
        c3 = lo0;
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[0]), c0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[1]), c1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[2]), c2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[3]), c3);
}

/// dst[c * ds + r] = scale * src[r * ss + c] for an 8 x 8 block (the AVX2 unpack/shuffle/permute
/// transpose); the AVX-512 build uses it too, so the AVX2 tests cover it.
static inline void transpose8x8_scaled(const float* src, int64_t ss, float* dst, int64_t ds,
                                       float scale) {
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
        _mm256_storeu_ps(dst + (c + 4) * ds,
                         _mm256_mul_ps(k, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31)));
    }
}
#endif

#if defined(__AVX512F__)
struct SimdAvx512 {
    using V = __m512;
    using M = __mmask16;
    static constexpr int W = 16;
    // 6 x 4 accumulators + 4 B vectors + 1 broadcast = 29 of 32 zmm registers.
    static constexpr int kR = 6, kNV = 4;
    static constexpr int kBlockQ = 64, kBlockK = 128;
    static constexpr int kBwdBlockQ = 64, kBwdBlockK = 128;
    static inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds, float k) {
        transpose8x8_scaled(src, ss, dst, ds, k);
    }
    static inline void philox8(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
        philox8_avx2(blk0, seed, w);
    }

    static inline V zero() { return _mm512_setzero_ps(); }
    static inline V set1(float x) { return _mm512_set1_ps(x); }
    static inline V load(const float* p) { return _mm512_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static inline M tail(int n) { return n >= W ? M(0xFFFF) : M((1u << n) - 1u); }
    static inline V loadm(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
    static inline void storem(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
    static inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static inline V add(V a, V b) { return _mm512_add_ps(a, b); }
    static inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    static inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static inline V max(V a, V b) { return _mm512_max_ps(a, b); }
    /// s where j <= lim, -inf where j > lim (lane-wise).
    static inline V mask_gt(V s, V j, V lim) {
        return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(j, lim, _CMP_GT_OQ),
                                  _mm512_set1_ps(-INFINITY));
    }
    /// x with -inf lanes replaced by 0.
    static inline V neginf_to_zero(V x) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                                  _mm512_setzero_ps());
    }
    /// x with -inf lanes replaced by +inf.
    static inline V neginf_to_posinf(V x) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                                  _mm512_set1_ps(INFINITY));
    }
    /// x with -inf lanes replaced by the lanes of y.
    static inline V neginf_to(V x, V y) {
        return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), y);
    }
    /// True when every lane has a <= b (false for NaN lanes).
    static inline bool all_le(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ) == 0xFFFF; }
    static inline V exp(V x) {
        // Lanes below kExpLo (incl. -inf) compute garbage and are zeroed by the final mask.
        const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_LT_OQ);
        // n = round(x log2e) by the 1.5 * 2^23 shifter: one FMA and one subtraction instead of
        // vmulps + vrndscaleps (2 uops), |x log2e| <= 128 << 2^22.
        const V sh = _mm512_set1_ps(12582912.0f);
        const V n  = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), sh), sh);
        V f = _mm512_fmsub_ps(x, _mm512_set1_ps(kLog2e), n);
        f   = _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2eLo), f);
        V y = _mm512_set1_ps(kExp2Q0);
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(kExp2Q1));
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(kExp2Q2));
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(kExp2Q3));
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(kExp2Q4));
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(kExp2Q5));
        y   = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
        return _mm512_maskz_scalef_ps(__mmask16(~under), y, n);
    }
};
#endif

#if defined(__AVX2__)
struct SimdAvx2 {
    using V = __m256;
    using M = __m256i;
    static constexpr int W = 8;
    // 6 x 2 accumulators + 2 B vectors + 1 broadcast = 15 of 16 ymm registers.
    static constexpr int kR = 6, kNV = 2;
    static constexpr int kBlockQ = 64, kBlockK = 128;
    static constexpr int kBwdBlockQ = 64, kBwdBlockK = 128;
    static inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds, float k) {
        transpose8x8_scaled(src, ss, dst, ds, k);
    }
    static inline void philox8(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
        philox8_avx2(blk0, seed, w);
    }

    static inline V zero() { return _mm256_setzero_ps(); }
    static inline V set1(float x) { return _mm256_set1_ps(x); }
    static inline V load(const float* p) { return _mm256_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static inline M tail(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static inline V loadm(const float* p, M m) { return _mm256_maskload_ps(p, m); }
    static inline void storem(float* p, V v, M m) { _mm256_maskstore_ps(p, m, v); }
    static inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static inline V add(V a, V b) { return _mm256_add_ps(a, b); }
    static inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static inline V max(V a, V b) { return _mm256_max_ps(a, b); }
    static inline V mask_gt(V s, V j, V lim) {
        return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(j, lim, _CMP_GT_OQ));
    }
    static inline V neginf_to_zero(V x) {
        return _mm256_blendv_ps(x, _mm256_setzero_ps(),
                                _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
    }
    static inline V neginf_to_posinf(V x) {
        return _mm256_blendv_ps(x, _mm256_set1_ps(INFINITY),
                                _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
    }
    static inline V neginf_to(V x, V y) {
        return _mm256_blendv_ps(x, y, _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
    }
    static inline bool all_le(V a, V b) {
        return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ)) == 0xFF;
    }
    static inline V exp(V x) {
        // Lanes below kExpLo (incl. -inf) compute garbage and are zeroed by the final andnot.
        const V under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
        x       = _mm256_min_ps(x, _mm256_set1_ps(kExpHi));
        V n     = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        V r     = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
        r       = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
        V y     = _mm256_set1_ps(kExpP0);
        y       = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP1));
        y       = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP2));
        y       = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP3));
        y       = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP4));
        y       = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP5));
        const V r2 = _mm256_mul_ps(r, r);
        y       = _mm256_fmadd_ps(y, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
        // 2^n for n in [-126, 127]: exponent bits (n + 127) << 23.
        const __m256i e = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        return _mm256_andnot_ps(under, y);
    }
};
#endif

/// Portable fallback: 16 lanes as 4 SSE2-sized GCC vectors, with exactly the
/// AVX-512 geometry (W, register tile, blocks), so on any machine the tests run the tile, tail and
/// mask code the AVX-512 path runs; exp lane by lane with the same recipe.
struct SimdScalar {
    typedef float V4 __attribute__((vector_size(16)));  // GCC generic vector = one SSE register
    struct V {
        V4 p[4];
    };
    using M = int;  // number of valid lanes
    static constexpr int W = 16;
    static constexpr int kR = 6, kNV = 4;
    static constexpr int kBlockQ = 64, kBlockK = 128;
    static constexpr int kBwdBlockQ = 64, kBwdBlockK = 128;
    static inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds, float k) {
        for (int r = 0; r < 8; ++r)
            for (int c = 0; c < 8; ++c) dst[c * ds + r] = k * src[r * ss + c];
    }
    static inline void philox8(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
        for (int l = 0; l < 8; ++l) {
            const uint64_t blk = blk0 + uint64_t(l);
            uint32_t c0 = uint32_t(blk), c1 = uint32_t(blk >> 32), c2 = 0, c3 = 0;
            uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
            for (int r = 0; r < 10; ++r) {
                const uint64_t p0 = uint64_t(kPhiloxM0) * c0, p1 = uint64_t(kPhiloxM1) * c2;
                c0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
                c2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
                c1 = uint32_t(p1);
                c3 = uint32_t(p0);
                k0 += kPhiloxW0;
                k1 += kPhiloxW1;
            }
            w[0][l] = c0, w[1][l] = c1, w[2][l] = c2, w[3][l] = c3;
        }
    }

#define QKV_PARTS(expr)                  \
    V r;                                 \
    for (int u = 0; u < 4; ++u) r.p[u] = expr; \
    return r
    static inline V zero() { return V{}; }
    static inline V set1(float a) { QKV_PARTS(V4{} + a); }
    static inline V load(const float* p) {
        V v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    static inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
    static inline M tail(int n) { return n >= W ? W : n; }
    static inline V loadm(const float* p, M m) {
        V v{};
        std::memcpy(&v, p, sizeof(float) * size_t(m));
        return v;
    }
    static inline void storem(float* p, V v, M m) { std::memcpy(p, &v, sizeof(float) * size_t(m)); }
    static inline V fmadd(V a, V b, V c) { QKV_PARTS(a.p[u] * b.p[u] + c.p[u]); }
    static inline V add(V a, V b) { QKV_PARTS(a.p[u] + b.p[u]); }
    static inline V sub(V a, V b) { QKV_PARTS(a.p[u] - b.p[u]); }
    static inline V mul(V a, V b) { QKV_PARTS(a.p[u] * b.p[u]); }
    static inline V max(V a, V b) { QKV_PARTS(a.p[u] > b.p[u] ? a.p[u] : b.p[u]); }
    static inline V mask_gt(V s, V j, V lim) { QKV_PARTS(j.p[u] > lim.p[u] ? V4{} - INFINITY : s.p[u]); }
    static inline V neginf_to_zero(V a) { QKV_PARTS(a.p[u] == V4{} - INFINITY ? V4{} : a.p[u]); }
    static inline V neginf_to_posinf(V a) {
        QKV_PARTS(a.p[u] == V4{} - INFINITY ? V4{} + INFINITY : a.p[u]);
    }
    static inline V neginf_to(V a, V b) { QKV_PARTS(a.p[u] == V4{} - INFINITY ? b.p[u] : a.p[u]); }
    static inline bool all_le(V a, V b) {
        for (int t = 0; t < W; ++t)
            if (!(a.p[t / 4][t % 4] <= b.p[t / 4][t % 4])) return false;
        return true;
    }
#undef QKV_PARTS
    static inline float exp1(float x) {
        if (x < kExpLo) return 0.0f;
        x             = x > kExpHi ? kExpHi : x;
        const float n = std::nearbyint(x * kLog2e);
        float       r = x - n * kLn2Hi;
        r             = r - n * kLn2Lo;
        float y = ((((kExpP0 * r + kExpP1) * r + kExpP2) * r + kExpP3) * r + kExpP4) * r + kExpP5;
        y       = y * (r * r) + (r + 1.0f);
        return std::ldexp(y, int(n));
    }
    static inline V exp(V a) {
        V r;
        for (int t = 0; t < W; ++t) r.p[t / 4][t % 4] = exp1(a.p[t / 4][t % 4]);
        return r;
    }
};

}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
