#pragma once
// float16 (fp16, IEEE 754 binary16): 1 sign bit, 5 exponent bits (bias 15), 10 stored mantissa
// bits (relative spacing 2^-10, unit roundoff u = 2^-11). Largest finite value 65504; smallest
// normal 2^-14 (6.1035e-5); smallest subnormal 2^-24 (5.96e-8). Stored as uint16_t bit patterns.
// Conversions from float round to nearest, ties to even (RNE), as F16C's `vcvtps2ph` with
// imm8 = 0, numpy's float16 and PyTorch's `tensor.half()` do: values at or above 65520 (halfway
// between 65504 and the next step, 65536, whose RNE goes to the even 65536 = inf) become ±inf,
// values below 2^-14 become subnormals (rounded once; below 2^-25 they become ±0), NaN stays NaN
// (made quiet, sign and the top 9 payload bits kept, as vcvtps2ph does). Every float16 is exactly
// a float, so widening is exact (a signalling NaN comes back quiet, as vcvtph2ps gives it).
// Source: IEEE 754-2008 §3.6 (binary16); Intel SDM, VCVTPS2PH / VCVTPH2PS.
#include <cstdint>
#include <cstring>

namespace qkv {

/// One float16 value as its bit pattern: the element type of DType::f16 tensors
/// (Tensor::data<float16>(), to_vector<float16>(), from_vector<float16>()). Holds no arithmetic:
/// convert with fp16_to_float / fp16_bits. == compares bit patterns (NaN == the same NaN, -0 != +0).
struct float16 {
    uint16_t bits;
    bool operator==(const float16&) const = default;
};

/// Unit roundoff of fp16 (RNE): |round_to_fp16(x) - x| <= kFp16UnitRoundoff·|x| for x in the
/// normal range [2^-14, 65504].
constexpr double kFp16UnitRoundoff = 1.0 / 2048.0;
/// The largest finite float16.
constexpr float kFp16Max = 65504.0f;

/// The float16 bit pattern nearest to `x` (RNE; the header's overflow, subnormal and NaN rules).
/// Integer arithmetic on the bit pattern: independent of the MXCSR (flush-to-zero) and of the
/// rounding mode, so it is the reference the vector conversions are tested against.
inline uint16_t fp16_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a    = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (and inf): inf
    if (a >= 0x38800000u) {                                  // >= 2^-14: a normal half
        uint32_t r = a - 0x38000000u;                         // exponent bias 127 -> 15
        r += 0xfffu + ((r >> 13) & 1u);                       // RNE on the 13 dropped bits
        return uint16_t(sign | (r >> 13));                    // a carry rolls into the exponent
    }
    // Subnormal half (or zero): the result is round(|x| / 2^-24). |x| = m · 2^(e - 150) with the
    // implicit bit in m, so |x| / 2^-24 = m >> (126 - e), rounded to nearest even.
    const int e = int(a >> 23);
    if (e < 102) return sign;  // |x| < 2^-25 (float subnormals too): rounds to ±0
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const int shift  = 126 - e;  // 14 .. 24
    uint32_t q       = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal: right
    return uint16_t(sign | q);
}

/// The float equal to the float16 `h` (exact; a signalling NaN is made quiet).
inline float fp16_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // inf, or NaN made quiet
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);  // bias 15 -> 127
    } else if (m == 0) {
        u = sign;
    } else {  // subnormal half m · 2^-24: normalise (a normal float)
        const int lead = 31 - __builtin_clz(m);  // 0 .. 9
        u = sign | (uint32_t(lead + 103) << 23) | ((m << (23 - lead)) & 0x7fffffu);
    }
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

/// `x` rounded to the nearest float16 (RNE), as a float.
inline float round_to_fp16(float x) { return fp16_to_float(fp16_bits(x)); }

/// The float16 nearest to the double `x`, rounded once (via a round-to-odd float, as bf16_bits
/// does: float has 13 more mantissa bits than half, so no double rounding).
uint16_t fp16_bits(double x);

/// The float16 nearest to the integer `x` (RNE, rounded once: exact for |x| <= 2048; |x| >= 65520
/// gives ±inf). (A separate name: an int argument would make the float/double overloads ambiguous.)
uint16_t fp16_bits_from_int(int64_t x);

/// dst[i] = fp16_bits(src[i]) for i < n (scalar reference loop; OpenMP threads above a size
/// threshold). The fast vector conversion is kernels/cpu (F16C), used by copy_ and attention.
void float_to_fp16(const float* src, uint16_t* dst, int64_t n);
/// dst[i] = fp16_to_float(src[i]) for i < n (scalar reference loop).
void fp16_to_float(const uint16_t* src, float* dst, int64_t n);

}  // namespace qkv
