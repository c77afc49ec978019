// Fast layer-norm dispatch: substitutes γ = 1 / β = 0 when absent, allocates the dγ/dβ partial
// buffers, and calls the per-ISA bodies (layer_norm_simd.h), else the reference.
#include "kernels/cpu/layer_norm.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/layer_norm_simd.h"
#include "kernels/cpu/variants.h"
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
    if (fp32_variant_isa() == Isa::scalar)
        return ref::layer_norm_forward<float>(y, mean, rstd, x, gamma, beta, rows, N, eps);
    std::vector<float> ones, zeros;
    if (!gamma) ones.assign(static_cast<std::size_t>(N), 1.f), gamma = ones.data();
    if (!beta) zeros.assign(static_cast<std::size_t>(N), 0.f), beta = zeros.data();
    QKV_ISA_DISPATCH(simd::layer_norm_forward, (void)0, y, mean, rstd, x, gamma, beta, rows, N,
                     float(eps));
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
    if (fp32_variant_isa() == Isa::scalar)
        return ref::layer_norm_backward<float>(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows,
                                               N);
    std::vector<float> ones;
    if (!gamma) ones.assign(static_cast<std::size_t>(N), 1.f), gamma = ones.data();
    std::vector<float> partial;
    if (dgamma || dbeta) {
        const int64_t rpb = detail::layer_norm_rows_per_block(rows);
        partial.resize(static_cast<std::size_t>(2 * ((rows + rpb - 1) / rpb) * N));
    }
    QKV_ISA_DISPATCH(simd::layer_norm_backward, (void)0, dx, dgamma, dbeta, dy, x, mean, rstd,
                     gamma, rows, N, partial.data());
}

}  // namespace qkv::kernels::cpu
