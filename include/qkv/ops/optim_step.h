#pragma once
// Fused in-place optimiser updates on one parameter tensor (used by qkv::optim). Never recorded
// by autograd. float32 runs the SIMD kernels (kernels/cpu/adam.h), float64 the reference.
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

struct AdamStepArgs {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
    bool decoupled = false;  // AdamW
    int64_t step = 1;        // 1-based step number (bias corrections)
    double grad_scale = 1.0; // multiplies grad first, as clip_grad_norm's in-place scaling would
};

/// torch.optim.Adam/AdamW on one tensor: param, m, v contiguous of one shape and dtype; grad of
/// the same shape (any layout). Throws naming the mismatch.
void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStepArgs& a);

/// Multiplies a contiguous float tensor by s in place, in parallel (gradient clipping).
void scale_(Tensor& t, double s);
/// Σ t² over a float tensor (any layout) in double precision (gradient norms).
double sum_of_squares(const Tensor& t);
/// Σ t² over every defined tensor of the list (float, any layout), in double precision: the sums
/// of fixed chunks of 16,384 elements, taken by threads and added in list order, so the result
/// does not depend on the thread count. One parallel pass for a model's many small gradients
/// (clip_grad_norm); throws as sum_of_squares(t) for a non-float tensor.
double sum_of_squares(const std::vector<Tensor>& ts);
/// scale_ on every defined tensor of the list (each contiguous float), in one parallel pass.
void scale_(const std::vector<Tensor>& ts, double s);

}  // namespace qkv
