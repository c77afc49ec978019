// Reference Adam/AdamW/SGD steps (see ref/adam.h): the operation order of PyTorch's
// _single_tensor_adam(w) / _single_tensor_sgd, with scalars rounded to T where PyTorch's kernels
// round them to the tensor dtype.
#include "kernels/ref/adam.h"

#include <cmath>

namespace qkv::kernels::ref {

template <class T>
void adam_step(T* param,
               const T* grad,
               T* m,
               T* v,
               int64_t n,
               double lr,
               double beta1,
               double beta2,
               double eps,
               double weight_decay,
               bool decoupled,
               int64_t step,
               double grad_scale) {
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
void sgd_step(T* param,
              const T* grad,
              T* momentum_buf,
              int64_t n,
              double lr,
              double momentum,
              double dampening,
              double weight_decay,
              bool nesterov,
              bool first_step) {
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

template void adam_step<float>(float*,
                               const float*,
                               float*,
                               float*,
                               int64_t,
                               double,
                               double,
                               double,
                               double,
                               double,
                               bool,
                               int64_t,
                               double);
template void adam_step<double>(double*,
                                const double*,
                                double*,
                                double*,
                                int64_t,
                                double,
                                double,
                                double,
                                double,
                                double,
                                bool,
                                int64_t,
                                double);
template void sgd_step<float>(
    float*, const float*, float*, int64_t, double, double, double, double, bool, bool);
template void sgd_step<double>(
    double*, const double*, double*, int64_t, double, double, double, double, bool, bool);

}  // namespace qkv::kernels::ref
