#pragma once
// Fast fp32 optimizer steps: fused Adam/AdamW (one pass over param, grad, m, v; AVX-512/AVX2,
// OpenMP) and SGD with momentum. Same formulas, operation order and scalar rounding as
// kernels::ref (ref/adam.h), i.e. PyTorch's torch.optim.Adam/AdamW/SGD (1.13, single-tensor).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::cpu {

/// Adam (decoupled = false) or AdamW (decoupled = true) step on n fp32 elements; step >= 1 is
/// the step number after incrementing. See ref::adam_step for the per-element formulas.
/// Bias corrections and step size are computed in double, then rounded to float as PyTorch does.
/// grad_scale multiplies each gradient first (rounded to float; clip_grad_norm's factor folded in).
void adam_step(float* param,
               const float* grad,
               float* m,
               float* v,
               int64_t n,
               double lr,
               double beta1,
               double beta2,
               double eps,
               double weight_decay,
               bool decoupled,
               int64_t step,
               double grad_scale = 1.0);

/// SGD step (torch.optim.SGD semantics, see ref::sgd_step); first_step = the momentum buffer
/// does not exist yet (it is then set to the gradient). momentum_buf may be nullptr when
/// momentum == 0.
void sgd_step(float* param,
              const float* grad,
              float* momentum_buf,
              int64_t n,
              double lr,
              double momentum,
              double dampening,
              double weight_decay,
              bool nesterov,
              bool first_step);

}  // namespace qkv::kernels::cpu
