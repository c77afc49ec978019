// Reference Adam/AdamW/SGD steps (see ref/adam.h): the operation order of PyTorch's
// _single_tensor_adam(w) / _single_tensor_sgd, with scalars rounded to T where PyTorch's kernels
// round them to the tensor dtype.
#include "kernels/ref/adam.h"

#include <cmath>

namespace qkv::kernels::ref {

template <class T>
void adam_step(const AdamParams<T>& p) {
    const auto [param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, decoupled, step,
                grad_scale] = p;
    const double bc1  = 1.0 - std::pow(beta1, double(step));
    const double bc2  = 1.0 - std::pow(beta2, double(step));
    const T step_size = T(lr / bc1);
    const T bc2_sqrt  = T(std::sqrt(bc2));
    const T b1 = T(beta1), b2 = T(beta2), omb1 = T(1.0 - beta1), omb2 = T(1.0 - beta2);
    const T decay = T(1.0 - lr * weight_decay);
    const T wd    = T(weight_decay);
    const T gs    = T(grad_scale);
    const bool scaled = grad_scale != 1.0;
    for (int64_t i = 0; i < n; ++i) {
        T g = grad[i];
        if (scaled) g *= gs;
        if (weight_decay != 0.0) {
            if (decoupled)
                param[i] *= decay;
            else
                g += wd * param[i];
        }
        m[i]          = m[i] * b1 + omb1 * g;
        v[i]          = v[i] * b2 + omb2 * g * g;
        const T denom = std::sqrt(v[i]) / bc2_sqrt + T(eps);
        param[i] += -step_size * m[i] / denom;
    }
}

template <class T>
void sgd_step(const SgdParams<T>& p) {
    const auto [param, grad, momentum_buf, n, lr, momentum, dampening, weight_decay, nesterov,
                first_step] = p;
    const T mu = T(momentum), damp = T(1.0 - dampening), wd = T(weight_decay), neg_lr = T(-lr);
    for (int64_t i = 0; i < n; ++i) {
        T g = grad[i];
        if (weight_decay != 0.0) g += wd * param[i];
        if (momentum != 0.0) {
            T& buf = momentum_buf[i];
            buf    = first_step ? g : buf * mu + damp * g;
            g      = nesterov ? g + mu * buf : buf;
        }
        param[i] += neg_lr * g;
    }
}

template decltype(adam_step<float>) adam_step<float>;
template decltype(adam_step<double>) adam_step<double>;
template decltype(sgd_step<float>) sgd_step<float>;
template decltype(sgd_step<double>) sgd_step<double>;

}  // namespace qkv::kernels::ref
