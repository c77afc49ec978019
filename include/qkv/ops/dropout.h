#pragma once
// Inverted dropout (Srivastava et al. 2014): training zeroes each element with probability p and
// scales the rest by 1/(1-p); otherwise the identity. Mask bits from Philox (core/generator.h).
#include "qkv/core/tensor.h"

namespace qkv {

/// Throws when p is outside [0, 1). gen = default generator when null.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace qkv
