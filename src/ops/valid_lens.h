#pragma once
// Private: valid_lens (int64 or float) -> int64 key lengths, shared by masked_softmax,
// sequence_mask and scaled_dot_product_attention so every path reads a length the same way.
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::detail {
/// valid_lens as int64 lengths clamped to [0, K]: floats round up (arange(K) < 2.5 keeps 0, 1, 2),
/// values > K (+inf included) mean K, values < 0 (−inf included) mean 0. Throws naming `op`,
/// valid_lens, the entry and its value when an entry is NaN, and for a dtype other than int64/float.
std::vector<int64_t> valid_lens_to_int(const Tensor& valid_lens, int64_t K, const char* op);
}  // namespace qkv::detail
