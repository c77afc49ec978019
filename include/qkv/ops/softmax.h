#pragma once
// softmax and log_softmax over one dim (differentiable). Numerics: subtracts the row max.
#include "qkv/core/tensor.h"

namespace qkv {

/// y = exp(x - max) / sum(exp(x - max)) along dim. A row of all -inf gives NaN as in PyTorch;
/// masked_softmax (ops/masked_softmax.h) handles fully masked rows.
Tensor softmax(const Tensor& x, int64_t dim = -1);
/// y = x - max - log(sum(exp(x - max))) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace qkv
