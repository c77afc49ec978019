#pragma once
// Layer normalisation over the last dims (Ba et al. 2016; D2L 11.7 AddNorm uses it post-residual).
#include "qkv/core/tensor.h"

namespace qkv {

/// x: (..., *normalized_shape); y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance
/// over the normalized dims; weight/bias of normalized_shape or undefined. Differentiable in x,
/// weight and bias (fused kernel with its own backward).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);

}  // namespace qkv
