// The array exp the tests use to measure simd::exp (cpu/simd.h). Compiled for plain x86-64.
#include "kernels/cpu/simd.h"

#include <cmath>

#include "kernels/cpu/variants.h"

namespace qkv::kernels::cpu {

void exp_simd(float* y, const float* x, int64_t n) {
    QKV_ISA_DISPATCH(simd::exp_array, [&] {
        for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
    }(), y, x, n);
}

}  // namespace qkv::kernels::cpu
