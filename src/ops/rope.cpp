// Rotary position embedding (ops/rope.h): a plain loop over rows with float64 angle tables; the
// backward is the same loop with the rotation reversed.
#include "qkv/ops/rope.h"

#include <cmath>
#include <vector>

#include "ops/dispatch.h"
#include "qkv/autograd/node.h"

namespace qkv {

using detail::ptr;

namespace {

/// y = R(±p θ) x over rows of (rows, T, D); sign −1 applies the transpose (the backward).
template <class T>
void rotate(T* y, const T* x, int64_t outer, int64_t steps, int64_t dim, const RopeOptions& o, double sign) {
    const int64_t half = dim / 2;
    std::vector<T> cosv(size_t(steps * half)), sinv(size_t(steps * half));
    for (int64_t t = 0; t < steps; ++t)
        for (int64_t i = 0; i < half; ++i) {
            const double theta = std::pow(o.base, -2.0 * double(i) / double(dim));
            const double angle = double(o.position_offset + t) * theta;
            cosv[size_t(t * half + i)] = T(std::cos(angle));
            sinv[size_t(t * half + i)] = T(sign * std::sin(angle));
        }
    const bool interleaved = o.layout == RopeLayout::interleaved;
    for (int64_t r = 0; r < outer; ++r)
        for (int64_t t = 0; t < steps; ++t) {
            const T* xr = x + (r * steps + t) * dim;
            T* yr       = y + (r * steps + t) * dim;
            const T* c  = cosv.data() + t * half;
            const T* s  = sinv.data() + t * half;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
                const T xa = xr[a], xb = xr[b];
                yr[a] = xa * c[i] - xb * s[i];
                yr[b] = xb * c[i] + xa * s[i];
            }
        }
}

Tensor apply(const Tensor& x_in, const RopeOptions& o, double sign) {
    const Tensor x = x_in.contiguous();
    const int64_t dim = x.shape().back(), steps = x.shape()[size_t(x.dim() - 2)];
    const int64_t outer = steps * dim != 0 ? x.numel() / (steps * dim) : 0;
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    QKV_DISPATCH_FLOAT(x.dtype(), "rotary_embedding",
                       rotate<scalar_t>(ptr<scalar_t>(y), ptr<scalar_t>(x), outer, steps, dim, o, sign));
    return y;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const RopeOptions& o) {
    QKV_CHECK(x.defined(), "rotary_embedding: x is an undefined tensor");
    QKV_CHECK(x.dim() >= 2, "rotary_embedding: x must have shape (..., T, D), got ", shape_str(x.shape()));
    QKV_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64,
              "rotary_embedding: x must be float32 or float64, got ", dtype_name(x.dtype()));
    const int64_t dim = x.shape().back();
    QKV_CHECK(dim > 0 && dim % 2 == 0, "rotary_embedding: the last dimension of x (D) must be even and positive, "
              "got shape ", shape_str(x.shape()));
    QKV_CHECK(std::isfinite(o.base) && o.base > 0, "rotary_embedding: base must be a positive number, got ", o.base);
    QKV_CHECK(o.position_offset >= 0, "rotary_embedding: position_offset must be >= 0, got ", o.position_offset);
    Tensor y = apply(x.detach(), o, +1.0);
    record(y, "RotaryEmbeddingBackward", {x}, [o](const Tensor& g) { return std::vector<Tensor>{apply(g, o, -1.0)}; });
    return y;
}

}  // namespace qkv
