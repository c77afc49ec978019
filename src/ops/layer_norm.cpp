// layer_norm op: checks, the fused row kernel (SIMD f32 / reference f64), fused backward.
#include "qkv/ops/layer_norm.h"

#include "kernels/cpu/layer_norm.h"
#include "kernels/ref/layer_norm.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

namespace {
template <class T>
const T* opt_ptr(const Tensor& t) {
    return t.defined() ? ptr<T>(t) : nullptr;
}
template <class T>
T* opt_ptr_mut(const Tensor& t) {
    return t.defined() ? ptr<T>(t) : nullptr;
}
bool fast(DType dt) { return dt == DType::f32 && kernel_mode() == KernelMode::fast; }

template <class T>
void ln_forward(const kernels::LayerNormParams<T>& p) {
    if constexpr (std::is_same_v<T, float>) {
        if (fast(DType::f32)) return kernels::cpu::layer_norm_forward(p);
    }
    kernels::ref::layer_norm_forward<T>(p);
}

template <class T>
void ln_backward(const kernels::LayerNormParams<T>& p, const kernels::LayerNormGradParams<T>& g) {
    if constexpr (std::is_same_v<T, float>) {
        if (fast(DType::f32)) return kernels::cpu::layer_norm_backward(p, g);
    }
    kernels::ref::layer_norm_backward<T>(p, g);
}
}  // namespace

// y = (x − μ)·r·γ + β, r = 1/√(σ² + eps); backward in kernels/ref/layer_norm.cpp:
// dx = r·(g − mean(g) − x̂·mean(g∘x̂)) with g = dy∘γ; dγ = Σ dy∘x̂; dβ = Σ dy.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
    QKV_CHECK(x.defined() && !normalized_shape.empty(), "layer_norm: need an input and a normalized_shape");
    const size_t k = normalized_shape.size();
    QKV_CHECK(size_t(x.dim()) >= k && Shape(x.shape().end() - int64_t(k), x.shape().end()) == normalized_shape,
              "layer_norm: input of shape ", x.shape(), " does not end with normalized_shape ", normalized_shape);
    QKV_CHECK(!weight.defined() || weight.shape() == normalized_shape, "layer_norm: weight of shape ",
              weight.shape(), " does not match normalized_shape ", normalized_shape);
    QKV_CHECK(!bias.defined() || bias.shape() == normalized_shape, "layer_norm: bias of shape ", bias.shape(),
              " does not match normalized_shape ", normalized_shape);
    QKV_CHECK(eps > 0, "layer_norm: eps must be positive, got ", eps);
    const int64_t N = shape_numel(normalized_shape), rows = N ? x.numel() / N : 0;
    const Tensor xc = x.detach().contiguous();
    const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
    const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    Tensor mean = Tensor::empty({rows}, x.dtype()), rstd = Tensor::empty({rows}, x.dtype());
    QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm", {
        const kernels::LayerNormParams<scalar_t> p{
            .y = ptr<scalar_t>(y), .mean = ptr<scalar_t>(mean), .rstd = ptr<scalar_t>(rstd), .x = ptr<scalar_t>(xc),
            .gamma = opt_ptr<scalar_t>(w), .beta = opt_ptr<scalar_t>(b), .rows = rows, .N = N, .eps = eps};
        ln_forward(p);
    });
    std::vector<Tensor> inputs{x};
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    record(y, "LayerNormBackward", inputs, [xc, w, mean, rstd, rows, N, has_w = weight.defined(),
                                            has_b = bias.defined(), ns = normalized_shape](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor dx = Tensor::empty(xc.shape(), xc.dtype());
        Tensor dw = has_w ? Tensor::empty(ns, xc.dtype()) : Tensor();
        Tensor db = has_b ? Tensor::empty(ns, xc.dtype()) : Tensor();
        QKV_DISPATCH_FLOAT(xc.dtype(), "layer_norm_backward", {
            const kernels::LayerNormParams<scalar_t> p{.mean = ptr<scalar_t>(mean), .rstd = ptr<scalar_t>(rstd),
                                                       .x = ptr<scalar_t>(xc), .gamma = opt_ptr<scalar_t>(w),
                                                       .rows = rows, .N = N};
            const kernels::LayerNormGradParams<scalar_t> gp{.dx = ptr<scalar_t>(dx), .dgamma = opt_ptr_mut<scalar_t>(dw),
                                                            .dbeta = opt_ptr_mut<scalar_t>(db), .dy = ptr<scalar_t>(gc)};
            ln_backward(p, gp);
        });
        std::vector<Tensor> gs{dx};
        if (has_w) gs.push_back(dw);
        if (has_b) gs.push_back(db);
        return gs;
    });
    return y;
}

}  // namespace qkv
