#pragma once
// Fast fp32 layer norm over the last dim: AVX-512 / AVX2 rows, OpenMP over rows; dγ and dβ are
// reduced from fixed row-block partials, so they are race-free and do not depend on the thread
// count. Same semantics as kernels::ref (ref/layer_norm.h); the derivation is in
// src/kernels/ref/layer_norm.cpp.
// Kernels assume valid input (the op checks shapes and ranges); they throw only std::bad_alloc
// (scratch buffers).
#include <cstdint>

namespace qkv::kernels::cpu {

/// x, y: (rows, N) fp32 contiguous; gamma, beta: (N) or nullptr; mean, rstd: (rows) or nullptr.
/// y = (x − μ)·r·γ + β with biased variance and r = 1/sqrt(σ² + eps). y may alias x.
void layer_norm_forward(float* y,
                        float* mean,
                        float* rstd,
                        const float* x,
                        const float* gamma,
                        const float* beta,
                        int64_t rows,
                        int64_t N,
                        double eps);

/// dx = r·(g − mean(g) − x̂·mean(g∘x̂)) with g = dy∘γ; dγ = Σ_rows dy∘x̂; dβ = Σ_rows dy.
/// dx (rows, N), dgamma (N), dbeta (N): each nullable, overwritten. dx may alias dy.
void layer_norm_backward(float* dx,
                         float* dgamma,
                         float* dbeta,
                         const float* dy,
                         const float* x,
                         const float* mean,
                         const float* rstd,
                         const float* gamma,
                         int64_t rows,
                         int64_t N);

}  // namespace qkv::kernels::cpu
