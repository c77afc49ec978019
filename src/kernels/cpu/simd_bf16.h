#pragma once
// bf16 word operands on 16 lanes: part of the SIMD layer (cpu/simd.h), for the AVX-512-BF16 and
// AMX builds of flash attention (flash_traits.h: SimdAvx512Dot). A word holds two bf16 values of
// the same lane that are consecutive along a reduction (low half first); one vdpbf16ps adds both
// products of each lane into its fp32 accumulator, so a 16-lane vector of words carries 32
// products. Everything but dot needs AVX-512F/BW only; dot needs AVX512_BF16.
// ODR: an unnamed namespace, as simd.h.
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace qkv::kernels::cpu::simd {
namespace {

#if defined(__AVX512F__)
/// bf16 words in the 16 lanes of an AVX-512 register (the float side is V16).
struct W16 {
    using WV = __m512i;
    static WV loadw(const uint32_t* p) { return _mm512_loadu_si512(p); }
    static WV loadwm(const uint32_t* p, __mmask16 m) { return _mm512_maskz_loadu_epi32(m, p); }
    static void storew(uint32_t* p, WV w) { _mm512_storeu_si512(p, w); }
    static WV set1w(uint32_t x) { return _mm512_set1_epi32(int(x)); }
#if defined(__AVX512BF16__)
    /// acc + a.lo · b.lo + a.hi · b.hi per lane (bf16 products exact in fp32; inputs and results
    /// below 2^-126 are taken as 0, as AVX-512-BF16 defines).
    static __m512 dot(__m512 acc, WV a, WV b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
#endif
    /// x's bf16 bit patterns (V16::round_bf16's rounding; NaN made quiet) in the high halves of the
    /// lanes; the low halves are 0 except in NaN lanes (which keep their low mantissa bits).
    static __m512i bf16_high(__m512 x) {
        const __m512i r = _mm512_castps_si512(V16::round_bf16(x));
        return _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x00400000));
    }
    /// Words lo = bf16(x0), hi = bf16(x1), lane by lane (a NaN's low mantissa bits are cleared).
    static WV pair(__m512 x0, __m512 x1) {
        const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
        return _mm512_or_si512(_mm512_srli_epi32(bf16_high(x0), 16), _mm512_and_si512(bf16_high(x1), hi));
    }
    /// Stores bf16(x) of the lanes in m as consecutive 16-bit values.
    static void store_bf16(uint16_t* p, __m512 x, __mmask16 m) {
        _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_high(x), 16)));
    }
    /// dst[c * ds + r] = src[r * ss + c] for a 16 x 16 block of 32-bit values (words or floats):
    /// the AMX kernels' V^T / K^T packs and the transposed O / dQ write-back.
    static void transpose16(const uint32_t* src, int64_t ss, uint32_t* dst, int64_t ds) {
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
    static bool any_nonfinite(WV w) {
        const __m512i e = _mm512_set1_epi32(0x7f807f80);
        const __m512i x = _mm512_and_si512(w, e);
        return _mm512_cmpeq_epi16_mask(x, e) != 0;
    }
};
#endif

}  // namespace
}  // namespace qkv::kernels::cpu::simd
