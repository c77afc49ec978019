#pragma once
// Per-row symmetric int8 quantization of activations (ops/quantize.h): the per-ISA body of
// cpu/quantize_simd.h, threaded over rows.
#include <cstdint>

namespace qkv::kernels::cpu {

/// scale[r] = max|x_r| / 127, q = x_r·(1/scale[r]) rounded half away from zero in [-127, 127]
/// (all-zero row: scale 0, q 0; a NaN row: scale NaN). x is rows × cols, dense.
void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols);

}  // namespace qkv::kernels::cpu
