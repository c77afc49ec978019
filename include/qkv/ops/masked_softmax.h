#pragma once
// Masked softmax (D2L 11.3.1) and sequence_mask (D2L ZH 9.7).
#include "qkv/core/tensor.h"

namespace qkv {

/// Softmax over the last dim of X (B, ..., Q, K) where key positions j >= valid_len are masked.
/// valid_lens: undefined (plain softmax), (B) — one length per batch row, every query of b — or
/// (B, Q) — one per query row; int64 or float (a float length rounds up, as D2L compares
/// arange(K) < len: 2.5 keeps keys 0, 1, 2). Lengths > K (+inf included) mean K, < 0 (−inf
/// included) mean 0; a NaN length throws naming valid_lens and its index.
/// Masked weights are exactly 0. A row with valid_len 0 gives all zeros (and zero gradients),
/// not D2L's uniform 1/K from its −1e6 fill; partially masked rows equal D2L's result.
/// Entries equal to −inf are masked too, so a row of all −inf also gives zeros (never NaN); a
/// NaN among a row's kept entries makes that row NaN (an all-NaN row is NaN, not 0).
/// Throws naming the shapes when valid_lens does not fit X.
Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens = Tensor());

/// The primitive behind masked_softmax: lens (i64) has X's shape without the last dim and gives
/// each row's number of leading unmasked keys (values > K mean K; < 0 mean 0).
Tensor masked_softmax_rows(const Tensor& X, const Tensor& lens);

/// X (B, T) or (B, T, ...): entries along dim 1 at positions >= valid_len[b] set to `value`
/// (D2L ZH sequence_mask; the book check: [[1,2,3],[4,5,6]], lens [1,2] -> [[1,0,0],[4,5,0]]).
Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value = 0.0);

}  // namespace qkv
