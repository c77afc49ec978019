// Reference layer norm (see ref/layer_norm.h): scalar, two-pass statistics.
#include "kernels/ref/layer_norm.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace qkv::kernels::ref {

template <class T>
void layer_norm_forward(const LayerNormParams<T>& p) {
    const auto [y, mean, rstd, x_in, gamma, beta, rows, N, eps, residual, sum] = p;
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x_in + r * N;
        if (residual) {  // fused residual: normalise sum = x + residual
            for (int64_t j = 0; j < N; ++j) sum[r * N + j] = xr[j] + residual[r * N + j];
            xr = sum + r * N;
        }
        T* yr = y + r * N;
        T mu        = 0;
        for (int64_t j = 0; j < N; ++j) mu += xr[j];
        mu /= T(N);
        T var = 0;
        for (int64_t j = 0; j < N; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        var /= T(N);
        const T rs = T(1) / std::sqrt(var + T(eps));
        for (int64_t j = 0; j < N; ++j) {
            const T xhat = (xr[j] - mu) * rs;
            yr[j]        = xhat * (gamma ? gamma[j] : T(1)) + (beta ? beta[j] : T(0));
        }
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}

// Per row, x̂_j = (x_j − μ)·r with ∂μ/∂x_i = 1/N and ∂r/∂x_i = −r³(x_i − μ)/N = −r²x̂_i/N, so
//   ∂x̂_j/∂x_i = r(δ_ij − 1/N) − x̂_j·r·x̂_i/N.
// With g_j = dy_j·γ_j = ∂L/∂x̂_j:
//   dx_i = Σ_j g_j ∂x̂_j/∂x_i = r·(g_i − (1/N)Σ_j g_j − x̂_i·(1/N)Σ_j g_j x̂_j).
// y_j = x̂_j γ_j + β_j gives dγ_j = Σ_rows dy_j x̂_j and dβ_j = Σ_rows dy_j.
template <class T>
void layer_norm_backward(const LayerNormParams<T>& p, const LayerNormGradParams<T>& grads) {
    const auto [dx, dgamma, dbeta, dy]                          = grads;
    const auto [y_, mean, rstd, x, gamma, beta_, rows, N, eps_, res_, sum_] = p;
    if (dgamma)
        for (int64_t j = 0; j < N; ++j) dgamma[j] = 0;
    if (dbeta)
        for (int64_t j = 0; j < N; ++j) dbeta[j] = 0;
    std::vector<T> g(static_cast<std::size_t>(N));
    for (int64_t r = 0; r < rows; ++r) {
        const T* dyr = dy + r * N;
        const T* xr  = x + r * N;
        const T mu = mean[r], rs = rstd[r];
        T sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < N; ++j) {
            const T xhat = (xr[j] - mu) * rs;
            g[j]         = dyr[j] * (gamma ? gamma[j] : T(1));
            sum_g += g[j];
            sum_gx += g[j] * xhat;
            if (dgamma) dgamma[j] += dyr[j] * xhat;
            if (dbeta) dbeta[j] += dyr[j];
        }
        if (!dx) continue;
        const T mean_g = sum_g / T(N), mean_gx = sum_gx / T(N);
        T* dxr = dx + r * N;
        for (int64_t j = 0; j < N; ++j) {
            const T xhat = (xr[j] - mu) * rs;
            dxr[j]       = rs * (g[j] - mean_g - xhat * mean_gx);
        }
    }
}

template decltype(layer_norm_forward<float>) layer_norm_forward<float>;
template decltype(layer_norm_forward<double>) layer_norm_forward<double>;
template decltype(layer_norm_backward<float>) layer_norm_backward<float>;
template decltype(layer_norm_backward<double>) layer_norm_backward<double>;

}  // namespace qkv::kernels::ref
