// dropout op: inverted dropout with Philox bits (element i of a call uses counter offset + i of
// the generator's stream, so masks do not depend on the thread count). Backward: dx = dy·mask/(1−p).
#include "qkv/ops/dropout.h"

#include "kernels/cpu/dropout.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/core/generator.h"
#include "qkv/core/philox.h"

namespace qkv {

using detail::ptr;

namespace {
/// y = x·m/(1−p) with m_i = [u_i >= p]; the kept mask is returned for the backward.
/// float32 uses the SIMD Philox kernel (kernels/cpu/dropout.h), which implements this formula.
template <class T>
void dropout_kernel(const T* x, T* y, uint8_t* keep, int64_t n, double p, uint64_t seed, uint64_t offset) {
    if constexpr (std::is_same_v<T, float>) {
        return kernels::cpu::dropout_forward(x, y, keep, n, float(p), seed, offset);
    }
    const T scale = T(1.0 / (1.0 - p));
    const float pf = float(p);
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const bool k = philox::uniform01(philox::bits(seed, 0, offset + uint64_t(i))) >= pf;
        keep[i] = k;
        y[i] = k ? x[i] * scale : T(0);
    }
}

template <class T>
void dropout_backward_kernel(const T* dy, T* dx, const uint8_t* keep, int64_t n, double p) {
    if constexpr (std::is_same_v<T, float>) {
        return kernels::cpu::dropout_backward(dy, dx, keep, n, float(p), 0, 0);
    }
    const T scale = T(1.0 / (1.0 - p));
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = keep[i] ? dy[i] * scale : T(0);
}
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
    QKV_CHECK(p >= 0 && p < 1, "dropout: probability must be in [0, 1), got ", p);
    if (!training || p == 0) return x;
    Generator& g = gen ? *gen : default_generator();
    const Tensor xc = x.detach().contiguous();
    const int64_t n = xc.numel();
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    Tensor keep = Tensor::empty(x.shape(), DType::b8);
    const uint64_t seed = g.seed(), offset = g.reserve(uint64_t(n));
    QKV_DISPATCH_FLOAT(x.dtype(), "dropout",
                       dropout_kernel<scalar_t>(ptr<scalar_t>(xc), ptr<scalar_t>(y), ptr<uint8_t>(keep), n, p,
                                                seed, offset));
    record(y, "DropoutBackward", {x}, [keep, p](const Tensor& gr) {
        const Tensor gc = gr.contiguous();
        Tensor dx = Tensor::empty(gc.shape(), gc.dtype());
        QKV_DISPATCH_FLOAT(gc.dtype(), "dropout_backward",
                           dropout_backward_kernel<scalar_t>(ptr<scalar_t>(gc), ptr<scalar_t>(dx), ptr<uint8_t>(keep),
                                                             gc.numel(), p));
        return std::vector<Tensor>{dx};
    });
    return y;
}

}  // namespace qkv
