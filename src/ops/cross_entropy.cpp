// cross_entropy op: fused log-softmax + NLL (kernels/{ref,cpu}/cross_entropy) with label smoothing, ignore_index and per-position
// weights. Per row: lse = log Σ exp(x); loss = w·((1−ε)(lse − x_t) + ε(lse − mean(x)));
// backward: dx = g·w·(softmax(x) − q) with q = (1−ε)·onehot(t) + ε/V.
#include "qkv/ops/cross_entropy.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/ref/cross_entropy.h"
#include "ops/cross_entropy_common.h"
#include "ops/dispatch.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/autograd/node.h"

namespace qkv {

using detail::ptr;

namespace {

bool fast(DType dt) { return dt == DType::f32 && kernel_mode() == KernelMode::fast; }

template <class T>
void ce_forward(T* loss, T* lse, const T* x, const int64_t* t, const T* w, int64_t rows, int64_t V,
                int64_t ignore, double eps) {
    const kernels::CrossEntropyParams<T> p{.loss = loss, .lse = lse, .logits = x, .target = t, .weight = w,
                                           .N = rows, .V = V, .ignore_index = ignore, .label_smoothing = eps};
    if constexpr (std::is_same_v<T, float>) {
        if (fast(DType::f32)) return kernels::cpu::cross_entropy_forward(p);
    }
    kernels::ref::cross_entropy_forward<T>(p);
}

template <class T>
void ce_backward(T* dx, const T* g, int64_t g_stride, const T* x, const T* lse, const int64_t* t, const T* w,
                 int64_t rows, int64_t V, int64_t ignore, double eps) {
    const kernels::CrossEntropyParams<T> p{.lse = const_cast<T*>(lse), .logits = x, .target = t, .weight = w,
                                           .N = rows, .V = V, .ignore_index = ignore, .label_smoothing = eps};
    const kernels::CrossEntropyGradParams<T> gp{.dlogits = dx, .dloss = g, .dloss_stride = g_stride};
    if constexpr (std::is_same_v<T, float>) {
        if (fast(DType::f32)) return kernels::cpu::cross_entropy_backward(p, gp);
    }
    kernels::ref::cross_entropy_backward<T>(p, gp);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     const CrossEntropyOptions& opt) {
    QKV_CHECK(logits.defined() && logits.dim() >= 1, "cross_entropy: logits must be (..., V)");
    QKV_CHECK(target.defined() && target.dtype() == DType::i64, "cross_entropy: target must be int64");
    const int64_t V = logits.shape().back();
    const Shape tshape(logits.shape().begin(), logits.shape().end() - 1);
    QKV_CHECK(target.shape() == tshape, "cross_entropy: target of shape ", target.shape(),
              " does not match logits ", logits.shape(), " (expected ", tshape, ")");
    QKV_CHECK(!weight.defined() || (weight.shape() == tshape && weight.dtype() == logits.dtype()),
              "cross_entropy: weight must have the target's shape ", tshape, " and the logits' dtype");
    QKV_CHECK(opt.label_smoothing >= 0 && opt.label_smoothing <= 1, "cross_entropy: label_smoothing must be "
              "in [0, 1], got ", opt.label_smoothing);
    QKV_CHECK(V > 0, "cross_entropy: empty vocabulary dimension");
    const int64_t rows = shape_numel(tshape);
    const Tensor xc = logits.detach().contiguous(), tc = target.contiguous();
    const Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
    const int64_t* pt = ptr<int64_t>(tc);
    detail::check_targets("cross_entropy", pt, rows, V, opt.ignore_index);
    Tensor per = Tensor::empty(tshape, logits.dtype());
    Tensor lse = Tensor::empty(tshape, logits.dtype());
    double denom = 0;
    QKV_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", {
        ce_forward<scalar_t>(ptr<scalar_t>(per), ptr<scalar_t>(lse), ptr<scalar_t>(xc), pt,
                             wc.defined() ? ptr<scalar_t>(wc) : nullptr, rows, V, opt.ignore_index,
                             opt.label_smoothing);
        const scalar_t* pw = wc.defined() ? ptr<scalar_t>(wc) : nullptr;
        for (int64_t r = 0; r < rows; ++r)
            if (pt[r] != opt.ignore_index) denom += pw ? double(pw[r]) : 1.0;
    });
    double scale = 1.0;
    Tensor out = detail::reduce_loss(per, opt.reduction, denom, scale);
    const Reduction red = opt.reduction;
    const int64_t ignore = opt.ignore_index;
    const double eps = opt.label_smoothing;
    record(out, "CrossEntropyBackward", {logits}, [xc, tc, wc, lse, rows, V, red, scale, ignore, eps](const Tensor& g) {
        // per-row upstream gradient: g itself (none) or one scaled value read with stride 0
        const Tensor gr = red == Reduction::none ? g.contiguous() : full({1}, g.item() * scale, xc.dtype());
        const int64_t g_stride = red == Reduction::none ? 1 : 0;
        Tensor dx = Tensor::empty(xc.shape(), xc.dtype());
        QKV_DISPATCH_FLOAT(xc.dtype(), "cross_entropy_backward",
                           ce_backward<scalar_t>(ptr<scalar_t>(dx), ptr<scalar_t>(gr), g_stride, ptr<scalar_t>(xc),
                                                 ptr<scalar_t>(lse), ptr<int64_t>(tc),
                                                 wc.defined() ? ptr<scalar_t>(wc) : nullptr, rows, V, ignore, eps));
        return std::vector<Tensor>{dx};
    });
    return out;
}

}  // namespace qkv
