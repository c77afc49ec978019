#pragma once
// Matrix products. fp32 goes to oneDNN's sgemm (chosen by measurement: bench/RESULTS.md);
// f64 uses the reference kernel (gradcheck).
#include "qkv/core/tensor.h"

namespace qkv {

/// a: (..., M, K), b: (..., K, N) -> (..., M, N). 2-D × 2-D is a plain GEMM; batch dims broadcast
/// (NumPy rules); a 1-D operand is treated as a row/column vector and that dim is dropped, as in
/// torch.matmul. Throws naming both shapes when K differs.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x: (..., in), weight: (out, in), bias: (out) or undefined -> (..., out) = x·weightᵀ + bias
/// (torch.nn.functional.linear). One GEMM over all leading dims.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace qkv
