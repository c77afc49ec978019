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
#include "kernels/cpu/simd.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_attention_simd.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {

// exp is the one SIMD exp of cpu/simd.h (simd::exp; the flush rule — x < -87 gives exactly 0, so
// exp(-inf) = 0 and no denormal reaches the GEMMs — is written down there). The portable build
// applies the same rule lane by lane with the Cephes e^r recipe.
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

// The traits derive from simd.h's vector types, which live in an unnamed namespace (ODR note
// there): so do the traits.
namespace {

#if defined(__AVX512F__)
struct SimdAvx512 : simd::V16 {
    using V = R;
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
    static inline M tail(int n) { return n >= W ? M(0xFFFF) : M((1u << n) - 1u); }
    static inline V loadm(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
    static inline void storem(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
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
    /// x rounded to bf16 (round to nearest even on the bits, as core/bf16.h), as floats; NaN
    /// lanes are kept as they are (the carry of the rounding bias could change a NaN's class).
    static inline V round_bf16(V x) {
        const __m512i u   = _mm512_castps_si512(x);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r   = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                                             _mm512_set1_epi32(int(0xffff0000u)));
        return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
    }
};

/// SimdAvx512's backward with one-vector query blocks, for few queries (see SimdAvx512DotShortQ).
struct SimdAvx512ShortQ : SimdAvx512 {
    static constexpr int kBwdBlockQ = 16;
};
#endif

#if defined(__AVX512BF16__)
/// The AVX-512-BF16 build (flash_attention_avx512bf16.cpp): SimdAvx512 plus the bf16 operand
/// words of vdpbf16ps. A word holds two bf16 values of the same lane that are consecutive along
/// the reduction (low half first), and one vdpbf16ps adds both products of each lane into its
/// fp32 accumulator, so a W-lane vector of words carries 2W products. kDot selects the word
/// GEMMs in flash_attention_impl.h.
struct SimdAvx512Dot : SimdAvx512 {
    static constexpr bool kDot = true;
    using WV = __m512i;
    static inline WV loadw(const uint32_t* p) { return _mm512_loadu_si512(p); }
    static inline WV loadwm(const uint32_t* p, M m) { return _mm512_maskz_loadu_epi32(m, p); }
    static inline void storew(uint32_t* p, WV w) { _mm512_storeu_si512(p, w); }
    static inline WV set1w(uint32_t x) { return _mm512_set1_epi32(int(x)); }
    /// acc + a.lo · b.lo + a.hi · b.hi per lane (bf16 products exact in fp32; inputs and results
    /// below 2^-126 are taken as 0, as AVX-512-BF16 defines).
    static inline V dot(V acc, WV a, WV b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
    /// x's bf16 bit patterns (round_bf16's rounding; NaN made quiet) in the high halves of the
    /// lanes; the low halves are 0 except in NaN lanes (which keep their low mantissa bits).
    static inline __m512i bf16_high(V x) {
        const __m512i r = _mm512_castps_si512(round_bf16(x));
        return _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x00400000));
    }
    /// Words lo = bf16(x0), hi = bf16(x1), lane by lane (a NaN's low mantissa bits are cleared).
    static inline WV pair(V x0, V x1) {
        const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
        return _mm512_or_si512(_mm512_srli_epi32(bf16_high(x0), 16), _mm512_and_si512(bf16_high(x1), hi));
    }
    /// Stores bf16(x) of the lanes in m as consecutive 16-bit values.
    static inline void store_bf16(uint16_t* p, V x, M m) {
        _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_high(x), 16)));
    }
    /// dst[c * ds + r] = src[r * ss + c] for a 16 x 16 block of 32-bit values (words or floats):
    /// the AMX kernels' V^T / K^T packs and the transposed O / dQ write-back.
    static inline void transpose16(const uint32_t* src, int64_t ss, uint32_t* dst, int64_t ds) {
        __m512i r[16], t[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * ss);
        for (int i = 0; i < 16; i += 2) {
            t[i]     = _mm512_unpacklo_epi32(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4) {
            r[i]     = _mm512_unpacklo_epi64(t[i], t[i + 2]);
            r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
            r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
            r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
        }
        // r[4q + k] holds, per 128-bit lane L, column 4L + k' of rows 4q..4q+3 (k' = k's slot order)
        for (int i = 0; i < 16; i += 8)
            for (int k = 0; k < 4; ++k) {
                t[i + k]     = _mm512_shuffle_i32x4(r[i + k], r[i + 4 + k], 0x88);
                t[i + 4 + k] = _mm512_shuffle_i32x4(r[i + k], r[i + 4 + k], 0xdd);
            }
        for (int k = 0; k < 4; ++k) {
            r[k]      = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
            r[8 + k]  = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
            r[4 + k]  = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0x88);
            r[12 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0xdd);
        }
        for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * ds, r[i]);
    }
    /// Whether a bf16 half of a word of w is ±inf or NaN.
    static inline bool any_nonfinite(WV w) {
        const __m512i e = _mm512_set1_epi32(0x7f807f80);
        const __m512i x = _mm512_and_si512(w, e);
        return _mm512_cmpeq_epi16_mask(x, e) != 0;
    }
};

/// The backward for few queries (Tq <= 16, e.g. a training step's 10-token sentences): query
/// blocks of one vector (16 lanes) instead of 64, so the lane-wise score tiles, probabilities and
/// query packing do not run on 48 padding lanes.
struct SimdAvx512DotShortQ : SimdAvx512Dot {
    static constexpr int kBwdBlockQ = 16;
};
#endif

#if defined(__AVX2__)
struct SimdAvx2 : simd::V8 {
    using V = R;
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
    static inline M tail(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static inline V loadm(const float* p, M m) { return _mm256_maskload_ps(p, m); }
    static inline void storem(float* p, V v, M m) { _mm256_maskstore_ps(p, m, v); }
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
    static inline V round_bf16(V x) {
        const __m256i u   = _mm256_castps_si256(x);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r   = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                                             _mm256_set1_epi32(int(0xffff0000u)));
        return _mm256_blendv_ps(_mm256_castsi256_ps(r), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
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
    static inline V round_bf16(V a) {
        V r;
        for (int t = 0; t < W; ++t) {
            const float x = a.p[t / 4][t % 4];
            uint32_t    u;
            std::memcpy(&u, &x, 4);
            if (x == x) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            float y;
            std::memcpy(&y, &u, 4);
            r.p[t / 4][t % 4] = y;
        }
        return r;
    }
    static inline float exp1(float x) {
        using namespace simd;
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

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
