#pragma once
// Layer-norm kernel bodies, one template over the ISA, instantiated per ISA by variants.inc. gamma/beta are never null here: the dispatcher (layer_norm.cpp)
// substitutes ones/zeros, and allocates the dγ/dβ partial buffers.
#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/params.h"

namespace qkv::kernels::cpu::detail {

/// dγ/dβ partials: one (N) pair per block of rows; the block size depends only on `rows`, so the
/// summation order (rows in order within a block, blocks in order) is the same on any thread
/// count. 32 rows per block, more when that would give over 512 blocks (bounded scratch).
static inline int64_t layer_norm_rows_per_block(int64_t rows) {
    const int64_t by_cap = (rows + 511) / 512;
    return by_cap > 32 ? by_cap : 32;
}

constexpr int64_t kLayerNormMinParallel = 1 << 14;  // elements; as kSoftmaxMinParallel

}  // namespace qkv::kernels::cpu::detail

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {
namespace {

// Σ (x − μ)²; tail lanes are loaded as μ so they add 0.
template <class V>
float row_sum_sq_dev(const float* x, int64_t n, float mu) {
    using R     = typename V::R;
    const R vmu = V::set1(mu);
    R s0 = V::zero(), s1 = V::zero();
    int64_t j = 0;
    for (; j + 2 * V::W <= n; j += 2 * V::W) {
        const R d0 = V::sub(V::load(x + j), vmu), d1 = V::sub(V::load(x + j + V::W), vmu);
        s0 = V::fmadd(d0, d0, s0);
        s1 = V::fmadd(d1, d1, s1);
    }
    for (; j + V::W <= n; j += V::W) {
        const R d = V::sub(V::load(x + j), vmu);
        s0        = V::fmadd(d, d, s0);
    }
    if (j < n) {
        const R d = V::sub(V::load_tail(x + j, n - j, mu), vmu);
        s0        = V::fmadd(d, d, s0);
    }
    return V::reduce_add(V::add(s0, s1));
}

}  // namespace

template <Isa I>
void layer_norm_forward(const LayerNormParams<float>& params) {
    const auto y = params.y; const auto mean = params.mean; const auto rstd = params.rstd;
    const auto x = params.x; const auto gamma = params.gamma; const auto beta = params.beta;
    const auto rows = params.rows; const auto N = params.N; const auto eps_d = params.eps;
    const float eps = float(eps_d);
    using V = Vec<I>;
    using R = typename V::R;
#pragma omp parallel for schedule(static) if (rows * N >= detail::kLayerNormMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * N;
        float* yr       = y + r * N;
        const float mu  = row_sum<V>(xr, N) / float(N);
        const float var = row_sum_sq_dev<V>(xr, N, mu) / float(N);
        const float rs  = 1.0f / __builtin_sqrtf(var + eps);
        const R vmu = V::set1(mu), vrs = V::set1(rs);
        int64_t j = 0;
        for (; j + V::W <= N; j += V::W) {
            const R xhat = V::mul(V::sub(V::load(xr + j), vmu), vrs);
            V::store(yr + j, V::fmadd(xhat, V::load(gamma + j), V::load(beta + j)));
        }
        if (j < N) {
            const int64_t t = N - j;
            const R xhat    = V::mul(V::sub(V::load_tail(xr + j, t, 0.f), vmu), vrs);
            V::store_tail(
                yr + j,
                V::fmadd(xhat, V::load_tail(gamma + j, t, 0.f), V::load_tail(beta + j, t, 0.f)), t);
        }
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}


template <Isa I>
void layer_norm_backward(const LayerNormParams<float>& params, const LayerNormGradParams<float>& grads,
                         float* partial) {
    const auto dx = grads.dx; const auto dgamma = grads.dgamma; const auto dbeta = grads.dbeta;
    const auto dy = grads.dy;
    const auto mean = params.mean; const auto rstd = params.rstd; const auto x = params.x;
    const auto gamma = params.gamma; const auto rows = params.rows; const auto N = params.N;
    using V = Vec<I>;
    using R            = typename V::R;
    const int64_t rpb  = detail::layer_norm_rows_per_block(rows);
    const int64_t nblk = (rows + rpb - 1) / rpb;
    const bool want_p  = dgamma || dbeta;
#pragma omp parallel for schedule(static) if (rows * N >= detail::kLayerNormMinParallel)
    for (int64_t b = 0; b < nblk; ++b) {
        float* pg = want_p ? partial + b * N : nullptr;
        float* pb = want_p ? partial + (nblk + b) * N : nullptr;
        if (want_p)
            for (int64_t j = 0; j < N; ++j) pg[j] = pb[j] = 0.f;
        const int64_t r_end = (b + 1) * rpb < rows ? (b + 1) * rpb : rows;
        for (int64_t r = b * rpb; r < r_end; ++r) {
            const float* dyr = dy + r * N;
            const float* xr  = x + r * N;
            const R vmu = V::set1(mean[r]), vrs = V::set1(rstd[r]);
            // Pass 1: Σ g, Σ g·x̂, and the dγ/dβ partials. Tail lanes load 0 for dy, so they add 0.
            R sg = V::zero(), sgx = V::zero();
            int64_t j = 0;
            for (; j < N; j += V::W) {
                const int64_t t = N - j < V::W ? N - j : V::W;
                const bool full = t == V::W;
                const R vdy     = full ? V::load(dyr + j) : V::load_tail(dyr + j, t, 0.f);
                const R vx      = full ? V::load(xr + j) : V::load_tail(xr + j, t, 0.f);
                const R vg      = full ? V::load(gamma + j) : V::load_tail(gamma + j, t, 0.f);
                const R xhat    = V::mul(V::sub(vx, vmu), vrs);
                const R g       = V::mul(vdy, vg);
                sg              = V::add(sg, g);
                sgx             = V::fmadd(g, xhat, sgx);
                if (want_p) {
                    if (full) {
                        V::store(pg + j, V::fmadd(vdy, xhat, V::load(pg + j)));
                        V::store(pb + j, V::add(vdy, V::load(pb + j)));
                    } else {
                        V::store_tail(pg + j, V::fmadd(vdy, xhat, V::load_tail(pg + j, t, 0.f)), t);
                        V::store_tail(pb + j, V::add(vdy, V::load_tail(pb + j, t, 0.f)), t);
                    }
                }
            }
            if (!dx) continue;
            // Pass 2: dx = r·(g − mean(g) − x̂·mean(g·x̂)).
            const R mg  = V::set1(V::reduce_add(sg) / float(N));
            const R mgx = V::set1(V::reduce_add(sgx) / float(N));
            float* dxr  = dx + r * N;
            for (j = 0; j < N; j += V::W) {
                const int64_t t = N - j < V::W ? N - j : V::W;
                const bool full = t == V::W;
                const R vdy     = full ? V::load(dyr + j) : V::load_tail(dyr + j, t, 0.f);
                const R vx      = full ? V::load(xr + j) : V::load_tail(xr + j, t, 0.f);
                const R vg      = full ? V::load(gamma + j) : V::load_tail(gamma + j, t, 0.f);
                const R xhat    = V::mul(V::sub(vx, vmu), vrs);
                const R v       = V::mul(vrs, V::fnmadd(xhat, mgx, V::sub(V::mul(vdy, vg), mg)));
                if (full)
                    V::store(dxr + j, v);
                else
                    V::store_tail(dxr + j, v, t);
            }
        }
    }
    if (!want_p) return;
    // Blocks in order: the same sums on any thread count.
    for (int64_t j = 0; j < N; ++j) {
        float sgam = 0.f, sbet = 0.f;
        for (int64_t b = 0; b < nblk; ++b) {
            sgam += partial[b * N + j];
            sbet += partial[(nblk + b) * N + j];
        }
        if (dgamma) dgamma[j] = sgam;
        if (dbeta) dbeta[j] = sbet;
    }
}

}  // namespace qkv::kernels::cpu::simd
#endif
