// Fast cross-entropy dispatch: per-ISA bodies (cross_entropy_simd.h), else the reference.
#include "kernels/cpu/cross_entropy.h"

#include "kernels/cpu/variants.h"
#include "kernels/ref/cross_entropy.h"

namespace qkv::kernels::cpu {

void cross_entropy_forward(float* loss,
                           float* lse,
                           const float* logits,
                           const int64_t* target,
                           const float* weight,
                           int64_t N,
                           int64_t V,
                           int64_t ignore_index,
                           double label_smoothing) {
    if (N == 0 || V == 0) return;
    const float eps = float(label_smoothing);
    QKV_ISA_DISPATCH(simd::cross_entropy_forward,
                     ref::cross_entropy_forward<float>(loss, lse, logits, target, weight, N, V,
                                                       ignore_index, label_smoothing),
                     loss, lse, logits, target, weight, N, V, ignore_index, eps);
}

void cross_entropy_backward(float* dlogits,
                            const float* dloss,
                            int64_t dloss_stride,
                            const float* logits,
                            const float* lse,
                            const int64_t* target,
                            const float* weight,
                            int64_t N,
                            int64_t V,
                            int64_t ignore_index,
                            double label_smoothing) {
    if (N == 0 || V == 0) return;
    const float eps = float(label_smoothing);
    QKV_ISA_DISPATCH(simd::cross_entropy_backward,
                     ref::cross_entropy_backward<float>(dlogits, dloss, dloss_stride, logits, lse,
                                                        target, weight, N, V, ignore_index,
                                                        label_smoothing),
                     dlogits, dloss, dloss_stride, logits, lse, target, weight, N, V, ignore_index,
                     eps);
}

}  // namespace qkv::kernels::cpu
