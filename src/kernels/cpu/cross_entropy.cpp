// Fast cross-entropy dispatch: per-ISA bodies (cross_entropy_simd.h), else the reference.
#include "kernels/cpu/cross_entropy.h"

#include "kernels/cpu/variants.h"
#include "kernels/ref/cross_entropy.h"

namespace qkv::kernels::cpu {

void cross_entropy_forward(const CrossEntropyParams<float>& p) {
    if (p.N == 0 || p.V == 0) return;
    QKV_ISA_DISPATCH(simd::cross_entropy_forward, ref::cross_entropy_forward<float>(p), p);
}

void cross_entropy_backward(const CrossEntropyParams<float>& p, const CrossEntropyGradParams<float>& g) {
    if (p.N == 0 || p.V == 0) return;
    QKV_ISA_DISPATCH(simd::cross_entropy_backward, ref::cross_entropy_backward<float>(p, g), p, g);
}

}  // namespace qkv::kernels::cpu
