// Cross-entropy kernels for avx2 (compiled with its ISA flags; called only after the run-time
// check).
#include "kernels/cpu/cross_entropy_simd.h"

namespace qkv::kernels::cpu::detail {

void cross_entropy_forward_avx2(float* loss,
                                float* lse,
                                const float* logits,
                                const int64_t* target,
                                const float* weight,
                                int64_t N,
                                int64_t V,
                                int64_t ignore_index,
                                float label_smoothing) {
    simd::cross_entropy_forward_t<simd::V8>(loss, lse, logits, target, weight, N, V, ignore_index,
                                            label_smoothing);
}

void cross_entropy_backward_avx2(float* dlogits,
                                 const float* dloss,
                                 int64_t dloss_stride,
                                 const float* logits,
                                 const float* lse,
                                 const int64_t* target,
                                 const float* weight,
                                 int64_t N,
                                 int64_t V,
                                 int64_t ignore_index,
                                 float label_smoothing) {
    simd::cross_entropy_backward_t<simd::V8>(dlogits, dloss, dloss_stride, logits, lse, target,
                                             weight, N, V, ignore_index, label_smoothing);
}

}  // namespace qkv::kernels::cpu::detail
