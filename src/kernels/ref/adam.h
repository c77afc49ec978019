#pragma once
// Reference optimizer steps with PyTorch's formulas (torch.optim.Adam / AdamW / SGD, torch 1.13,
// single-tensor path), templated on float/double. Hyperparameters are doubles (Python floats);
// the element arithmetic runs in T.
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// One Adam (Kingma & Ba 2015) or AdamW (decoupled = true; Loshchilov & Hutter 2019) step on n
/// elements; step = the step number after incrementing (1 on the first call). Per element, with
/// g = grad·grad_scale (rounded to T; skipped when grad_scale == 1, so that clip_grad_norm's
/// in-place scaling followed by a step with grad_scale 1 is bit-identical to a step with its factor):
///   AdamW: p ← p·(1 − lr·wd);      Adam: g ← g + wd·p      (each only when wd != 0)
///   m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²
///   bc1 = 1 − β1^step, bc2 = 1 − β2^step (in double), step_size = lr / bc1
///   p ← p − step_size · m / (sqrt(v) / sqrt(bc2) + eps)
/// m, v start at 0.
template <class T>
void adam_step(const AdamParams<T>& p);

/// One SGD step (torch.optim.SGD): g ← g + wd·p (wd != 0); with momentum μ != 0:
/// buf ← g on the first step (first_step = true), else buf ← μ·buf + (1 − dampening)·g;
/// g ← g + μ·buf (nesterov) or g ← buf; then p ← p − lr·g. momentum_buf: (n), may be nullptr
/// when momentum == 0.
template <class T>
void sgd_step(const SgdParams<T>& p);

}  // namespace qkv::kernels::ref
