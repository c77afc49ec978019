// Fast layer-norm dispatch: substitutes γ = 1 / β = 0 when absent, allocates the dγ/dβ partial
// buffers, and calls the per-ISA bodies (layer_norm_simd.h), else the reference.
#include "kernels/cpu/layer_norm.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/layer_norm_simd.h"
#include "kernels/cpu/variants.h"
#include "kernels/ref/layer_norm.h"

namespace qkv::kernels::cpu {

void layer_norm_forward(const LayerNormParams<float>& p) {
    if (p.rows == 0 || p.N == 0) return;
    if (fp32_variant_isa() == Isa::scalar) return ref::layer_norm_forward<float>(p);
    std::vector<float> ones, zeros;
    LayerNormParams<float> q = p;
    if (!q.gamma) ones.assign(static_cast<std::size_t>(q.N), 1.f), q.gamma = ones.data();
    if (!q.beta) zeros.assign(static_cast<std::size_t>(q.N), 0.f), q.beta = zeros.data();
    QKV_ISA_DISPATCH(simd::layer_norm_forward, (void)0, q);
}

void layer_norm_backward(const LayerNormParams<float>& p, const LayerNormGradParams<float>& g) {
    const int64_t rows = p.rows, N = p.N;
    if (N == 0) return;
    if (rows == 0) {  // empty sums
        for (int64_t j = 0; j < N; ++j) {
            if (g.dgamma) g.dgamma[j] = 0.f;
            if (g.dbeta) g.dbeta[j] = 0.f;
        }
        return;
    }
    if (fp32_variant_isa() == Isa::scalar) return ref::layer_norm_backward<float>(p, g);
    std::vector<float> ones;
    LayerNormParams<float> q = p;
    if (!q.gamma) ones.assign(static_cast<std::size_t>(N), 1.f), q.gamma = ones.data();
    std::vector<float> partial;
    if (g.dgamma || g.dbeta) {
        const int64_t rpb = detail::layer_norm_rows_per_block(rows);
        partial.resize(static_cast<std::size_t>(2 * ((rows + rpb - 1) / rpb) * N));
    }
    QKV_ISA_DISPATCH(simd::layer_norm_backward, (void)0, q, g, partial.data());
}

}  // namespace qkv::kernels::cpu
