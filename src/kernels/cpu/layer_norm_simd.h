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

template <Isa I>
void layer_norm_forward(const LayerNormParams<float>& p) {
    using V = Vec<I>;
    using R = typename V::R;
    const int64_t rows = p.rows, N = p.N;
    const float   eps = float(p.eps), *gamma = p.gamma, *beta = p.beta;
#pragma omp parallel for schedule(static) if (rows * N >= detail::kLayerNormMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = p.x + r * N;
        if (p.residual) {  // fused residual: the row of x + residual, then normalised from L1
            const float* rr = p.residual + r * N;
            row_map<V>(p.sum + r * N, N, [=](int64_t j, auto k) {
                return V::add(load_n<V>(xr + j, k, 0.f), load_n<V>(rr + j, k, 0.f));
            });
            xr = p.sum + r * N;
        }
        const float  mu = row_sum<V>(xr, N) / float(N);
        const R     vmu = V::set1(mu);
        // Σ (x − μ)²; tail lanes are loaded as μ so they add 0.
        const float var = row_sum_of<V>(N, [=](R a, int64_t j, auto k) {
            const R d = V::sub(load_n<V>(xr + j, k, mu), vmu);
            return V::fmadd(d, d, a);
        }) / float(N);
        const float rs  = 1.0f / __builtin_sqrtf(var + eps);
        const R     vrs = V::set1(rs);
        row_map<V>(p.y + r * N, N, [=](int64_t j, auto k) {
            const R xhat = V::mul(V::sub(load_n<V>(xr + j, k, 0.f), vmu), vrs);
            return V::fmadd(xhat, load_n<V>(gamma + j, k, 0.f), load_n<V>(beta + j, k, 0.f));
        });
        if (p.mean) p.mean[r] = mu;
        if (p.rstd) p.rstd[r] = rs;
    }
}

template <Isa I>
void layer_norm_backward(const LayerNormParams<float>& p, const LayerNormGradParams<float>& grads,
                         float* partial) {
    using V = Vec<I>;
    using R            = typename V::R;
    const int64_t rows = p.rows, N = p.N;
    const float * x = p.x, *gamma = p.gamma, *dy = grads.dy;
    float *const  dx = grads.dx, *const dgamma = grads.dgamma, *const dbeta = grads.dbeta;
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
            const R vmu = V::set1(p.mean[r]), vrs = V::set1(p.rstd[r]);
            // dy, γ and x̂ of lanes [j, j + k) (tail lanes load 0 for dy, so they add 0).
            struct Lanes {
                R dy, gamma, xhat;
            };
            const auto at = [=](int64_t j, auto k) {
                return Lanes{load_n<V>(dyr + j, k, 0.f), load_n<V>(gamma + j, k, 0.f),
                             V::mul(V::sub(load_n<V>(xr + j, k, 0.f), vmu), vrs)};
            };
            // Pass 1: Σ g, Σ g·x̂ with g = dy·γ, and the dγ/dβ partials.
            R sg = V::zero(), sgx = V::zero();
            row_blocks<V>(N, [&](int64_t j, auto k) {
                const Lanes l = at(j, k);
                const R     g = V::mul(l.dy, l.gamma);
                sg            = V::add(sg, g);
                sgx           = V::fmadd(g, l.xhat, sgx);
                if (want_p) {
                    store_n<V>(pg + j, V::fmadd(l.dy, l.xhat, load_n<V>(pg + j, k, 0.f)), k);
                    store_n<V>(pb + j, V::add(l.dy, load_n<V>(pb + j, k, 0.f)), k);
                }
            });
            if (!dx) continue;
            // Pass 2: dx = r·(g − mean(g) − x̂·mean(g·x̂)).
            const R mg  = V::set1(V::reduce_add(sg) / float(N));
            const R mgx = V::set1(V::reduce_add(sgx) / float(N));
            row_map<V>(dx + r * N, N, [=](int64_t j, auto k) {
                const Lanes l = at(j, k);
                return V::mul(vrs, V::fnmadd(l.xhat, mgx, V::sub(V::mul(l.dy, l.gamma), mg)));
            });
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
