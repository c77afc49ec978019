#pragma once
// Cross-entropy of logits against integer targets, fused log_softmax + NLL (one kernel forward,
// one backward: grad = (softmax - onehot_smoothed) * w).
#include "qkv/core/tensor.h"

namespace qkv {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
    Reduction reduction = Reduction::mean;
    /// Targets equal to this id contribute nothing (PyTorch ignore_index); -100 = none.
    int64_t ignore_index = -100;
    /// Label smoothing ε (Szegedy et al. 2016): target distribution (1-ε)·onehot + ε/V.
    double label_smoothing = 0.0;
};

/// logits: (N, V) or (..., V) float; target: i64 of shape (...) (logits without the last dim);
/// weight: optional per-position weights of target's shape (e.g. a 0/1 valid mask).
/// Per-position loss l_i = -w_i · Σ_v q_v log softmax(logits_i)_v.
/// reduction mean divides by Σ w_i over non-ignored positions (count of them when weight is
/// undefined); none returns target's shape. Throws naming the first target outside [0, V).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     const CrossEntropyOptions& opt = {});

}  // namespace qkv
