// Fused optimiser updates: checks and dispatch to kernels/{cpu,ref}/adam.
#include "qkv/ops/optim_step.h"

#include "kernels/cpu/adam.h"
#include "kernels/ref/adam.h"
#include "ops/dispatch.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStepArgs& a) {
    QKV_CHECK(param.is_contiguous() && m.is_contiguous() && v.is_contiguous(),
              "adam_step_: param and moments must be contiguous");
    QKV_CHECK(grad.shape() == param.shape() && m.shape() == param.shape() && v.shape() == param.shape(),
              "adam_step_: shapes differ: param ", param.shape(), ", grad ", grad.shape(), ", m ", m.shape(),
              ", v ", v.shape());
    const Tensor g = grad.dtype() == param.dtype() ? grad.contiguous() : grad.to(param.dtype()).contiguous();
    const int64_t n = param.numel();
    if (param.dtype() == DType::f32 && kernel_mode() == KernelMode::fast) {
        kernels::cpu::adam_step({ptr<float>(param), ptr<float>(g), ptr<float>(m), ptr<float>(v), n, a.lr, a.beta1,
                                 a.beta2, a.eps, a.weight_decay, a.decoupled, a.step, a.grad_scale});
        return;
    }
    QKV_DISPATCH_FLOAT(param.dtype(), "adam_step_",
                       kernels::ref::adam_step<scalar_t>({ptr<scalar_t>(param), ptr<scalar_t>(g), ptr<scalar_t>(m),
                                                          ptr<scalar_t>(v), n, a.lr, a.beta1, a.beta2, a.eps,
                                                          a.weight_decay, a.decoupled, a.step, a.grad_scale}));
}

namespace {
template <class T>
void scale_kernel(T* p, int64_t n, T f) {
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
}
template <class T>
double sumsq_kernel(const T* p, int64_t n) {
    double acc = 0;
    // simd: partial sums per vector lane. A single running double sum is bound by the add's
    // latency (~4 cycles per element): clip_grad_norm over the anchor model's 15.2 M gradients
    // took ~1.8 % of a training step that way.
#pragma omp parallel for simd reduction(+ : acc) if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) acc += double(p[i]) * double(p[i]);
    return acc;
}
}  // namespace

void scale_(Tensor& t, double s) {
    QKV_CHECK(t.is_contiguous(), "scale_: tensor must be contiguous");
    QKV_DISPATCH_FLOAT(t.dtype(), "scale_", scale_kernel<scalar_t>(ptr<scalar_t>(t), t.numel(), scalar_t(s)));
}

double sum_of_squares(const Tensor& t) {
    const Tensor c = t.contiguous();
    double s = 0;
    QKV_DISPATCH_FLOAT(c.dtype(), "sum_of_squares", s = sumsq_kernel<scalar_t>(ptr<scalar_t>(c), c.numel()));
    return s;
}

}  // namespace qkv
