#pragma once
// Reference additive-attention scores (Bahdanau et al. 2015, eq. 6; D2L 11.3.3), forward and
// backward, templated on float/double. Dim legend: B batch, Tq queries, Tk keys, H the hidden
// width of the scoring MLP. Arrays are row-major and contiguous.
#include <cstdint>

namespace qkv::kernels::ref {

/// scores[b, i, j] = Σ_h w[h] · tanh(q[b, i, h] + k[b, j, h]).
/// q (B, Tq, H) = W_q·queries, k (B, Tk, H) = W_k·keys, w (H) = w_v; scores (B, Tq, Tk).
template <class T>
void additive_scores_forward(T* scores, const T* q, const T* k, const T* w, int64_t B, int64_t Tq,
                             int64_t Tk, int64_t H);

/// Backward, recomputing f = tanh(q_i + k_j) (nothing is saved by the forward):
///   with e = dscores[b, i, j] and t_h = e · w[h] · (1 − f_h²):
///   dq[b, i, h] = Σ_j t_h,  dk[b, j, h] = Σ_i t_h,  dw[h] = Σ_{b, i, j} e · f_h.
/// Outputs are overwritten; each may be nullptr to skip it.
template <class T>
void additive_scores_backward(T* dq, T* dk, T* dw, const T* dscores, const T* q, const T* k,
                              const T* w, int64_t B, int64_t Tq, int64_t Tk, int64_t H);

}  // namespace qkv::kernels::ref
