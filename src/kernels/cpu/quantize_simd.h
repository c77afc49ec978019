#pragma once
// Per-row symmetric int8 quantization (ops/quantize.h's activations), one body for every ISA
// tier: plain loops the tier's compiler flags vectorise (cpu/variants.inc instantiates it).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace qkv::kernels::cpu::simd {

/// For each of `rows` rows of x (cols floats each): scale[r] = max|x_r| / 127 and
/// q[r·cols + c] = x·(1/scale) in fp32 rounded half away from zero, clamped to ±127 (0 for an
/// all-zero row; a NaN makes the scale NaN, which the caller refuses).
template <Isa I>
void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        int8_t* out = q + r * cols;
        float m = 0.0f;
        bool nan = false;
        for (int64_t c = 0; c < cols; ++c) {
            const float a = std::fabs(row[c]);
            nan |= a != a;
            m = a > m ? a : m;
        }
        const float s = nan ? NAN : m / 127.0f;
        scale[r] = s;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            const float t = std::min(std::max(row[c] * inv, -127.0f), 127.0f);
            out[c] = int8_t(int32_t(t + (t >= 0.0f ? 0.5f : -0.5f)));
        }
    }
}

}  // namespace qkv::kernels::cpu::simd
