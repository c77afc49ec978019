// Fast optimizer steps (see cpu/adam.h): Adam dispatches to the AVX-512 / AVX2 bodies
// (adam_simd.h), else the reference; SGD is a plain OpenMP loop the compiler vectorises.
#include "kernels/cpu/adam.h"

#include <cmath>

#include "kernels/cpu/variants.h"
#include "kernels/ref/adam.h"

namespace qkv::kernels::cpu {

void adam_step(const AdamParams<float>& p) {
    const auto param = p.param; const auto grad = p.grad; const auto m = p.m; const auto v = p.v;
    const auto n = p.n; const auto lr = p.lr; const auto beta1 = p.beta1;
    const auto beta2 = p.beta2; const auto eps = p.eps; const auto weight_decay = p.weight_decay;
    const auto decoupled = p.decoupled; const auto step = p.step;
    const auto grad_scale = p.grad_scale;
    if (n <= 0) return;
    if (fp32_variant_isa() == Isa::scalar)
        return ref::adam_step<float>(p);
    const double bc1 = 1.0 - std::pow(beta1, double(step));
    const double bc2 = 1.0 - std::pow(beta2, double(step));
    const detail::AdamScalars s{float(lr / bc1),
                                float(std::sqrt(bc2)),
                                float(beta1),
                                float(beta2),
                                float(1.0 - beta1),
                                float(1.0 - beta2),
                                float(eps),
                                float(weight_decay),
                                float(1.0 - lr * weight_decay),
                                float(grad_scale),
                                weight_decay != 0.0,
                                decoupled,
                                grad_scale != 1.0};
    QKV_ISA_DISPATCH(simd::adam_step, (void)0, param, grad, m, v, n, s);
}

void sgd_step(const SgdParams<float>& p) {
    const auto param = p.param; const auto grad = p.grad; const auto momentum_buf = p.momentum_buf;
    const auto n = p.n; const auto lr = p.lr; const auto momentum = p.momentum;
    const auto dampening = p.dampening; const auto weight_decay = p.weight_decay;
    const auto nesterov = p.nesterov; const auto first_step = p.first_step;
    const float mu = float(momentum), damp = float(1.0 - dampening), wd = float(weight_decay),
                neg_lr = float(-lr);
    const bool use_wd = weight_decay != 0.0, use_mom = momentum != 0.0;
#pragma omp parallel for schedule(static) if (n >= detail::kAdamMinParallel)
    for (int64_t i = 0; i < n; ++i) {
        float g = grad[i];
        if (use_wd) g += wd * param[i];
        if (use_mom) {
            const float buf = first_step ? g : momentum_buf[i] * mu + damp * g;
            momentum_buf[i] = buf;
            g               = nesterov ? g + mu * buf : buf;
        }
        param[i] += neg_lr * g;
    }
}

}  // namespace qkv::kernels::cpu
