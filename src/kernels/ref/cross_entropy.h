#pragma once
// Reference fused cross-entropy (log_softmax + NLL with label smoothing), forward and backward,
// templated on float/double. The loss of Szegedy et al. 2016 (label smoothing) as computed by
// torch.nn.functional.cross_entropy, with per-row weights instead of per-class ones.
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::ref {

/// logits: (N, V) contiguous; target: (N) int64 in [0, V) or == ignore_index; weight: (N) or
/// nullptr (all 1). Per row i with t = target[i], lse_i = log Σ_v exp(x_iv) (max-subtracted):
///   loss_i = w_i·[(1 − ε)(lse_i − x_it) + ε(lse_i − mean_v x_iv)]
///          = −w_i Σ_v q_v log_softmax(x_i)_v,   q = (1 − ε)·onehot(t) + ε/V,
/// with ε = label_smoothing in [0, 1]; loss_i = 0 for ignored rows. Outputs: loss (N), lse (N)
/// (the logsumexp of every row, ignored ones included; saved for the backward; may be nullptr).
/// Kernels assume valid targets (the op checks them).
template <class T>
void cross_entropy_forward(T* loss,
                           T* lse,
                           const T* logits,
                           const int64_t* target,
                           const T* weight,
                           int64_t N,
                           int64_t V,
                           int64_t ignore_index,
                           double label_smoothing);

/// dlogits_iv = g_i·w_i·(softmax(x_i)_v − q_v) with softmax = exp(x − lse), g_i =
/// dloss[i·dloss_stride] (stride 0: one scalar gradient for every row, e.g. after a mean).
/// Ignored rows get 0. dlogits: (N, V), overwritten; it may alias logits.
template <class T>
void cross_entropy_backward(T* dlogits,
                            const T* dloss,
                            int64_t dloss_stride,
                            const T* logits,
                            const T* lse,
                            const int64_t* target,
                            const T* weight,
                            int64_t N,
                            int64_t V,
                            int64_t ignore_index,
                            double label_smoothing);

}  // namespace qkv::kernels::ref
