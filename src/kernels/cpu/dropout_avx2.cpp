// Dropout with Philox4x32-10 on 8 counter blocks at once (AVX2); also used on AVX-512 CPUs.
// Bit-identical to the scalar philox::philox4x32 (tests/kernels/test_dropout_kernels.cpp).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/dropout_simd.h"

namespace qkv::kernels::cpu::detail {
namespace {

// 32-bit lanes: hi and lo halves of a·m for a constant multiplier m (even lanes and odd lanes
// through two _mm256_mul_epu32).
inline void mulhilo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
    const __m256i even = _mm256_mul_epu32(a, m);
    const __m256i odd  = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    lo                 = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    hi                 = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Philox4x32-10 for blocks b0 .. b0+7 (counter (b, b >> 32, 0, 0), key = seed), words in r[0..3].
inline void philox8(uint64_t b0, uint64_t seed, __m256i r[4]) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // Counters b0 + k: low words and carries into the high word.
    const __m256i base = _mm256_set1_epi32(int32_t(uint32_t(b0)));
    __m256i c0         = _mm256_add_epi32(base, lane);
    // Unsigned overflow of the low word: c0 < base (compare with the sign bit flipped).
    const __m256i flip = _mm256_set1_epi32(int32_t(0x80000000u));
    const __m256i carry =
        _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip), _mm256_xor_si256(c0, flip));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(uint32_t(b0 >> 32))), carry);
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    const __m256i m0 = _mm256_set1_epi32(int32_t(0xD2511F53u)),
                  m1 = _mm256_set1_epi32(int32_t(0xCD9E8D57u));
    for (int round = 0; round < 10; ++round) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo(c0, m0, hi0, lo0);
        mulhilo(c2, m1, hi1, lo1);
        const __m256i n0 =
            _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int32_t(k0)));
        const __m256i n2 =
            _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int32_t(k1)));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    r[0] = c0, r[1] = c1, r[2] = c2, r[3] = c3;
}

// Reorders words r[w] (lane k = block k) into element order: out[j] holds elements 8j .. 8j+7
// (element 4k + w of the group = word w of block k).
inline void transpose4x8(const __m256i r[4], __m256 out[4]) {
    const __m256 r0 = _mm256_castsi256_ps(r[0]), r1 = _mm256_castsi256_ps(r[1]);
    const __m256 r2 = _mm256_castsi256_ps(r[2]), r3 = _mm256_castsi256_ps(r[3]);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    out[0] = _mm256_permute2f128_ps(u0, u1, 0x20);  // blocks 0, 1
    out[1] = _mm256_permute2f128_ps(u2, u3, 0x20);  // blocks 2, 3
    out[2] = _mm256_permute2f128_ps(u0, u1, 0x31);  // blocks 4, 5
    out[3] = _mm256_permute2f128_ps(u2, u3, 0x31);  // blocks 6, 7
}

}  // namespace

void dropout_apply_avx2(const DropoutGroups& a) {
    const auto x = a.x; const auto y = a.y; const auto mask = a.mask; const auto groups = a.groups;
    const auto p = a.p; const auto scale = a.scale; const auto seed = a.seed;
    const auto block0 = a.block0;
#pragma omp parallel for schedule(static) if (groups >= kDropoutMinParallelGroups)
    for (int64_t g = 0; g < groups; ++g) {
        __m256i r[4];
        __m256 bits[4];
        philox8(block0 + uint64_t(g) * 8, seed, r);
        transpose4x8(r, bits);
        const __m256 vp = _mm256_set1_ps(p), vs = _mm256_set1_ps(scale);
        const __m256 inv24 = _mm256_set1_ps(1.0f / 16777216.0f);
        __m256i keep[4];
        for (int j = 0; j < 4; ++j) {
            // uniform01(b) = float(b >> 8) · 2^-24, exact in fp32 as in philox::uniform01.
            const __m256i b = _mm256_srli_epi32(_mm256_castps_si256(bits[j]), 8);
            const __m256 u  = _mm256_mul_ps(_mm256_cvtepi32_ps(b), inv24);
            const __m256 k  = _mm256_cmp_ps(u, vp, _CMP_GE_OQ);
            const int64_t e = g * 32 + j * 8;
            _mm256_storeu_ps(y + e, _mm256_and_ps(k, _mm256_mul_ps(_mm256_loadu_ps(x + e), vs)));
            keep[j] = _mm256_srli_epi32(_mm256_castps_si256(k), 31);  // 0 / 1
        }
        if (mask) {
            const __m256i p01 = _mm256_packs_epi32(keep[0], keep[1]);
            const __m256i p23 = _mm256_packs_epi32(keep[2], keep[3]);
            const __m256i b   = _mm256_packs_epi16(p01, p23);
            const __m256i ord =
                _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(mask + g * 32), ord);
        }
    }
}

void dropout_backward_mask_avx2(
    const float* dy, float* dx, const uint8_t* mask, int64_t groups, float scale) {
    const __m256 vs = _mm256_set1_ps(scale);
#pragma omp parallel for schedule(static) if (groups >= kDropoutMinParallelGroups)
    for (int64_t g = 0; g < groups; ++g) {
        for (int j = 0; j < 4; ++j) {
            const int64_t e = g * 32 + j * 8;
            // The mask bytes e .. e+7 widened to 32-bit lanes; a kept lane is all ones.
            const __m256i w =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask + e)));
            const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(w, _mm256_setzero_si256()));
            _mm256_storeu_ps(dx + e, _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(dy + e), vs)));
        }
    }
}

}  // namespace qkv::kernels::cpu::detail
