#pragma once
// Joining, splitting, gathering and repeating (all differentiable on float inputs).
// View-making ops (reshape, transpose, permute, slice, select, unsqueeze, squeeze, expand) are
// Tensor methods (core/tensor.h).
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

/// Joins along an existing dim; all other dims equal.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
/// Joins along a new dim; all shapes equal.
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
/// Pieces of `size` along dim (last may be smaller); views.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
/// n nearly equal pieces along dim; views.
std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim);
/// out[..., i, ...] = x[..., index[i], ...] along dim; index i64 1-D; throws on out-of-range.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// The inverse of index_select on dim 0 for distinct indices: src (n, ...), index (n) i64 ->
/// out (num_rows, ...) with out[index[i]] = src[i] and zeros elsewhere (rows packed by
/// index_select, put back in place; the Transformer's pad-free path). Backward: dsrc =
/// index_select(dout, 0, index). Any dtype (differentiable on float). Throws qkv::Error when
/// src is 0-d, index is not 1-D i64 of length n, an index is outside [0, num_rows) or repeats.
Tensor scatter_rows(const Tensor& src, const Tensor& index, int64_t num_rows);
/// out[i][j] = x[i][index[i][j]] along dim (torch.gather); index i64, same rank as x.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// Each element repeated `repeats` times along dim (torch.repeat_interleave).
Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim);

}  // namespace qkv
