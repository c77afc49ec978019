// Layer-norm kernels for avx512 (compiled with its ISA flags; called only after the run-time
// check).
#include "kernels/cpu/layer_norm_simd.h"

namespace qkv::kernels::cpu::detail {

void layer_norm_forward_avx512(float* y,
                               float* mean,
                               float* rstd,
                               const float* x,
                               const float* gamma,
                               const float* beta,
                               int64_t rows,
                               int64_t N,
                               float eps) {
    simd::layer_norm_forward_t<simd::V16>(y, mean, rstd, x, gamma, beta, rows, N, eps);
}

void layer_norm_backward_avx512(float* dx,
                                float* dgamma,
                                float* dbeta,
                                const float* dy,
                                const float* x,
                                const float* mean,
                                const float* rstd,
                                const float* gamma,
                                int64_t rows,
                                int64_t N,
                                float* partial) {
    simd::layer_norm_backward_t<simd::V16>(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, N,
                                           partial);
}

}  // namespace qkv::kernels::cpu::detail
