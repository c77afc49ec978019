// Dropout with Philox4x32-10 on 16 counter blocks at once (AVX-512F/BW): twice the blocks per
// instruction of the AVX2 body. Bit-identical to the scalar philox::philox4x32
// (tests/kernels/test_dropout_kernels.cpp checks every path against it).
// GCC 12's avx512fintrin.h starts unmasked shifts and products from _mm512_undefined_epi32(),
// which -Wuninitialized reports once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "core/parallel_for.h"
#include "kernels/cpu/dropout_simd.h"

namespace qkv::kernels::cpu::detail {
namespace {

// 32-bit lanes: hi and lo halves of a·m (even and odd lanes through two _mm512_mul_epu32).
inline void mulhilo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
    const __m512i even = _mm512_mul_epu32(a, m);
    const __m512i odd  = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    lo                 = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    hi                 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// Philox4x32-10 for blocks b0 .. b0+15 (counter (b, b >> 32, 0, 0), key = seed), words in r[0..3].
inline void philox16(uint64_t b0, uint64_t seed, __m512i r[4]) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i base = _mm512_set1_epi32(int32_t(uint32_t(b0)));
    __m512i c0         = _mm512_add_epi32(base, lane);
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);  // the low word wrapped
    __m512i c1 = _mm512_set1_epi32(int32_t(uint32_t(b0 >> 32)));
    c1         = _mm512_mask_add_epi32(c1, carry, c1, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    const __m512i m0 = _mm512_set1_epi32(int32_t(0xD2511F53u)), m1 = _mm512_set1_epi32(int32_t(0xCD9E8D57u));
    for (int round = 0; round < 10; ++round) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo(c0, m0, hi0, lo0);
        mulhilo(c2, m1, hi1, lo1);
        const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(int32_t(k0)));
        const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(int32_t(k1)));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    r[0] = c0, r[1] = c1, r[2] = c2, r[3] = c3;
}

// Reorders words r[w] (lane k = block k) into element order: out[j] holds elements 16j .. 16j+15
// (element 4k + w of the group = word w of block k).
inline void transpose4x16(const __m512i r[4], __m512 out[4]) {
    const __m512 r0 = _mm512_castsi512_ps(r[0]), r1 = _mm512_castsi512_ps(r[1]);
    const __m512 r2 = _mm512_castsi512_ps(r[2]), r3 = _mm512_castsi512_ps(r[3]);
    // Within each 128-bit lane L (blocks 4L .. 4L+3): u0..u3 = the 4 words of block 4L .. 4L+3.
    const __m512 t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);
    const __m512 t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);
    const __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
    const __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
    // 4×4 transpose of the 128-bit lanes: out[j] = lane j of u0, u1, u2, u3.
    const __m512 v0 = _mm512_shuffle_f32x4(u0, u1, 0x44), v1 = _mm512_shuffle_f32x4(u0, u1, 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u2, u3, 0x44), v3 = _mm512_shuffle_f32x4(u2, u3, 0xEE);
    out[0] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    out[1] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    out[2] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    out[3] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
}

}  // namespace

void dropout_apply_avx512(const DropoutGroups& a) {
    const __m512 vp = _mm512_set1_ps(a.p), vs = _mm512_set1_ps(a.scale);
    const __m512 inv24 = _mm512_set1_ps(1.0f / 16777216.0f);
    ::qkv::detail::parallel_for(a.groups, a.groups >= kDropoutMinParallelGroups / 2, [&](int64_t g) {
        __m512i r[4];
        __m512 bits[4];
        philox16(a.block0 + uint64_t(g) * 16, a.seed, r);
        transpose4x16(r, bits);
        for (int j = 0; j < 4; ++j) {
            // uniform01(b) = float(b >> 8) · 2^-24, exact in fp32 as in philox::uniform01.
            const __m512i b     = _mm512_srli_epi32(_mm512_castps_si512(bits[j]), 8);
            const __m512 u      = _mm512_mul_ps(_mm512_cvtepi32_ps(b), inv24);
            const __mmask16 k   = _mm512_cmp_ps_mask(u, vp, _CMP_GE_OQ);
            const int64_t e     = g * 64 + j * 16;
            _mm512_storeu_ps(a.y + e, _mm512_maskz_mul_ps(k, _mm512_loadu_ps(a.x + e), vs));
            if (a.mask) _mm_storeu_si128(reinterpret_cast<__m128i*>(a.mask + e), _mm_maskz_set1_epi8(k, 1));
        }
    });
}

}  // namespace qkv::kernels::cpu::detail
