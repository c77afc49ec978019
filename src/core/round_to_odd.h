#pragma once
// double -> float rounded to odd: the step that makes a double -> 16-bit float conversion round
// to nearest even once (core/bf16.cpp, core/fp16.cpp), not twice through float.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace qkv::detail {

/// `x` as a float, truncated toward zero with the lowest mantissa bit set (sticky) when float
/// cannot hold it exactly. float keeps at least 13 more mantissa bits than fp16 and 16 more than
/// bf16, so round-to-nearest-even of the result to either is round-to-nearest-even of x.
inline float float_round_to_odd(double x) {
    float f = float(x);
    if (std::isfinite(f) && double(f) != x) {
        if (std::fabs(double(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        u |= 1u;
        std::memcpy(&f, &u, 4);
    }
    return f;
}

}  // namespace qkv::detail
