#pragma once
// Embedding lookup (torch.nn.functional.embedding).
#include "qkv/core/tensor.h"

namespace qkv {

/// weight: (V, C) float; ids: i64 of any shape (...) -> (..., C). Throws naming the first id
/// outside [0, V). Backward scatters-adds into a dense gradient of weight.
Tensor embedding(const Tensor& ids, const Tensor& weight);

}  // namespace qkv
