#pragma once
// Per-row symmetric int8 quantization (ops/quantize.h's activations), one body for every ISA
// tier (cpu/variants.inc instantiates it per tier; explicit vectors: the compiler kept the plain
// loop scalar because of the NaN check and the rounding).
#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/isa.h"

namespace qkv::kernels::cpu::simd {

namespace quantize_detail {
/// x rounded half away from zero to an integer after clamping to ±qmax (the scalar rule).
static inline int8_t round_clamp(float t, float qmax) {  // static: each ISA build keeps its own copy
    t = std::min(std::max(t, -qmax), qmax);
    return int8_t(int32_t(t + (t >= 0.0f ? 0.5f : -0.5f)));
}
}  // namespace quantize_detail

/// For each of `rows` rows of x (cols floats each): scale[r] = max|x_r| / qmax and
/// q[r·cols + c] = x·(1/scale) in fp32 rounded half away from zero, clamped to ±qmax (0 for an
/// all-zero row; a NaN makes the scale NaN, which the caller refuses). The AVX-512 and AVX2 builds
/// do the same fp32 operations on 16 / 8 lanes (max, multiply, clamp, ±0.5, truncate), so every
/// tier gives the same bytes; the portable build is the scalar loop.
template <Isa I>
void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols, float qmax) {
    using quantize_detail::round_clamp;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        int8_t* out = q + r * cols;
        float m = 0.0f;
        bool nan = false;
        int64_t c = 0;
#if defined(__AVX512F__)
        {
            __m512 mv = _mm512_setzero_ps();
            __mmask16 bad = 0;
            for (; c + 16 <= cols; c += 16) {
                const __m512 v = _mm512_loadu_ps(row + c);
                bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                mv = _mm512_max_ps(_mm512_abs_ps(v), mv);
            }
            m = _mm512_reduce_max_ps(mv);
            nan = bad != 0;
        }
#elif defined(__AVX2__)
        {
            const __m256 sign = _mm256_set1_ps(-0.0f);
            __m256 mv = _mm256_setzero_ps();
            int bad = 0;
            for (; c + 8 <= cols; c += 8) {
                const __m256 v = _mm256_loadu_ps(row + c);
                bad |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                mv = _mm256_max_ps(_mm256_andnot_ps(sign, v), mv);
            }
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, mv);
            for (float l : lanes) m = l > m ? l : m;
            nan = bad != 0;
        }
#endif
        for (; c < cols; ++c) {
            const float a = std::fabs(row[c]);
            nan |= a != a;
            m = a > m ? a : m;
        }
        const float s = nan ? NAN : m / qmax;
        scale[r] = s;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        c = 0;
#if defined(__AVX512F__)
        {
            const __m512 iv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-qmax), hi = _mm512_set1_ps(qmax);
            const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f), zero = _mm512_setzero_ps();
            for (; c + 16 <= cols; c += 16) {
                __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(row + c), iv), lo), hi);
                t = _mm512_add_ps(t, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, zero, _CMP_GE_OQ), mhalf, half));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(t)));
            }
        }
#elif defined(__AVX2__)
        {
            const __m256 iv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-qmax), hi = _mm256_set1_ps(qmax);
            const __m256 half = _mm256_set1_ps(0.5f), mhalf = _mm256_set1_ps(-0.5f), zero = _mm256_setzero_ps();
            for (; c + 8 <= cols; c += 8) {
                __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(row + c), iv), lo), hi);
                t = _mm256_add_ps(t, _mm256_blendv_ps(mhalf, half, _mm256_cmp_ps(t, zero, _CMP_GE_OQ)));
                const __m256i i32 = _mm256_cvttps_epi32(t);
                const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
                _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm_packs_epi16(i16, i16));
            }
        }
#endif
        for (; c < cols; ++c) out[c] = round_clamp(row[c] * inv, qmax);
    }
}

}  // namespace qkv::kernels::cpu::simd
