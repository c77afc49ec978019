// bf16 conversions (core/bf16.h).
#include "qkv/core/bf16.h"

#include <cmath>

#include "round_to_odd.h"

namespace qkv {
namespace {
constexpr int64_t kGrain = 1 << 15;  // elements per call below which one thread converts
}

uint16_t bf16_bits(double x) { return bf16_bits(detail::float_round_to_odd(x)); }

uint16_t bf16_bits_from_int(int64_t x) {
    // Round the magnitude to 8 significant bits in integer arithmetic (RNE on the dropped bits),
    // then build the float q·2^shift, which is exact, so the final bf16_bits(float) is too.
    const uint16_t sign = x < 0 ? 0x8000 : 0;
    const uint64_t m = x < 0 ? 0 - uint64_t(x) : uint64_t(x);  // |INT64_MIN| = 2^63 fits
    if (m < 256) return uint16_t(sign | bf16_bits(float(m)));  // exact
    int shift = (63 - __builtin_clzll(m)) - 7;                   // keep the top 8 bits
    uint64_t q = m >> shift;
    const uint64_t rem = m & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    if (q == 256) q = 128, ++shift;  // carried into the next power of two
    return uint16_t(sign | bf16_bits(std::ldexp(float(q), shift)));
}

void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
}

void bf16_to_float(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void round_to_bf16(const float* src, float* dst, int64_t n) {
#pragma omp parallel for if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

}  // namespace qkv
