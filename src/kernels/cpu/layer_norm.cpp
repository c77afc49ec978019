// Fast layer-norm dispatch: substitutes γ = 1 / β = 0 when absent, allocates the dγ/dβ partial
// buffers, and calls the AVX-512 / AVX2 bodies (layer_norm_simd.h), else the reference.
#include "kernels/cpu/layer_norm.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/layer_norm_simd.h"
#include "kernels/ref/layer_norm.h"

namespace qkv::kernels::cpu {

void layer_norm_forward(float* y,
                        float* mean,
                        float* rstd,
                        const float* x,
                        const float* gamma,
                        const float* beta,
                        int64_t rows,
                        int64_t N,
                        double eps) {
    if (rows == 0 || N == 0) return;
    const Isa isa = simd_isa();
    if (isa == Isa::scalar)
        return ref::layer_norm_forward<float>(y, mean, rstd, x, gamma, beta, rows, N, eps);
    std::vector<float> ones, zeros;
    if (!gamma) ones.assign(static_cast<std::size_t>(N), 1.f), gamma = ones.data();
    if (!beta) zeros.assign(static_cast<std::size_t>(N), 0.f), beta = zeros.data();
    if (isa == Isa::avx512)
        detail::layer_norm_forward_avx512(y, mean, rstd, x, gamma, beta, rows, N, float(eps));
    else
        detail::layer_norm_forward_avx2(y, mean, rstd, x, gamma, beta, rows, N, float(eps));
}

void layer_norm_backward(float* dx,
                         float* dgamma,
                         float* dbeta,
                         const float* dy,
                         const float* x,
                         const float* mean,
                         const float* rstd,
                         const float* gamma,
                         int64_t rows,
                         int64_t N) {
    if (N == 0) return;
    if (rows == 0) {  // empty sums
        for (int64_t j = 0; j < N; ++j) {
            if (dgamma) dgamma[j] = 0.f;
            if (dbeta) dbeta[j] = 0.f;
        }
        return;
    }
    const Isa isa = simd_isa();
    if (isa == Isa::scalar)
        return ref::layer_norm_backward<float>(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows,
                                               N);
    std::vector<float> ones;
    if (!gamma) ones.assign(static_cast<std::size_t>(N), 1.f), gamma = ones.data();
    std::vector<float> partial;
    if (dgamma || dbeta) {
        const int64_t rpb = detail::layer_norm_rows_per_block(rows);
        partial.resize(static_cast<std::size_t>(2 * ((rows + rpb - 1) / rpb) * N));
    }
    if (isa == Isa::avx512)
        detail::layer_norm_backward_avx512(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, N,
                                           partial.data());
    else
        detail::layer_norm_backward_avx2(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, N,
                                         partial.data());
}

}  // namespace qkv::kernels::cpu
