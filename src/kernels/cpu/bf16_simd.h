#pragma once
// float -> bf16 conversion of arrays (the operand copies of kernels/cpu/gemm_bf16.cpp), one body
// for every ISA tier (cpu/variants.inc instantiates it per tier). Every tier gives the bits of
// core/bf16.h's bf16_bits: round to nearest even on the bit pattern, NaN made quiet with its sign
// kept; explicit vectors, since the compiler keeps the NaN branch of the plain loop scalar.
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/isa.h"
#include "qkv/core/bf16.h"

namespace qkv::kernels::cpu::simd {

/// dst[i] = bf16_bits(src[i]) for i < n when dst is non-null, else dst32[i] = round_to_bf16(src[i])
/// as floats (the fp32 GEMM on rounded copies).
template <Isa I>
void convert_bf16(uint16_t* dst, float* dst32, const float* src, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    {
        const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
        const __m512i quiet = _mm512_set1_epi32(0x00400000), hi = _mm512_set1_epi32(int(0xffff0000u));
        for (; i + 16 <= n; i += 16) {
            const __m512    x   = _mm512_loadu_ps(src + i);
            const __m512i   u   = _mm512_castps_si512(x);
            const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
            r         = _mm512_mask_or_epi32(r, nan, u, quiet);
            if (dst)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
            else
                _mm512_storeu_si512(dst32 + i, _mm512_and_si512(r, hi));
        }
    }
#elif defined(__AVX2__)
    {
        const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
        const __m256i quiet = _mm256_set1_epi32(0x00400000), hi = _mm256_set1_epi32(int(0xffff0000u));
        for (; i + 8 <= n; i += 8) {
            const __m256  x   = _mm256_loadu_ps(src + i);
            const __m256i u   = _mm256_castps_si256(x);
            const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
            r         = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
            if (dst) {
                // 8 upper halves -> 8 uint16: pack within lanes, then gather the two 64-bit halves
                const __m256i s = _mm256_srli_epi32(r, 16);
                const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(s, s), 0x08);
                _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(p));
            } else {
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst32 + i), _mm256_and_si256(r, hi));
            }
        }
    }
#endif
    for (; i < n; ++i) {
        if (dst) dst[i] = bf16_bits(src[i]);
        else dst32[i] = round_to_bf16(src[i]);
    }
}

}  // namespace qkv::kernels::cpu::simd
