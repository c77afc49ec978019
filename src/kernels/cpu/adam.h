#pragma once
// Fast fp32 optimizer steps: fused Adam/AdamW (one pass over param, grad, m, v; AVX-512/AVX2,
// OpenMP) and SGD with momentum. Same formulas, operation order and scalar rounding as
// kernels::ref (ref/adam.h), i.e. PyTorch's torch.optim.Adam/AdamW/SGD (1.13, single-tensor).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// ref::adam_step for fp32 (Adam, or AdamW when decoupled). Bias corrections and step size are
/// computed in double, then rounded to float as PyTorch does.
void adam_step(const AdamParams<float>& p);

/// ref::sgd_step for fp32.
void sgd_step(const SgdParams<float>& p);

}  // namespace qkv::kernels::cpu
