// Fast additive-attention scores: ISA dispatch (additive_attention_simd.h) and the fixed-order
// reduction of dw. The math is in ref/additive_attention.cpp.
#include "kernels/cpu/additive_attention.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/additive_attention_simd.h"
#include "kernels/ref/additive_attention.h"

namespace qkv::kernels::cpu {

void additive_scores_forward(float* scores, const float* q, const float* k, const float* w,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H) {
    switch (simd_isa()) {
        case Isa::avx512: return detail::additive_scores_forward_avx512(scores, q, k, w, B, Tq, Tk, H);
        case Isa::avx2: return detail::additive_scores_forward_avx2(scores, q, k, w, B, Tq, Tk, H);
        case Isa::scalar: break;
    }
    ref::additive_scores_forward<float>(scores, q, k, w, B, Tq, Tk, H);
}

void additive_scores_backward(float* dq, float* dk, float* dw, const float* dscores, const float* q,
                              const float* k, const float* w, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H) {
    const Isa isa = simd_isa();
    if (isa == Isa::scalar || !dq || !dk || !dw) {
        ref::additive_scores_backward<float>(dq, dk, dw, dscores, q, k, w, B, Tq, Tk, H);
        return;
    }
    std::vector<float> part(std::size_t(B * H));
    if (isa == Isa::avx512)
        detail::additive_scores_backward_avx512(dq, dk, part.data(), dscores, q, k, w, B, Tq, Tk, H);
    else
        detail::additive_scores_backward_avx2(dq, dk, part.data(), dscores, q, k, w, B, Tq, Tk, H);
    for (int64_t h = 0; h < H; ++h) dw[h] = 0.f;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) dw[h] += part[std::size_t(b * H + h)];
}

}  // namespace qkv::kernels::cpu
