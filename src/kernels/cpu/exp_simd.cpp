// Run-time ISA selection for the fast kernels, and the array exp used to test the SIMD exp.
#include "kernels/cpu/exp_simd.h"

#include <cmath>

namespace qkv::kernels::cpu {
namespace {

Isa detect_isa() {
    __builtin_cpu_init();
    // The *_avx2.cpp files are compiled with AVX2 + FMA, the *_avx512.cpp files with F, BW, VL,
    // DQ, AVX2 and FMA; the AVX-512 tier may also call AVX2 bodies (dropout).
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return Isa::avx512;
    return avx2 ? Isa::avx2 : Isa::scalar;
}

Isa g_max_isa = Isa::avx512;  // cap set by set_max_isa (tests, benchmarks)

}  // namespace

Isa cpu_isa() {
    static const Isa isa = detect_isa();
    return isa;
}

Isa simd_isa() { return cpu_isa() < g_max_isa ? cpu_isa() : g_max_isa; }

Isa set_max_isa(Isa cap) {
    const Isa old = g_max_isa;
    g_max_isa     = cap;
    return old;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::avx512:
            return "avx512";
        case Isa::avx2:
            return "avx2";
        case Isa::scalar:
            break;
    }
    return "scalar";
}

void exp_simd(float* y, const float* x, int64_t n) {
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::exp_simd_avx512(y, x, n);
        case Isa::avx2:
            return detail::exp_simd_avx2(y, x, n);
        case Isa::scalar:
            break;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace qkv::kernels::cpu
