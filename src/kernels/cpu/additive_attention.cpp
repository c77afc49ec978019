// Fast additive-attention scores: ISA dispatch (additive_attention_simd.h) and the fixed-order
// reduction of dw. The math is in ref/additive_attention.cpp.
#include "kernels/cpu/additive_attention.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/variants.h"
#include "kernels/ref/additive_attention.h"

namespace qkv::kernels::cpu {

void additive_scores_forward(float* scores, const float* q, const float* k, const float* w,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H) {
    QKV_ISA_DISPATCH(simd::additive_scores_forward,
                     ref::additive_scores_forward<float>(scores, q, k, w, B, Tq, Tk, H), scores, q, k,
                     w, B, Tq, Tk, H);
}

void additive_scores_backward(float* dq, float* dk, float* dw, const float* dscores, const float* q,
                              const float* k, const float* w, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H) {
    if (fp32_variant_isa() == Isa::scalar || !dq || !dk || !dw) {
        ref::additive_scores_backward<float>(dq, dk, dw, dscores, q, k, w, B, Tq, Tk, H);
        return;
    }
    std::vector<float> part(std::size_t(B * H));
    [&] {
        QKV_ISA_DISPATCH(simd::additive_scores_backward, (void)0, dq, dk, part.data(), dscores, q,
                         k, w, B, Tq, Tk, H);
    }();
    for (int64_t h = 0; h < H; ++h) dw[h] = 0.f;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) dw[h] += part[std::size_t(b * H + h)];
}

}  // namespace qkv::kernels::cpu
