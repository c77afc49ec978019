#pragma once
// Per-row symmetric int8 quantization of activations (ops/quantize.h): the per-ISA body of
// cpu/quantize_simd.h, threaded over rows.
#include <cstdint>

namespace qkv::kernels::cpu {

/// scale[r] = max|x_r| / qmax, q = x_r·(1/scale[r]) rounded half away from zero in [-qmax, qmax]
/// (all-zero row: scale 0, q 0; a NaN row: scale NaN). x is rows × cols, dense. qmax is an integer
/// in [1, 127]: 127, or 63 where the int8 GEMM needs 7-bit activations (gemm_int8.h).
void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols, float qmax);

}  // namespace qkv::kernels::cpu
