// float16 conversions: core/fp16.h's scalar fp16_bits / fp16_to_float against a plain reference
// (the nearest of the 63,488 finite halves found by value in double, ties to the even pattern,
// overflow at 65520 as IEEE's RNE says), exhaustively over all 65,536 half patterns for widening
// and round trips, over every half's rounding boundaries (each midpoint and its float neighbours)
// and random floats for narrowing; and the vector conversions of cpu/fp16.h (F16C on the avx2 and
// avx512 tiers) bit for bit against the scalar ones on every tier this CPU has.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/kernel_test_util.h"
#include "qkv/core/fp16.h"
#include "qkv/core/parallel.h"

namespace {

using qkv::test::available_isas;
using qkv::test::IsaGuard;
namespace cpu = qkv::kernels::cpu;

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

/// The value of a finite half pattern from its fields (IEEE 754 binary16), in double.
double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
    return (h & 0x8000) ? -mag : mag;
}

/// The plain reference: RNE of a finite or infinite, non-NaN x to half by searching the sorted
/// positive finite halves (patterns 0 .. 0x7bff are increasing in value), ties to the even pattern;
/// |x| >= 65520 (the midpoint above 65504, whose even neighbour is 2^16 = inf) gives inf.
uint16_t reference_half(double x) {
    static const std::vector<double> pos = [] {
        std::vector<double> v;
        for (uint32_t h = 0; h <= 0x7bff; ++h) v.push_back(half_value(uint16_t(h)));
        return v;
    }();
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    if (a >= 65520.0) return uint16_t(sign | 0x7c00);
    const auto it = std::lower_bound(pos.begin(), pos.end(), a);  // first >= a
    if (it == pos.end()) return uint16_t(sign | 0x7bff);             // (65504, 65520): down to 65504
    uint16_t hi = uint16_t(it - pos.begin()), lo = hi == 0 ? 0 : uint16_t(hi - 1);
    if (hi == 0 || pos[hi] == a) return uint16_t(sign | hi);
    const double dlo = a - pos[lo], dhi = pos[hi] - a;
    const uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return uint16_t(sign | pick);
}

/// Every float next to a half rounding boundary: each positive half, each midpoint between
/// neighbours (and 65520), one and two float ulps either side of them, both signs; plus zeros,
/// infinities, float subnormals, and random floats over the whole exponent range.
std::vector<float> boundary_floats() {
    std::vector<float> out;
    auto around = [&](float c) {
        uint32_t u = bits_of(c);
        for (int d = -2; d <= 2; ++d) {
            const float f = from_bits(uint32_t(int64_t(u) + d));
            if (!std::isnan(f)) {
                out.push_back(f);
                out.push_back(-f);
            }
        }
    };
    for (uint32_t h = 1; h <= 0x7bff; ++h) {
        around(float(half_value(uint16_t(h))));
        around(float((half_value(uint16_t(h - 1)) + half_value(uint16_t(h))) / 2));  // exact in float
    }
    around(65520.0f);
    around(std::ldexp(1.0f, -25));  // the midpoint between 0 and the smallest subnormal
    for (float f : {0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::min(), std::numeric_limits<float>::max()}) {
        out.push_back(f);
        out.push_back(-f);
    }
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) {
        const float f = from_bits(uint32_t(rng()));
        if (!std::isnan(f)) out.push_back(f);
    }
    return out;
}

TEST(Fp16, HandCheckedValues) {
    using qkv::fp16_bits;
    EXPECT_EQ(fp16_bits(1.0f), 0x3c00);
    EXPECT_EQ(fp16_bits(-2.0f), 0xc000);
    EXPECT_EQ(fp16_bits(65504.0f), 0x7bff);                         // the largest finite half
    EXPECT_EQ(fp16_bits(65519.99f), 0x7bff);                        // below the midpoint: down
    EXPECT_EQ(fp16_bits(65520.0f), 0x7c00);                         // the midpoint: to even = inf
    EXPECT_EQ(fp16_bits(-1e5f), 0xfc00);
    EXPECT_EQ(fp16_bits(std::ldexp(1.0f, -24)), 0x0001);            // the smallest subnormal
    EXPECT_EQ(fp16_bits(std::ldexp(1.0f, -25)), 0x0000);            // tie between 0 and it: even 0
    EXPECT_EQ(fp16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(fp16_bits(3 * std::ldexp(1.0f, -25)), 0x0002);        // tie 1 / 2: even 2
    EXPECT_EQ(fp16_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // tie 0x3ff / 0x400
    EXPECT_EQ(fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);     // tie, even below: down
    EXPECT_EQ(fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02); // tie, odd below: up
    EXPECT_EQ(fp16_bits(-0.0f), 0x8000);
    EXPECT_EQ(fp16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
    const uint16_t nan = fp16_bits(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
    // A NaN whose payload sits only in the low 13 bits must not become inf.
    EXPECT_TRUE(std::isnan(qkv::round_to_fp16(from_bits(0x7f800001u))));
    EXPECT_EQ(qkv::fp16_to_float(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(qkv::fp16_to_float(0x7bff), 65504.0f);
    EXPECT_EQ(qkv::fp16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(qkv::kFp16Max, 65504.0f);
}

// Widening is exact for every pattern (the fields' value), and narrowing it again gives the same
// pattern for every non-NaN half; a NaN stays a NaN of the same sign.
TEST(Fp16, AllPatternsWidenExactlyAndRoundTrip) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = qkv::fp16_to_float(uint16_t(h));
        const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
        if (nan) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << h;
            const uint16_t back = qkv::fp16_bits(f);
            ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
            ASSERT_EQ(back | 0x0200, h | 0x0200) << std::hex << h << ": the payload changed beyond the quiet bit";
            continue;
        }
        if (((h >> 10) & 0x1f) == 0x1f) ASSERT_TRUE(std::isinf(f)) << std::hex << h;
        else ASSERT_EQ(double(f), half_value(uint16_t(h))) << std::hex << h;
        ASSERT_EQ(qkv::fp16_bits(f), h) << std::hex << h;
        ASSERT_EQ(qkv::fp16_bits(double(f)), h) << std::hex << h;
    }
}

TEST(Fp16, NarrowingMatchesThePlainReference) {
    for (float f : boundary_floats()) {
        ASSERT_EQ(qkv::fp16_bits(f), reference_half(f)) << f << " bits " << std::hex << bits_of(f);
    }
}

// double -> half rounds once: values just past a half midpoint, which a float in between would
// round onto the midpoint (then ties-to-even would go the wrong way).
TEST(Fp16, DoubleRoundsOnce) {
    for (uint32_t h = 0; h < 0x7bff; h += 37) {
        const double mid = (half_value(uint16_t(h)) + half_value(uint16_t(h + 1))) / 2;
        for (double x : {std::nextafter(mid, 0.0), std::nextafter(mid, 1e9), mid, mid * (1 + 1e-12), mid * (1 - 1e-12)})
            ASSERT_EQ(qkv::fp16_bits(x), reference_half(x)) << x;
    }
    EXPECT_EQ(qkv::fp16_bits(65520.0 - 1e-9), 0x7bff);
    EXPECT_EQ(qkv::fp16_bits(1e300), 0x7c00);
    EXPECT_EQ(qkv::fp16_bits_from_int(2049), 0x6800);   // tie 2048 / 2050: even 2048
    EXPECT_EQ(qkv::fp16_bits_from_int(-65519), 0xfbff);
    EXPECT_EQ(qkv::fp16_bits_from_int(65520), 0x7c00);
    EXPECT_EQ(qkv::fp16_bits_from_int(INT64_MIN), 0xfc00);
}

// The vector conversions (F16C) give the scalar reference's bits on every tier, every length (the
// tails go through the scalar code), for all 65,536 patterns and the boundary floats (NaN
// payloads too), with the process's flush-to-zero mode on and off.
TEST(Fp16Kernels, EveryTierMatchesTheScalarBits) {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = uint16_t(h);
    std::vector<float> floats = boundary_floats();
    for (uint32_t payload : {0x7f800001u, 0x7fc00000u, 0xff812345u, 0x7fbfffffu, 0xffffffffu})
        floats.push_back(from_bits(payload));
    const bool flushing = qkv::flush_denormal();
    for (const bool flush : {false, true})
    for (const cpu::Isa isa : available_isas()) {
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + (flush ? ", flush-to-zero" : ""));
        qkv::set_flush_denormal(flush);  // this thread and its OpenMP workers
        IsaGuard g(isa);
        std::vector<float> wide(all.size());
        cpu::convert_from_fp16(all.data(), wide.data(), int64_t(all.size()));
        for (size_t i = 0; i < all.size(); ++i)
            ASSERT_EQ(bits_of(wide[i]), bits_of(qkv::fp16_to_float(all[i]))) << std::hex << i;
        std::vector<uint16_t> narrow(floats.size());
        cpu::convert_to_fp16(floats.data(), narrow.data(), int64_t(floats.size()));
        for (size_t i = 0; i < floats.size(); ++i)
            ASSERT_EQ(narrow[i], qkv::fp16_bits(floats[i])) << floats[i] << " bits " << std::hex << bits_of(floats[i]);
        for (int64_t n : {0, 1, 7, 8, 15, 17, 33}) {  // short lengths: vectors and tails
            std::vector<uint16_t> o(size_t(n) + 1, 0xabcd);
            cpu::convert_to_fp16(floats.data() + 3, o.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(o[size_t(i)], qkv::fp16_bits(floats[size_t(i) + 3]));
            EXPECT_EQ(o[size_t(n)], 0xabcd) << "wrote past n = " << n;
        }
    }
    qkv::set_flush_denormal(flushing);
}

}  // namespace
