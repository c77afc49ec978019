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
/// Index of the first maximum along dim (i64, not differentiable); a NaN counts as the largest
/// value (the first NaN wins).
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
/// argmax over the last dim that never picks a banned index: a (..., n) of any dtype, banned
/// empty or n flags (non-zero = never chosen) -> i64 (...), values in [0, n), or -1 for a row
/// whose every index is banned. argmax's rule (the first maximum; a NaN counts as the largest);
/// greedy decoding's choice of token (models::EncoderDecoder::greedy_next, linear_argmax follow
/// it). Not differentiable. Throws when a has no dims, n == 0, or banned has another length.
Tensor argmax_allowed(const Tensor& a, const std::vector<char>& banned);

}  // namespace qkv
