// Reference additive-attention scores (see ref/additive_attention.h). Scalar loops.
// Forward s_ij = Σ_h w_h tanh(q_ih + k_jh); with f = tanh(·) and ∂tanh = 1 − f²:
//   ∂s_ij/∂q_ih = ∂s_ij/∂k_jh = w_h (1 − f_h²),  ∂s_ij/∂w_h = f_h.
#include "kernels/ref/additive_attention.h"

#include <cmath>

namespace qkv::kernels::ref {

template <class T>
void additive_scores_forward(const AdditiveScoresParams<T>& p) {
    T* const      scores = p.scores;
    const T *     q = p.q, *k = p.k, *w = p.w;
    const int64_t B = p.B, Tq = p.Tq, Tk = p.Tk, H = p.H;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Tq; ++i)
            for (int64_t j = 0; j < Tk; ++j) {
                const T* qi = q + (b * Tq + i) * H;
                const T* kj = k + (b * Tk + j) * H;
                T s = 0;
                for (int64_t h = 0; h < H; ++h) s += w[h] * std::tanh(qi[h] + kj[h]);
                scores[(b * Tq + i) * Tk + j] = s;
            }
}

template <class T>
void additive_scores_backward(const AdditiveScoresParams<T>& p, const AdditiveScoresGradParams<T>& g) {
    T *const      dq = g.dq, *const dk = g.dk, *const dw = g.dw;
    const T*      dscores = g.dscores;
    const T *     q = p.q, *k = p.k, *w = p.w;
    const int64_t B = p.B, Tq = p.Tq, Tk = p.Tk, H = p.H;
    if (dq)
        for (int64_t n = 0; n < B * Tq * H; ++n) dq[n] = T(0);
    if (dk)
        for (int64_t n = 0; n < B * Tk * H; ++n) dk[n] = T(0);
    if (dw)
        for (int64_t h = 0; h < H; ++h) dw[h] = T(0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Tq; ++i)
            for (int64_t j = 0; j < Tk; ++j) {
                const T* qi = q + (b * Tq + i) * H;
                const T* kj = k + (b * Tk + j) * H;
                const T e   = dscores[(b * Tq + i) * Tk + j];
                for (int64_t h = 0; h < H; ++h) {
                    const T f = std::tanh(qi[h] + kj[h]);
                    const T t = e * w[h] * (T(1) - f * f);
                    if (dq) dq[(b * Tq + i) * H + h] += t;
                    if (dk) dk[(b * Tk + j) * H + h] += t;
                    if (dw) dw[h] += e * f;
                }
            }
}

template decltype(additive_scores_forward<float>) additive_scores_forward<float>;
template decltype(additive_scores_forward<double>) additive_scores_forward<double>;
template decltype(additive_scores_backward<float>) additive_scores_backward<float>;
template decltype(additive_scores_backward<double>) additive_scores_backward<double>;

}  // namespace qkv::kernels::ref
