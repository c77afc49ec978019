// Fused Adam for avx512 (compiled with its ISA flags; called only after the run-time check).
#include "kernels/cpu/adam_simd.h"

namespace qkv::kernels::cpu::detail {

void adam_step_avx512(
    float* param, const float* grad, float* m, float* v, int64_t n, const AdamScalars& s) {
    simd::adam_step_t<simd::V16>(param, grad, m, v, n, s);
}

}  // namespace qkv::kernels::cpu::detail
