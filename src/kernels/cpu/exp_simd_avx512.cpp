// exp_simd for avx512 (compiled with its ISA flags; called only after the run-time check).
#include "kernels/cpu/exp_simd.h"

namespace qkv::kernels::cpu::detail {

void exp_simd_avx512(float* y, const float* x, int64_t n) {
    using V   = simd::V16;
    int64_t i = 0;
    for (; i + V::W <= n; i += V::W) V::store(y + i, simd::exp<V>(V::load(x + i)));
    if (i < n) V::store_tail(y + i, simd::exp<V>(V::load_tail(x + i, n - i, 0.0f)), n - i);
}

}  // namespace qkv::kernels::cpu::detail
