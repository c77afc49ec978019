// softmax / log_softmax ops: move `dim` last if needed, run the row kernel (SIMD for f32,
// reference for f64 or KernelMode::reference), record the backward.
#include "qkv/ops/softmax.h"

#include <functional>
#include <numeric>

#include "kernels/cpu/softmax.h"
#include "kernels/ref/softmax.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

namespace {

enum class Kind { softmax, log_softmax };

template <class T>
void forward_rows(Kind kind, T* y, const T* x, int64_t rows, int64_t cols) {
    if constexpr (std::is_same_v<T, float>) {
        if (kernel_mode() == KernelMode::fast) {
            if (kind == Kind::softmax) kernels::cpu::softmax_forward(y, x, rows, cols);
            else kernels::cpu::log_softmax_forward(y, x, rows, cols);
            return;
        }
    }
    if (kind == Kind::softmax) kernels::ref::softmax_forward<T>(y, x, rows, cols);
    else kernels::ref::log_softmax_forward<T>(y, x, rows, cols);
}

template <class T>
void backward_rows(Kind kind, T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
    if constexpr (std::is_same_v<T, float>) {
        if (kernel_mode() == KernelMode::fast) {
            if (kind == Kind::softmax) kernels::cpu::softmax_backward(dx, dy, y, rows, cols);
            else kernels::cpu::log_softmax_backward(dx, dy, y, rows, cols);
            return;
        }
    }
    if (kind == Kind::softmax) kernels::ref::softmax_backward<T>(dx, dy, y, rows, cols);
    else kernels::ref::log_softmax_backward<T>(dx, dy, y, rows, cols);
}

/// x with `dim` swapped with the last dim, contiguous (the swap is its own inverse).
Tensor swap_last(const Tensor& x, int64_t dim) {
    if (dim == x.dim() - 1) return x.contiguous();
    std::vector<int64_t> perm(static_cast<size_t>(x.dim()));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[size_t(dim)], perm.back());
    return x.permute(perm).contiguous();
}

/// Runs `f(contiguous tensor with dim last)` and moves the result back.
Tensor with_dim_last(const Tensor& x, int64_t dim, const std::function<Tensor(const Tensor&)>& f) {
    return swap_last(f(swap_last(x, dim)), dim);
}

Tensor backward_impl(Kind kind, const Tensor& g, const Tensor& y, int64_t d) {
    const Tensor gl = swap_last(g, d), yl = swap_last(y, d);
    const int64_t cols = gl.shape().back(), rows = cols ? gl.numel() / cols : 0;
    Tensor out = Tensor::empty(gl.shape(), gl.dtype());
    QKV_DISPATCH_FLOAT(gl.dtype(), "softmax_backward",
                       backward_rows<scalar_t>(kind, ptr<scalar_t>(out), ptr<scalar_t>(gl), ptr<scalar_t>(yl), rows,
                                               cols));
    return swap_last(out, d);
}

Tensor softmax_impl(Kind kind, const Tensor& x_in, int64_t dim) {
    const char* name = kind == Kind::softmax ? "softmax" : "log_softmax";
    QKV_CHECK(x_in.defined(), name, ": undefined tensor argument");
    if (x_in.dim() == 0) return softmax_impl(kind, x_in.reshape({1}), 0).reshape({});
    dim = normalize_axis(dim, x_in.dim(), name);
    return with_dim_last(x_in.detach(), dim, [&](const Tensor& x) {
        const int64_t cols = x.shape().back(), rows = cols ? x.numel() / cols : 0;
        Tensor y = Tensor::empty(x.shape(), x.dtype());
        QKV_DISPATCH_FLOAT(x.dtype(), name, forward_rows<scalar_t>(kind, ptr<scalar_t>(y), ptr<scalar_t>(x), rows, cols));
        return y;
    }).detach();
}

/// softmax or log_softmax of x along dim, recording its backward (kind's formula below).
Tensor softmax_op(Kind kind, const Tensor& x, int64_t dim) {
    Tensor y = softmax_impl(kind, x, dim);
    if (x.dim() == 0) return y;
    const bool  plain = kind == Kind::softmax;
    const int64_t d   = normalize_axis(dim, x.dim(), plain ? "softmax" : "log_softmax");
    Tensor        sy  = y.detach();
    record(y, plain ? "SoftmaxBackward" : "LogSoftmaxBackward", {x}, [kind, sy, d](const Tensor& g) {
        return std::vector<Tensor>{backward_impl(kind, g, sy, d)};
    });
    return y;
}

}  // namespace

// softmax: dx = y ∘ (dy − rowsum(dy ∘ y)); log_softmax: dx = dy − exp(y) · rowsum(dy)
Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(Kind::softmax, x, dim); }

Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(Kind::log_softmax, x, dim); }

}  // namespace qkv
