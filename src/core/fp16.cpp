// float16 conversions (core/fp16.h).
#include "qkv/core/fp16.h"

#include <cmath>

#include "round_to_odd.h"

namespace qkv {
namespace {
constexpr int64_t kGrain = 1 << 15;  // elements per call below which one thread converts
}

uint16_t fp16_bits(double x) { return fp16_bits(detail::float_round_to_odd(x)); }

uint16_t fp16_bits_from_int(int64_t x) {
    // |x| < 2^24 is exact in float; larger magnitudes are far above 65520 and give ±inf either way.
    return fp16_bits(float(x));
}

void float_to_fp16(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_bits(src[i]);
}

void fp16_to_float(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

}  // namespace qkv
