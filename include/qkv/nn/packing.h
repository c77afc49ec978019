#pragma once
// The pad-free ("packed") form of a padded batch: which rows of a (B, T, ·) tensor a forward
// keeps, so that position-wise layers (projections, FFN, AddNorm) run on the kept rows only.
// It is a descriptor passed into the ordinary module forwards (MultiHeadAttention::forward,
// the Transformer blocks), as CTranslate2 passes a Padder into its one attention layer; there
// is no second, packed implementation of any module.
// Dim legend: B batch, T sequence length, N = Σ lens kept rows, C feature width.
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::nn {

/// The first lens[b] positions of every sequence b of a (B, T, ·) batch, stored as flat row
/// indices b·T + t (t < lens[b]) in increasing order. pack/unpack convert between the padded
/// (B, T, C) and packed (N, C) forms; both are differentiable (index_select / scatter_rows).
class RowPacking {
public:
    /// lens (B), each in [0, steps]; steps = T >= 0. Throws qkv::Error naming the first length
    /// outside that range, or a negative steps.
    RowPacking(std::vector<int64_t> lens, int64_t steps);

    int64_t batch() const { return int64_t(lens_.size()); }  // B
    int64_t steps() const { return steps_; }                  // T
    int64_t rows() const { return rows_; }                    // N
    const std::vector<int64_t>& lengths() const { return lens_; }
    /// (N) i64: the kept flat row indices, increasing.
    const Tensor& index() const { return index_; }

    /// x (B, T, C) -> its kept rows (N, C). Throws qkv::Error when x is not (B, T, ·).
    Tensor pack(const Tensor& x) const;
    /// xp (N, C) -> (B, T, C) with xp's rows in place and zeros at the skipped positions.
    /// Throws qkv::Error when xp is not (N, ·).
    Tensor unpack(const Tensor& xp) const;

private:
    std::vector<int64_t> lens_;
    int64_t steps_ = 0, rows_ = 0;
    Tensor index_;
};

}  // namespace qkv::nn
