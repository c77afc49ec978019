// Reference fused cross-entropy (see ref/cross_entropy.h).
#include "kernels/ref/cross_entropy.h"

#include <cmath>

#include "qkv/core/error.h"

namespace qkv::kernels::ref {

template <class T>
void cross_entropy_forward(const CrossEntropyParams<T>& p) {
    const auto [loss, lse, logits, target, weight, N, V, ignore_index, label_smoothing] = p;
    const T eps = T(label_smoothing);
    for (int64_t i = 0; i < N; ++i) {
        const T* x = logits + i * V;
        T m        = x[0];
        for (int64_t v = 1; v < V; ++v) m = x[v] > m || std::isnan(x[v]) ? x[v] : m;
        T s = 0, sum_x = 0;
        for (int64_t v = 0; v < V; ++v) {
            s += std::exp(x[v] - m);
            sum_x += x[v];
        }
        const T l = m == -INFINITY ? m : m + std::log(s);  // all −inf: lse = −inf (PyTorch)
        if (lse) lse[i] = l;
        const int64_t t = target[i];
        if (t == ignore_index) {
            loss[i] = 0;
            continue;
        }
        QKV_DASSERT(t >= 0 && t < V);
        T li = (T(1) - eps) * (l - x[t]);
        if (eps != T(0))
            li += eps * (l - sum_x / T(V));  // skipped at ε = 0: −inf logits stay finite
        loss[i] = (weight ? weight[i] : T(1)) * li;
    }
}

// loss_i = −w_i Σ_v q_v (x_v − lse) with ∂lse/∂x_v = softmax_v and Σ_v q_v = 1:
//   ∂loss_i/∂x_v = −w_i (q_v − softmax_v Σ_u q_u) = w_i (softmax_v − q_v).
template <class T>
void cross_entropy_backward(const CrossEntropyParams<T>& p, const CrossEntropyGradParams<T>& g) {
    const auto [dlogits, dloss, dloss_stride] = g;
    const auto [loss, lse, logits, target, weight, N, V, ignore_index, label_smoothing] = p;
    const T eps = T(label_smoothing);
    for (int64_t i = 0; i < N; ++i) {
        const T* x      = logits + i * V;
        T* dx           = dlogits + i * V;
        const int64_t t = target[i];
        if (t == ignore_index) {
            for (int64_t v = 0; v < V; ++v) dx[v] = 0;
            continue;
        }
        const T c = dloss[i * dloss_stride] * (weight ? weight[i] : T(1));
        for (int64_t v = 0; v < V; ++v) {
            const T q = (v == t ? T(1) - eps : T(0)) + eps / T(V);
            dx[v]     = c * (std::exp(x[v] - lse[i]) - q);
        }
    }
}

template decltype(cross_entropy_forward<float>) cross_entropy_forward<float>;
template decltype(cross_entropy_forward<double>) cross_entropy_forward<double>;
template decltype(cross_entropy_backward<float>) cross_entropy_backward<float>;
template decltype(cross_entropy_backward<double>) cross_entropy_backward<double>;

}  // namespace qkv::kernels::ref
