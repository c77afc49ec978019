#pragma once
// Fused additive-attention scoring (Bahdanau et al. 2015, eq. 6; D2L 11.3.3): the tanh MLP
// score of every query against every key without materialising the (B, Tq, Tk, H) features.
// The projections W_q·queries and W_k·keys stay ordinary linear ops (callers may project the
// keys once and reuse them at every decoder step).
// Dim legend: B batch, Tq queries, Tk keys, H the scoring MLP's hidden width.
#include "qkv/core/tensor.h"

namespace qkv {

/// scores[b, i, j] = Σ_h w_v[h] · tanh(q[b, i, h] + k[b, j, h]), i.e. D2L's
/// w_v(tanh(W_q(queries).unsqueeze(2) + W_k(keys).unsqueeze(1))).squeeze(-1).
/// q (B, Tq, H), k (B, Tk, H), w_v (H) -> (B, Tq, Tk). One node (AdditiveScoresBackward) that
/// recomputes the tanh features in its backward. f32 (SIMD kernel) or f64 (reference).
/// Differentiable in q, k and w_v. Throws qkv::Error naming the shapes when they do not fit or
/// the dtypes differ or are not float.
Tensor additive_attention_scores(const Tensor& q, const Tensor& k, const Tensor& w_v);

}  // namespace qkv
