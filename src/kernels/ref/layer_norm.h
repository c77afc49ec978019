#pragma once
// Reference layer normalisation over the last dim (Ba et al. 2016, "Layer Normalization"; D2L
// 11.7 AddNorm), forward and backward, templated on float/double.
// Kernels assume valid input (the op checks shapes and ranges); they throw only std::bad_alloc
// (scratch buffers).
#include <cstdint>

namespace qkv::kernels::ref {

/// x, y: (rows, N) contiguous. Per row: μ = mean(x), σ² = mean((x − μ)²) (biased, two passes),
/// r = 1/sqrt(σ² + eps), y = (x − μ)·r·γ + β. gamma, beta: (N) or nullptr (γ = 1, β = 0).
/// mean, rstd: (rows) outputs saved for the backward, or nullptr. eps is rounded to T.
/// y may alias x.
template <class T>
void layer_norm_forward(T* y,
                        T* mean,
                        T* rstd,
                        const T* x,
                        const T* gamma,
                        const T* beta,
                        int64_t rows,
                        int64_t N,
                        double eps);

/// Backward, with x̂ = (x − μ)·r and g = dy∘γ (derivation in the .cpp):
///   dx = r·(g − mean(g) − x̂·mean(g∘x̂)),  dγ = Σ_rows dy∘x̂,  dβ = Σ_rows dy.
/// dy, x: (rows, N); mean, rstd: (rows) from the forward; gamma: (N) or nullptr (γ = 1).
/// Outputs (each may be nullptr to skip it): dx (rows, N), dgamma (N), dbeta (N); all are
/// overwritten, not accumulated. dx may alias dy.
template <class T>
void layer_norm_backward(T* dx,
                         T* dgamma,
                         T* dbeta,
                         const T* dy,
                         const T* x,
                         const T* mean,
                         const T* rstd,
                         const T* gamma,
                         int64_t rows,
                         int64_t N);

}  // namespace qkv::kernels::ref
