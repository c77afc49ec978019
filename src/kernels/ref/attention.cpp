// Reference attention kernels: one materialised score row per (b, h, i), scalar loops in T.
#include "kernels/ref/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/philox.h"

namespace qkv::kernels::ref {
namespace {

// Scores of row (b, h, i): s[j] = cap(scale q_i.k_j) - ALiBi + additive, -inf where masked; with a
// soft cap, dcap[j] = d cap(x)/dx = 1 - tanh^2 (when dcap is given). Returns the max.
template <class T>
T score_row(const AttentionParams<T>& p, int64_t b, int64_t h, int64_t i, T* s, T* dcap = nullptr) {
    const int64_t hk  = h / (p.H / p.Hkv);
    const T*      qi  = p.q + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_t;
    const int64_t lim = attention_key_limit(p, b, i);
    const int64_t first = attention_key_first(p, i);
    const int64_t mo  = b * p.m_stride_b + h * p.m_stride_h + i * p.m_stride_q;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < p.Tk; ++j) {
        bool masked = j > lim || j < first || (p.bool_mask && p.bool_mask[mo + j * p.m_stride_k] == 0);
        T    sj     = -std::numeric_limits<T>::infinity();
        if (!masked) {
            const T* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t;
            T        dot = 0;
            for (int64_t d = 0; d < p.D; ++d) dot += qi[d] * kj[d];
            sj = T(p.scale) * dot;
            if (p.softcap > 0.0f) {
                const T t = std::tanh(sj / T(p.softcap));
                sj        = T(p.softcap) * t;
                if (dcap) dcap[j] = T(1) - t * t;
            }
            if (p.alibi_slopes) {
                const int64_t dist = i + p.Tk - p.Tq - j;
                sj -= T(p.alibi_slopes[h]) * T(dist < 0 ? -dist : dist);
            }
            if (p.additive_mask) sj += p.additive_mask[mo + j * p.m_stride_k];
        }
        s[j] = sj;
        if (sj > mx) mx = sj;
    }
    return mx;
}

// Dropout factors Z_ij = keep_ij / (1 - p) of row (b, h, i) (params.h gives the index formula).
template <class T>
void dropout_row(const AttentionParams<T>& p, int64_t b, int64_t h, int64_t i, T* z) {
    const uint32_t thr  = attention_dropout_threshold(p.dropout_p);
    const T        keep = p.dropout_p < 1.0f ? T(1) / (T(1) - T(p.dropout_p)) : T(0);
    const uint64_t base = p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i) * p.Tk);
    for (int64_t j = 0; j < p.Tk; ++j)
        z[j] = (philox::bits(p.dropout_seed, 0, base + uint64_t(j)) >> 8) >= thr ? keep : T(0);
}

// Softmax of a score row in place (P); returns lse (and its rounding residual in *lo), -inf
// (and 0) for a fully masked row (P = 0).
template <class T>
T softmax_row(T* s, int64_t n, T mx, T* lo = nullptr) {
    if (mx == -std::numeric_limits<T>::infinity()) {
        for (int64_t j = 0; j < n; ++j) s[j] = 0;
        if (lo) *lo = 0;
        return mx;
    }
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - mx);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= sum;
    const T lg = std::log(sum), hi = mx + lg;
    if (lo) *lo = (mx - hi) + lg;
    return hi;
}

}  // namespace

template <class T>
void attention_forward(const AttentionParams<T>& p) {
    std::vector<T> s(size_t(p.Tk)), z(size_t(p.Tk), T(1));
    const int64_t  group = p.H / p.Hkv;
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < p.Tq; ++i) {
                const T mx  = score_row(p, b, h, i, s.data());
                T       lo  = 0;
                const T lse = softmax_row(s.data(), p.Tk, mx, &lo);
                if (p.dropout_p > 0.0f) dropout_row(p, b, h, i, z.data());
                T* oi = p.out + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                for (int64_t e = 0; e < p.Dv; ++e) oi[e] = 0;
                for (int64_t j = 0; j < p.Tk; ++j) {
                    const T w = s[size_t(j)] * z[size_t(j)];
                    if (w == 0) continue;
                    const T* vj = p.v + b * p.v_stride_b + (h / group) * p.v_stride_h + j * p.v_stride_t;
                    for (int64_t e = 0; e < p.Dv; ++e) oi[e] += w * vj[e];
                }
                if (p.lse) p.lse[(b * p.H + h) * p.Tq + i] = lse;
                if (p.lse_lo) p.lse_lo[(b * p.H + h) * p.Tq + i] = lo;
            }
}

template <class T>
void attention_backward(const AttentionParams<T>& p, const AttentionGradParams<T>& g0) {
    const AttentionGradParams<T> g = with_grad_strides(p, g0);
    std::vector<T> s(size_t(p.Tk)), z(size_t(p.Tk), T(1)), dp(size_t(p.Tk)), dcap(size_t(p.Tk), T(1));
    const int64_t  group = p.H / p.Hkv;
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t hk = 0; hk < p.Hkv; ++hk)
            for (int64_t j = 0; j < p.Tk; ++j) {
                for (int64_t d = 0; d < p.D; ++d) g.dk[b * g.dk_stride_b + hk * g.dk_stride_h + j * g.dk_stride_t + d] = 0;
                for (int64_t e = 0; e < p.Dv; ++e) g.dv[b * g.dv_stride_b + hk * g.dv_stride_h + j * g.dv_stride_t + e] = 0;
            }
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < p.Tq; ++i) {
                softmax_row(s.data(), p.Tk, score_row(p, b, h, i, s.data(), dcap.data()));
                if (p.dropout_p > 0.0f) dropout_row(p, b, h, i, z.data());
                const T* doi = g.dout + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                const T* qi  = p.q + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_t;
                T*       dqi = g.dq + b * g.dq_stride_b + h * g.dq_stride_h + i * g.dq_stride_t;
                // dP_ij = Z_ij (dout_i . v_j); rowdot = sum_j P_ij dP_ij.
                T rowdot = 0;
                for (int64_t j = 0; j < p.Tk; ++j) {
                    const T* vj = p.v + b * p.v_stride_b + hk * p.v_stride_h + j * p.v_stride_t;
                    T        d  = 0;
                    for (int64_t e = 0; e < p.Dv; ++e) d += doi[e] * vj[e];
                    dp[size_t(j)] = z[size_t(j)] * d;
                    if (s[size_t(j)] != 0) rowdot += s[size_t(j)] * dp[size_t(j)];  // a hidden v_j is never read
                }
                for (int64_t d = 0; d < p.D; ++d) dqi[d] = 0;
                for (int64_t j = 0; j < p.Tk; ++j) {
                    const T pj = s[size_t(j)];
                    if (pj == 0) continue;
                    // dS through the soft cap: d cap(x)/dx = 1 - tanh^2 (1 without a cap).
                    const T  ds  = T(p.scale) * dcap[size_t(j)] * pj * (dp[size_t(j)] - rowdot);
                    const T* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t;
                    T*       dkj = g.dk + b * g.dk_stride_b + hk * g.dk_stride_h + j * g.dk_stride_t;
                    T*       dvj = g.dv + b * g.dv_stride_b + hk * g.dv_stride_h + j * g.dv_stride_t;
                    for (int64_t d = 0; d < p.D; ++d) {
                        dqi[d] += ds * kj[d];
                        dkj[d] += ds * qi[d];
                    }
                    const T w = pj * z[size_t(j)];
                    for (int64_t e = 0; e < p.Dv; ++e) dvj[e] += w * doi[e];
                }
            }
        }
}

template decltype(attention_forward<float>) attention_forward<float>;
template decltype(attention_forward<double>) attention_forward<double>;
template decltype(attention_backward<float>) attention_backward<float>;
template decltype(attention_backward<double>) attention_backward<double>;

}  // namespace qkv::kernels::ref
