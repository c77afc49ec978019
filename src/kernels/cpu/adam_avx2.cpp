// Fused Adam for avx2 (compiled with its ISA flags; called only after the run-time check).
#include "kernels/cpu/adam_simd.h"

namespace qkv::kernels::cpu::detail {

void adam_step_avx2(
    float* param, const float* grad, float* m, float* v, int64_t n, const AdamScalars& s) {
    simd::adam_step_t<simd::V8>(param, grad, m, v, n, s);
}

}  // namespace qkv::kernels::cpu::detail
