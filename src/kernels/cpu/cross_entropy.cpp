// Fast cross-entropy dispatch: AVX-512 / AVX2 bodies (cross_entropy_simd.h), else the reference.
#include "kernels/cpu/cross_entropy.h"

#include "kernels/cpu/cross_entropy_simd.h"
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
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::cross_entropy_forward_avx512(loss, lse, logits, target, weight, N, V,
                                                        ignore_index, eps);
        case Isa::avx2:
            return detail::cross_entropy_forward_avx2(loss, lse, logits, target, weight, N, V,
                                                      ignore_index, eps);
        case Isa::scalar:
            break;
    }
    ref::cross_entropy_forward<float>(loss, lse, logits, target, weight, N, V, ignore_index,
                                      label_smoothing);
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
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::cross_entropy_backward_avx512(dlogits, dloss, dloss_stride, logits, lse,
                                                         target, weight, N, V, ignore_index, eps);
        case Isa::avx2:
            return detail::cross_entropy_backward_avx2(dlogits, dloss, dloss_stride, logits, lse,
                                                       target, weight, N, V, ignore_index, eps);
        case Isa::scalar:
            break;
    }
    ref::cross_entropy_backward<float>(dlogits, dloss, dloss_stride, logits, lse, target, weight, N,
                                       V, ignore_index, label_smoothing);
}

}  // namespace qkv::kernels::cpu
