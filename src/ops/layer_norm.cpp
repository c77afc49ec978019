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

/// Shared checks of layer_norm and add_layer_norm (`op` names the caller in errors).
void check_layer_norm_args(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps) {
    QKV_CHECK(x.defined() && !normalized_shape.empty(), op, ": need an input and a normalized_shape");
    const size_t k = normalized_shape.size();
    QKV_CHECK(size_t(x.dim()) >= k && Shape(x.shape().end() - int64_t(k), x.shape().end()) == normalized_shape,
              op, ": input of shape ", x.shape(), " does not end with normalized_shape ", normalized_shape);
    QKV_CHECK(!weight.defined() || weight.shape() == normalized_shape, op, ": weight of shape ",
              weight.shape(), " does not match normalized_shape ", normalized_shape);
    QKV_CHECK(!bias.defined() || bias.shape() == normalized_shape, op, ": bias of shape ", bias.shape(),
              " does not match normalized_shape ", normalized_shape);
    QKV_CHECK(eps > 0, op, ": eps must be positive, got ", eps);
}

/// LN(x) or, with `residual` defined, LN(x + residual) in one fused forward whose backward hands
/// the same dx to both addends. y = (x − μ)·r·γ + β, r = 1/√(σ² + eps); backward in
/// kernels/ref/layer_norm.cpp: dx = r·(g − mean(g) − x̂·mean(g∘x̂)) with g = dy∘γ; dγ = Σ dy∘x̂;
/// dβ = Σ dy.
Tensor layer_norm_impl(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                       const Tensor& weight, const Tensor& bias, double eps) {
    const bool fused = residual.defined();
    const int64_t N = shape_numel(normalized_shape), rows = N ? x.numel() / N : 0;
    const Tensor xc = x.detach().contiguous();
    const Tensor rc = fused ? residual.detach().contiguous() : Tensor();
    const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
    const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
    // The normalised input the backward needs: x itself, or the fused sum x + residual.
    const Tensor z = fused ? Tensor::empty(x.shape(), x.dtype()) : xc;
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    Tensor mean = Tensor::empty({rows}, x.dtype()), rstd = Tensor::empty({rows}, x.dtype());
    QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm", {
        const kernels::LayerNormParams<scalar_t> p{
            .y = ptr<scalar_t>(y), .mean = ptr<scalar_t>(mean), .rstd = ptr<scalar_t>(rstd), .x = ptr<scalar_t>(xc),
            .gamma = opt_ptr<scalar_t>(w), .beta = opt_ptr<scalar_t>(b), .rows = rows, .N = N, .eps = eps,
            .residual = opt_ptr<scalar_t>(rc), .sum = fused ? ptr<scalar_t>(z) : nullptr};
        ln_forward(p);
    });
    std::vector<Tensor> inputs{x};
    if (fused) inputs.push_back(residual);
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    record(y, fused ? "AddLayerNormBackward" : "LayerNormBackward", inputs,
           [z, w, mean, rstd, rows, N, fused, has_w = weight.defined(), has_b = bias.defined(),
            ns = normalized_shape](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor dx = Tensor::empty(z.shape(), z.dtype());
        Tensor dw = has_w ? Tensor::empty(ns, z.dtype()) : Tensor();
        Tensor db = has_b ? Tensor::empty(ns, z.dtype()) : Tensor();
        QKV_DISPATCH_FLOAT(z.dtype(), "layer_norm_backward", {
            const kernels::LayerNormParams<scalar_t> p{.mean = ptr<scalar_t>(mean), .rstd = ptr<scalar_t>(rstd),
                                                       .x = ptr<scalar_t>(z), .gamma = opt_ptr<scalar_t>(w),
                                                       .rows = rows, .N = N};
            const kernels::LayerNormGradParams<scalar_t> gp{.dx = ptr<scalar_t>(dx), .dgamma = opt_ptr_mut<scalar_t>(dw),
                                                            .dbeta = opt_ptr_mut<scalar_t>(db), .dy = ptr<scalar_t>(gc)};
            ln_backward(p, gp);
        });
        std::vector<Tensor> gs{dx};
        if (fused) gs.push_back(dx);  // d(x + residual)/dresidual = 1: the same gradient (never mutated)
        if (has_w) gs.push_back(dw);
        if (has_b) gs.push_back(db);
        return gs;
    });
    return y;
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
    check_layer_norm_args("layer_norm", x, normalized_shape, weight, bias, eps);
    return layer_norm_impl(x, Tensor(), normalized_shape, weight, bias, eps);
}

Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, double eps) {
    check_layer_norm_args("add_layer_norm", x, normalized_shape, weight, bias, eps);
    QKV_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == x.dtype(),
              "add_layer_norm: residual of shape ", residual.defined() ? residual.shape() : Shape{}, " and dtype ",
              residual.defined() ? dtype_name(residual.dtype()) : "none", " must match x's ", x.shape(), " and ",
              dtype_name(x.dtype()));
    return layer_norm_impl(x, residual, normalized_shape, weight, bias, eps);
}

}  // namespace qkv
