#pragma once
// Reference fused cross-entropy (log_softmax + NLL with label smoothing), forward and backward,
// templated on float/double. The loss of Szegedy et al. 2016 (label smoothing) as computed by
// torch.nn.functional.cross_entropy, with per-row weights instead of per-class ones.
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// Per row i with t = target[i], lse_i = log Σ_v exp(x_iv) (max-subtracted):
///   loss_i = w_i·[(1 − ε)(lse_i − x_it) + ε(lse_i − mean_v x_iv)]
///          = −w_i Σ_v q_v log_softmax(x_i)_v,   q = (1 − ε)·onehot(t) + ε/V,
/// loss_i = 0 for ignored rows; lse of every row, ignored ones included (saved for the backward).
template <class T>
void cross_entropy_forward(const CrossEntropyParams<T>& p);

/// dlogits_iv = g_i·w_i·(softmax(x_i)_v − q_v) with softmax = exp(x − lse); ignored rows get 0.
template <class T>
void cross_entropy_backward(const CrossEntropyParams<T>& p, const CrossEntropyGradParams<T>& g);

}  // namespace qkv::kernels::ref
