// Fast additive-attention scores: ISA dispatch (additive_attention_simd.h) and the fixed-order
// reduction of dw. The math is in ref/additive_attention.cpp.
#include "kernels/cpu/additive_attention.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/variants.h"
#include "kernels/ref/additive_attention.h"

namespace qkv::kernels::cpu {

void additive_scores_forward(const AdditiveScoresParams<float>& p) {
    QKV_ISA_DISPATCH(simd::additive_scores_forward, ref::additive_scores_forward<float>(p), p);
}

void additive_scores_backward(const AdditiveScoresParams<float>& p, const AdditiveScoresGradParams<float>& g) {
    if (fp32_variant_isa() == Isa::scalar || !g.dq || !g.dk || !g.dw) {
        ref::additive_scores_backward<float>(p, g);
        return;
    }
    const int64_t      B = p.B, H = p.H;
    float* const       dw = g.dw;
    std::vector<float> part(std::size_t(B * H));
    // The vector body writes per-batch-row partial sums of dw, reduced below in b order.
    AdditiveScoresGradParams<float> gp = g;
    gp.dw                              = part.data();
    [&] { QKV_ISA_DISPATCH(simd::additive_scores_backward, (void)0, p, gp); }();
    for (int64_t h = 0; h < H; ++h) dw[h] = 0.f;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) dw[h] += part[std::size_t(b * H + h)];
}

}  // namespace qkv::kernels::cpu
