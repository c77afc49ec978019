#pragma once
// Philox4x32-10 (Salmon et al. 2011) on W counter blocks at once: part of the SIMD layer
// (cpu/simd.h). include/qkv/core/philox.h is the scalar specification; this header gives the same
// words for every vector width, with the ten rounds written once (philox_blocks) over a lane type:
//   P1:  one block in plain uint32_t (the portable build of flash attention);
//   P8:  8 blocks in the 8 lanes of an AVX2 register;
//   P16: 16 blocks in the 16 lanes of an AVX-512 register.
// Each lane type gives the 32 x 32 -> hi, lo product (mulhilo; x86 has no such instruction, so
// even and odd lanes go through two vpmuludq), the counters of consecutive blocks and, for the
// dropout kernels, the reorder of W blocks' words into element order and the uniform01 map.
// Users: cpu/dropout_simd.h (P8, P16) and flash attention's dropout tiles (flash_traits.h: P8 on
// the AVX2 and AVX-512 builds, P1 on the portable one). tests/kernels/test_dropout_kernels.cpp
// checks every width against philox.h exactly.
//
// ODR: as simd.h, everything sits in an unnamed namespace (philox.h's inline functions are not
// called from here: an out-of-line copy compiled with AVX-512 flags could be linked into a caller
// running on an AVX2-only CPU).
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace qkv::kernels::cpu::simd {
namespace {

// The constants of philox.h: multipliers and the Weyl key increments.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

/// One block per "vector": plain 32-bit words.
struct P1 {
    using I                = uint32_t;
    static constexpr int W = 1;
    static I zero() { return 0u; }
    static I set1(uint32_t a) { return a; }
    static I xor_(I a, I b) { return a ^ b; }
    static void counters(uint64_t b0, I& lo, I& hi) { lo = uint32_t(b0), hi = uint32_t(b0 >> 32); }
    static void mulhilo(I a, I m, I& hi, I& lo) {
        const uint64_t p = uint64_t(m) * a;
        hi = uint32_t(p >> 32), lo = uint32_t(p);
    }
    static void store(uint32_t* p, I a) { *p = a; }
};

#if defined(__AVX2__)
/// 8 blocks in the 8 lanes of an AVX2 register.
struct P8 {
    using I                = __m256i;
    using F                = __m256;
    static constexpr int W = 8;
    static I zero() { return _mm256_setzero_si256(); }
    static I set1(uint32_t a) { return _mm256_set1_epi32(int32_t(a)); }
    static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
    /// Lane k: the low and high words of block b0 + k (the carry into the high word by an unsigned
    /// compare: c0 < base, with the sign bits flipped).
    static void counters(uint64_t b0, I& lo, I& hi) {
        const I lane  = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const I base  = _mm256_set1_epi32(int32_t(uint32_t(b0)));
        lo            = _mm256_add_epi32(base, lane);
        const I flip  = _mm256_set1_epi32(int32_t(0x80000000u));
        const I carry = _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip), _mm256_xor_si256(lo, flip));
        hi            = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(uint32_t(b0 >> 32))), carry);
    }
    /// hi and lo halves of a·m per 32-bit lane (even and odd lanes through two _mm256_mul_epu32).
    static void mulhilo(I a, I m, I& hi, I& lo) {
        const I even = _mm256_mul_epu32(a, m);
        const I odd  = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
        lo           = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
        hi           = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    }
    static void store(uint32_t* p, I a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a); }
    /// Words r[w] (lane k = block k) in element order: out[j] holds elements 8j .. 8j+7 (element
    /// 4k + w of the 32 = word w of block k).
    static void to_elements(const I r[4], F out[4]) {
        const F r0 = _mm256_castsi256_ps(r[0]), r1 = _mm256_castsi256_ps(r[1]);
        const F r2 = _mm256_castsi256_ps(r[2]), r3 = _mm256_castsi256_ps(r[3]);
        const F t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        const F t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        const F u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
        const F u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        out[0] = _mm256_permute2f128_ps(u0, u1, 0x20);  // blocks 0, 1
        out[1] = _mm256_permute2f128_ps(u2, u3, 0x20);  // blocks 2, 3
        out[2] = _mm256_permute2f128_ps(u0, u1, 0x31);  // blocks 4, 5
        out[3] = _mm256_permute2f128_ps(u2, u3, 0x31);  // blocks 6, 7
    }
    /// uniform01(bits) = float(bits >> 8) · 2^-24 per lane, exact in fp32 as in philox::uniform01.
    static F uniform01(F bits) {
        const I b = _mm256_srli_epi32(_mm256_castps_si256(bits), 8);
        return _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_set1_ps(1.0f / 16777216.0f));
    }
};
#endif

#if defined(__AVX512F__)
/// 16 blocks in the 16 lanes of an AVX-512 register.
struct P16 {
    using I                = __m512i;
    using F                = __m512;
    static constexpr int W = 16;
    static I zero() { return _mm512_setzero_si512(); }
    static I set1(uint32_t a) { return _mm512_set1_epi32(int32_t(a)); }
    static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
    static void counters(uint64_t b0, I& lo, I& hi) {
        const I lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const I base = _mm512_set1_epi32(int32_t(uint32_t(b0)));
        lo           = _mm512_add_epi32(base, lane);
        const __mmask16 carry = _mm512_cmplt_epu32_mask(lo, base);  // the low word wrapped
        hi = _mm512_set1_epi32(int32_t(uint32_t(b0 >> 32)));
        hi = _mm512_mask_add_epi32(hi, carry, hi, _mm512_set1_epi32(1));
    }
    static void mulhilo(I a, I m, I& hi, I& lo) {
        const I even = _mm512_mul_epu32(a, m);
        const I odd  = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
        lo           = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
        hi           = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    }
    static void store(uint32_t* p, I a) { _mm512_storeu_si512(p, a); }
    /// Words r[w] (lane k = block k) in element order: out[j] holds elements 16j .. 16j+15.
    static void to_elements(const I r[4], F out[4]) {
        const F r0 = _mm512_castsi512_ps(r[0]), r1 = _mm512_castsi512_ps(r[1]);
        const F r2 = _mm512_castsi512_ps(r[2]), r3 = _mm512_castsi512_ps(r[3]);
        // Within each 128-bit lane L (blocks 4L .. 4L+3): u0..u3 = the 4 words of block 4L .. 4L+3.
        const F t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);
        const F t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);
        const F u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
        const F u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
        // 4×4 transpose of the 128-bit lanes: out[j] = lane j of u0, u1, u2, u3.
        const F v0 = _mm512_shuffle_f32x4(u0, u1, 0x44), v1 = _mm512_shuffle_f32x4(u0, u1, 0xEE);
        const F v2 = _mm512_shuffle_f32x4(u2, u3, 0x44), v3 = _mm512_shuffle_f32x4(u2, u3, 0xEE);
        out[0] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        out[1] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        out[2] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        out[3] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
    static F uniform01(F bits) {
        const I b = _mm512_srli_epi32(_mm512_castps_si512(bits), 8);
        return _mm512_mul_ps(_mm512_cvtepi32_ps(b), _mm512_set1_ps(1.0f / 16777216.0f));
    }
};
#endif

/// Philox4x32-10 for blocks b0 .. b0 + P::W - 1 (counter (b, b >> 32, 0, 0), key = seed): word w
/// of block b0 + k in lane k of r[w]. The one copy of the rounds.
template <class P>
inline void philox_blocks(uint64_t b0, uint64_t seed, typename P::I r[4]) {
    using I = typename P::I;
    I c0, c1;
    P::counters(b0, c0, c1);
    I        c2 = P::zero(), c3 = P::zero();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    const I  m0 = P::set1(kPhiloxM0), m1 = P::set1(kPhiloxM1);
    for (int round = 0; round < 10; ++round) {
        I hi0, lo0, hi1, lo1;
        P::mulhilo(c0, m0, hi0, lo0);
        P::mulhilo(c2, m1, hi1, lo1);
        const I n0 = P::xor_(P::xor_(hi1, c1), P::set1(k0));
        const I n2 = P::xor_(P::xor_(hi0, c3), P::set1(k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
    }
    r[0] = c0, r[1] = c1, r[2] = c2, r[3] = c3;
}

/// w[k][l] = word k of block b0 + l for l < N (N a multiple of P::W): the layout of flash
/// attention's dropout tiles.
template <class P, int N>
inline void philox_words(uint64_t b0, uint64_t seed, uint32_t w[4][N]) {
    static_assert(N % P::W == 0);
    for (int l = 0; l < N; l += P::W) {
        typename P::I r[4];
        philox_blocks<P>(b0 + uint64_t(l), seed, r);
        for (int k = 0; k < 4; ++k) P::store(w[k] + l, r[k]);
    }
}

}  // namespace
}  // namespace qkv::kernels::cpu::simd
