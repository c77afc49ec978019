#pragma once
// Per-row symmetric int8 quantization (ops/quantize.h's activations), one body for every ISA
// tier (cpu/variants.inc instantiates it per tier; explicit vectors of the SIMD layer, cpu/simd.h:
// the compiler kept the plain loop scalar because of the NaN check and the rounding).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"

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
        if constexpr (I != Isa::scalar) {
            using V = Vec<I>;
            typename V::R mv = V::zero();
            unsigned bad = 0;
            for (; c + V::W <= cols; c += V::W) {
                const auto v = V::load(row + c);
                bad |= V::nan_bits(v);
                mv = V::max(V::abs(v), mv);  // a NaN lane keeps mv (x86 max returns the second operand)
            }
            m = V::reduce_max(mv);
            nan = bad != 0;
        }
        for (; c < cols; ++c) {
            const float a = std::fabs(row[c]);
            nan |= a != a;
            m = a > m ? a : m;
        }
        const float s = nan ? NAN : m / qmax;
        scale[r] = s;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        c = 0;
        if constexpr (I != Isa::scalar) {
            using V = Vec<I>;
            const auto iv = V::set1(inv), lo = V::set1(-qmax), hi = V::set1(qmax);
            const auto half = V::set1(0.5f), mhalf = V::set1(-0.5f), zero = V::zero();
            for (; c + V::W <= cols; c += V::W) {
                auto t = V::min(V::max(V::mul(V::load(row + c), iv), lo), hi);
                t = V::add(t, V::select(V::ge(t, zero), half, mhalf));
                V::store_i8_sat(out + c, t);
            }
        }
        for (; c < cols; ++c) out[c] = round_clamp(row[c] * inv, qmax);
    }
}

}  // namespace qkv::kernels::cpu::simd
