#pragma once
// Reference additive-attention scores (Bahdanau et al. 2015, eq. 6; D2L 11.3.3), forward and
// backward, templated on float/double. Dim legend: B batch, Tq queries, Tk keys, H the hidden
// width of the scoring MLP. Arrays are row-major and contiguous.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// p.scores[b, i, j] = Σ_h w[h] · tanh(q[b, i, h] + k[b, j, h]) (kernels/params.h:
/// AdditiveScoresParams).
template <class T>
void additive_scores_forward(const AdditiveScoresParams<T>& p);

/// Backward, recomputing f = tanh(q_i + k_j) (nothing is saved by the forward):
///   with e = dscores[b, i, j] and t_h = e · w[h] · (1 − f_h²):
///   dq[b, i, h] = Σ_j t_h,  dk[b, j, h] = Σ_i t_h,  dw[h] = Σ_{b, i, j} e · f_h.
/// Outputs are overwritten; each may be nullptr to skip it. p.scores is not read.
template <class T>
void additive_scores_backward(const AdditiveScoresParams<T>& p, const AdditiveScoresGradParams<T>& g);

}  // namespace qkv::kernels::ref
