#pragma once
// Fast fp32 fused cross-entropy: one read of the logits per row in the forward (blocks of 4096
// logits: max and Σx, then Σexp from L1, merged with a running max), one read + one write in the
// backward; AVX-512 / AVX2 polynomial exp, OpenMP over rows. Same semantics and params as
// kernels::ref (ref/cross_entropy.h).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// ref::cross_entropy_forward for fp32 (the formulas are there).
void cross_entropy_forward(const CrossEntropyParams<float>& p);
/// ref::cross_entropy_backward for fp32; dlogits may alias logits.
void cross_entropy_backward(const CrossEntropyParams<float>& p, const CrossEntropyGradParams<float>& g);

}  // namespace qkv::kernels::cpu
