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
/// undefined); none returns target's shape. When no position counts (every target ignored, or
/// every weight 0), mean gives 0 with zero gradients, where PyTorch gives NaN: a batch of padding
/// adds nothing instead of turning the run into NaN. Throws naming the first target outside [0, V).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     const CrossEntropyOptions& opt = {});

/// A model's output layer and its loss in one op: cross_entropy(linear(x, weight, bias), target,
/// Tensor(), opt), the same value and gradients (up to float rounding).
/// Legend: N rows (x's leading dims flattened), C = in_features, V = out_features (vocabulary).
///   x (..., C) float; weight (V, C) (torch.nn.Linear layout); bias (V) or undefined;
///   target i64 of x's shape without the last dim, ids in [0, V) or opt.ignore_index.
///   Returns a scalar (mean / sum) or target's shape (none), x's dtype.
/// Fast fp32 path (KernelMode::fast): one GEMM writes the (N, V) logits, one pass per row adds
/// the bias and takes logsumexp and the loss while the row is in cache. The backward turns those
/// logits into their gradient g·(softmax − q) in place (q the smoothed one-hot), summing the bias
/// gradient per thread while each row is hot (in chunks of 32 rows, then the chunks, to keep the
/// float sum accurate), then dx = G·W and dW = Gᵀ·x are two GEMMs. So the
/// (N, V) buffer is held once (linear + cross_entropy hold the logits and then a second buffer
/// for their gradient) and the separate bias-add, softmax-gradient and column-sum passes over it
/// are gone (bench/RESULTS.md, session 7). float64 or KernelMode::reference: the composition.
/// C == 0: every row's logits are the bias (zeros without one), dx and dW are empty. N == 0: mean
/// and sum give 0, none an empty tensor. Throws qkv::Error on shape or dtype mismatch or V == 0,
/// and names the first target outside [0, V).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const CrossEntropyOptions& opt = {});

}  // namespace qkv
