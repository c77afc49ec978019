#pragma once
// bfloat16 (bf16): the upper 16 bits of an IEEE-754 binary32 — 1 sign bit, 8 exponent bits (fp32's
// range), 7 stored mantissa bits (relative spacing 2^-7, unit roundoff u = 2^-8). Stored as
// uint16_t bit patterns. Conversions from float round to nearest, ties to even (RNE), as
// `vcvtneps2bf16` (AVX-512-BF16), oneDNN's reorders and PyTorch's `tensor.bfloat16()` do; NaN stays
// NaN (made quiet, sign kept), ±inf stays ±inf, finite values above the largest bf16
// (3.3895e38) round to ±inf as RNE says. Source: Intel BF16 whitepaper (document 338302-001US);
// Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training" (arXiv:1905.12322).
#include <cstdint>
#include <cstring>

namespace qkv {

/// One bfloat16 value as its bit pattern: the element type of DType::bf16 tensors
/// (Tensor::data<bfloat16>(), to_vector<bfloat16>(), from_vector<bfloat16>()). Holds no arithmetic:
/// convert with bf16_to_float / bf16_bits. == compares bit patterns (so NaN == the same NaN, and
/// -0 != +0), which is what storage round trips check.
struct bfloat16 {
    uint16_t bits;
    bool operator==(const bfloat16&) const = default;
};

/// Unit roundoff of bf16 (RNE): |round_to_bf16(x) - x| <= kBf16UnitRoundoff·|x| for normal x.
constexpr double kBf16UnitRoundoff = 1.0 / 256.0;

/// The bf16 bit pattern nearest to `x` (RNE; NaN -> quiet NaN with x's sign).
inline uint16_t bf16_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: quiet, keep sign
    u += 0x7fffu + ((u >> 16) & 1u);  // ties go to the even upper half; carries roll into the exponent
    return uint16_t(u >> 16);
}

/// The float whose upper 16 bits are `b` (exact: every bf16 is a float).
inline float bf16_to_float(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

/// `x` rounded to the nearest bf16 (RNE), as a float.
inline float round_to_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

/// The bf16 nearest to the double `x`, rounded once (not via float's RNE, which could round twice):
/// the float step rounds to odd, which keeps the later RNE to bf16 correct.
uint16_t bf16_bits(double x);

/// The bf16 nearest to the integer `x` (RNE, rounded once from the exact integer: exact for
/// |x| <= 256, and for larger x whose binary digits past the 8th are all zero). |x| up to 2^63 is
/// far inside bf16's range, so no overflow. (A separate name: an int argument would make
/// bf16_bits(float) / bf16_bits(double) ambiguous.)
uint16_t bf16_bits_from_int(int64_t x);

/// dst[i] = bf16_bits(src[i]) for i < n (OpenMP threads above a size threshold).
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);
/// dst[i] = bf16_to_float(src[i]) for i < n.
void bf16_to_float(const uint16_t* src, float* dst, int64_t n);
/// dst[i] = round_to_bf16(src[i]) for i < n (dst may equal src).
void round_to_bf16(const float* src, float* dst, int64_t n);

}  // namespace qkv
