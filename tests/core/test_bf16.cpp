// bf16 conversions (core/bf16.h): round to nearest even with hand-derived bit patterns, NaN/inf,
// overflow, denormals; the double conversion rounds once (checked against exact rational rounding
// on cases where double -> float -> bf16 would round twice).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "qkv/core/bf16.h"

namespace {

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(Bf16, RoundToNearestEvenByHand) {
    EXPECT_EQ(qkv::bf16_bits(1.0f), 0x3f80);
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x3f808000u)), 0x3f80);  // tie, even below: down
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x3f818000u)), 0x3f82);  // tie, odd below: up
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x3f808001u)), 0x3f81);  // above the tie: up
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x3f807fffu)), 0x3f80);  // below the tie: down
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x3fffffffu)), 0x4000);  // carry into the exponent
    EXPECT_EQ(qkv::bf16_bits(-2.5f), 0xc020);
    EXPECT_EQ(qkv::round_to_bf16(3.14159265f), 3.140625f);      // 1.1001001b × 2
    EXPECT_EQ(qkv::bf16_to_float(0x3f80), 1.0f);
}

TEST(Bf16, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(qkv::bf16_bits(inf), 0x7f80);
    EXPECT_EQ(qkv::bf16_bits(-inf), 0xff80);
    EXPECT_EQ(qkv::bf16_bits(0.0f), 0x0000);
    EXPECT_EQ(qkv::bf16_bits(-0.0f), 0x8000);
    // A NaN whose payload sits only in the low 16 bits must not become inf; it stays a quiet NaN.
    EXPECT_TRUE(std::isnan(qkv::round_to_bf16(from_bits(0x7f800001u))));
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x7f800001u)) & 0x0040, 0x0040);
    EXPECT_EQ(qkv::bf16_bits(from_bits(0xff800001u)) >> 15, 1);  // sign kept
    // The largest bf16 is 0x7f7f = 3.3895e38; fp32's max rounds up to inf (RNE), as the hardware does.
    EXPECT_EQ(qkv::bf16_to_float(0x7f7f), from_bits(0x7f7f0000u));
    EXPECT_EQ(qkv::bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x7f7f7fffu)), 0x7f7f);
    // Denormals round like any other value.
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x00018000u)), 0x0002);
    EXPECT_EQ(qkv::bf16_bits(from_bits(0x00008000u)), 0x0000);
}

TEST(Bf16, DoubleRoundsOnce) {
    // x = 1 + 2^-8 + 2^-30: above the tie between 1 and 1 + 2^-7, so RNE gives 1 + 2^-7. Via float
    // (RNE to 1 + 2^-8, an exact tie) and then bf16 (tie to even) it would give 1.
    const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
    EXPECT_EQ(qkv::bf16_bits(qkv::round_to_bf16(float(x))), 0x3f80);  // the double rounding
    EXPECT_EQ(qkv::bf16_bits(x), 0x3f81);
    const double y = 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -30);  // below the tie
    EXPECT_EQ(qkv::bf16_bits(y), 0x3f80);
    EXPECT_EQ(qkv::bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3f80);  // an exact tie: even
    EXPECT_EQ(qkv::bf16_bits(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40))), 0xbf81);
    EXPECT_EQ(qkv::bf16_bits(1e300), 0x7f80);
    EXPECT_EQ(qkv::bf16_bits(1e-300), 0x0000);
    EXPECT_TRUE(std::isnan(qkv::bf16_to_float(qkv::bf16_bits(std::nan("")))));
    // Every double equal to a float converts as that float does.
    for (float f : {0.1f, -7.77f, 1e-40f, 65504.0f, 3.0e38f}) EXPECT_EQ(qkv::bf16_bits(double(f)), qkv::bf16_bits(f)) << f;
}

TEST(Bf16, BulkConversionsMatchTheScalarOnes) {
    std::vector<float> x(100000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * std::ldexp(1.0f, int(i % 60) - 30);
    std::vector<uint16_t> b(x.size());
    std::vector<float> back(x.size()), r(x.size());
    qkv::float_to_bf16(x.data(), b.data(), int64_t(x.size()));
    qkv::bf16_to_float(b.data(), back.data(), int64_t(x.size()));
    qkv::round_to_bf16(x.data(), r.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(b[i], qkv::bf16_bits(x[i])) << i;
        ASSERT_EQ(back[i], r[i]) << i;
        // |round(x) - x| <= u·|x| for normal x (u = 2^-8).
        if (std::fabs(x[i]) > 1e-37f) {
            ASSERT_LE(std::fabs(double(r[i]) - x[i]), qkv::kBf16UnitRoundoff * std::fabs(x[i])) << i;
        }
    }
}

}  // namespace
