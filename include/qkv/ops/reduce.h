#pragma once
// Reductions over dims (differentiable). dims empty = all dims. Negative dims count from the end.
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Max over one dim; the gradient goes to the first maximal element.
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);
/// Sums `grad` over broadcast dims so it has `shape` (the backward of implicit broadcasting).
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);
/// Index of the first maximum along dim (i64, not differentiable).
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);

}  // namespace qkv
