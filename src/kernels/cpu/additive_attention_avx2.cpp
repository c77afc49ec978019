// Additive-attention score kernels for avx2 (compiled with its ISA flags; called only after the
// run-time check).
#include "kernels/cpu/additive_attention_simd.h"

namespace qkv::kernels::cpu::detail {

using V = simd::V8;

void additive_scores_forward_avx2(float* scores, const float* q, const float* k, const float* w,
                                  int64_t B, int64_t Tq, int64_t Tk, int64_t H) {
    simd::additive_scores_forward_t<V>(scores, q, k, w, B, Tq, Tk, H);
}
void additive_scores_backward_avx2(float* dq, float* dk, float* dw_part, const float* dscores,
                                   const float* q, const float* k, const float* w, int64_t B,
                                   int64_t Tq, int64_t Tk, int64_t H) {
    simd::additive_scores_backward_t<V>(dq, dk, dw_part, dscores, q, k, w, B, Tq, Tk, H);
}

}  // namespace qkv::kernels::cpu::detail
