#pragma once
// Layer normalisation over the last dims (Ba et al. 2016; D2L 11.7 AddNorm uses it post-residual).
#include "qkv/core/tensor.h"

namespace qkv {

/// x: (..., *normalized_shape); y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance
/// over the normalized dims; weight/bias of normalized_shape or undefined. Differentiable in x,
/// weight and bias (fused kernel with its own backward).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);

/// layer_norm(x + residual, ...) as one fused op (D2L 11.7.3 AddNorm: LN(dropout(Y) + X)): one
/// pass per row forms the sum and normalises it, one node's backward gives both addends the
/// same gradient. Same values as layer_norm(add(x, residual), ...) bit for bit (same fp32
/// kernels). residual: x's shape and dtype, else qkv::Error naming it; other arguments and
/// errors as layer_norm. Differentiable in x, residual, weight and bias.
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace qkv
