// rotary_embedding (ops/rope.h) against values written out by hand, its layouts, the position
// offset, and the properties RoPE exists for. Its float64 gradcheck is a row of
// tests/autograd/test_gradcheck_ops.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/rope.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

// float64 throughout the hand-derived checks: only the last-bit rounding of products and sums
// differs from the formulas evaluated here, so 1e-12 absolute on O(1) values.
constexpr double kTol64 = 1e-12;
// float32 against float64 on the same inputs: tables and products rounded to float32, ~1e-7
// relative of O(1) values (|x| <= 4 for N(0, 1) draws); 1e-5 absolute leaves a 10× margin.
constexpr double kTol32 = 1e-5;

RopeOptions opts(RopeLayout layout, int64_t offset = 0) {
    RopeOptions o;
    o.layout          = layout;
    o.position_offset = offset;
    return o;
}

TEST(Rope, TwoFeaturesRotateByThePosition) {
    // D = 2: θ_0 = 1, so row t is rotated by t radians; both layouts pair (0, 1).
    const std::vector<double> x = {1, 0, 1, 0, 0.5, -2, 3, 1};
    const Tensor in = from_vector(x, {1, 1, 4, 2});
    for (auto layout : {RopeLayout::rotate_half, RopeLayout::interleaved}) {
        const auto y = rotary_embedding(in, opts(layout)).to_vector<double>();
        for (int t = 0; t < 4; ++t) {
            const double a = x[size_t(2 * t)], b = x[size_t(2 * t + 1)];
            EXPECT_NEAR(y[size_t(2 * t)], a * std::cos(t) - b * std::sin(t), kTol64) << t;
            EXPECT_NEAR(y[size_t(2 * t + 1)], b * std::cos(t) + a * std::sin(t), kTol64) << t;
        }
    }
}

TEST(Rope, FourFeaturesPairAsTheLayoutSays) {
    // D = 4: θ = (1, 10000^(−1/2) = 0.01). Position 3.
    const std::vector<double> x = {1, 2, 3, 4};
    const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.03), s1 = std::sin(0.03);
    RopeOptions o = opts(RopeLayout::rotate_half, 3);
    auto y = rotary_embedding(from_vector(x, {1, 4}), o).to_vector<double>();
    // rotate_half pairs (0, 2) at θ_0 and (1, 3) at θ_1.
    EXPECT_NEAR(y[0], 1 * c0 - 3 * s0, kTol64);
    EXPECT_NEAR(y[2], 3 * c0 + 1 * s0, kTol64);
    EXPECT_NEAR(y[1], 2 * c1 - 4 * s1, kTol64);
    EXPECT_NEAR(y[3], 4 * c1 + 2 * s1, kTol64);
    o.layout = RopeLayout::interleaved;
    y        = rotary_embedding(from_vector(x, {1, 4}), o).to_vector<double>();
    // interleaved pairs (0, 1) at θ_0 and (2, 3) at θ_1.
    EXPECT_NEAR(y[0], 1 * c0 - 2 * s0, kTol64);
    EXPECT_NEAR(y[1], 2 * c0 + 1 * s0, kTol64);
    EXPECT_NEAR(y[2], 3 * c1 - 4 * s1, kTol64);
    EXPECT_NEAR(y[3], 4 * c1 + 3 * s1, kTol64);
}

TEST(Rope, LayoutsAreOnePermutationApart) {
    // interleaved(x) = P⁻¹ rotate_half(P x), P taking feature 2i to i and 2i + 1 to i + D/2.
    Generator g(5);
    const int64_t D = 8;
    const Tensor x = randn({2, 3, 5, D}, &g, 0, 1, DType::f64);
    const auto xv = x.to_vector<double>();
    std::vector<double> px(xv.size());
    for (size_t r = 0; r < xv.size() / D; ++r)
        for (int64_t i = 0; i < D / 2; ++i) {
            px[r * D + size_t(i)]         = xv[r * D + size_t(2 * i)];
            px[r * D + size_t(i + D / 2)] = xv[r * D + size_t(2 * i + 1)];
        }
    const auto a = rotary_embedding(x, opts(RopeLayout::interleaved)).to_vector<double>();
    const auto b = rotary_embedding(from_vector(px, x.shape()), opts(RopeLayout::rotate_half)).to_vector<double>();
    for (size_t r = 0; r < xv.size() / D; ++r)
        for (int64_t i = 0; i < D / 2; ++i) {
            EXPECT_NEAR(a[r * D + size_t(2 * i)], b[r * D + size_t(i)], kTol64);
            EXPECT_NEAR(a[r * D + size_t(2 * i + 1)], b[r * D + size_t(i + D / 2)], kTol64);
        }
}

TEST(Rope, OffsetEqualsSlicingALongerSequence) {
    Generator g(6);
    const Tensor x = randn({2, 2, 7, 6}, &g, 0, 1, DType::f64);
    for (auto layout : {RopeLayout::rotate_half, RopeLayout::interleaved}) {
        const Tensor full = rotary_embedding(x, opts(layout)).slice(2, 4, 7);
        const Tensor tail = rotary_embedding(x.slice(2, 4, 7), opts(layout, 4));  // also a strided input
        EXPECT_EQ(full.contiguous().to_vector<double>(), tail.to_vector<double>());
    }
}

TEST(Rope, KeepsNormsAndScoresDependOnlyOnTheDistance) {
    Generator g(7);
    const int64_t D = 16;
    const Tensor q = randn({1, D}, &g, 0, 1, DType::f64), k = randn({1, D}, &g, 0, 1, DType::f64);
    auto at = [&](const Tensor& v, int64_t pos) {
        return rotary_embedding(v, opts(RopeLayout::rotate_half, pos)).to_vector<double>();
    };
    auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
        double s = 0;
        for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
        return s;
    };
    const auto q0 = q.to_vector<double>();
    EXPECT_NEAR(dot(at(q, 1000), at(q, 1000)), dot(q0, q0), 1e-9);  // a rotation keeps the norm
    // q at m, k at n: the score depends on m − n only (positions up to 10,000: angles in float64).
    const double s = dot(at(q, 5), at(k, 2));
    EXPECT_NEAR(dot(at(q, 103), at(k, 100)), s, 1e-9);
    EXPECT_NEAR(dot(at(q, 10003), at(k, 10000)), s, 1e-9);
    EXPECT_GT(std::abs(dot(at(q, 6), at(k, 2)) - s), 1e-3);  // and does change with it
}

TEST(Rope, Float32AgreesWithFloat64OnTheRoundedInputs) {
    Generator g(8);
    const Tensor x32 = randn({2, 4, 9, 12}, &g);
    for (auto layout : {RopeLayout::rotate_half, RopeLayout::interleaved}) {
        const auto y32 = rotary_embedding(x32, opts(layout, 50)).to_vector<float>();
        const auto y64 = rotary_embedding(x32.to(DType::f64), opts(layout, 50)).to_vector<double>();
        for (size_t i = 0; i < y32.size(); ++i) ASSERT_NEAR(double(y32[i]), y64[i], kTol32) << i;
    }
}

TEST(Rope, BadArgumentsAreNamed) {
    Generator g(9);
    EXPECT_NE(error_of([&] { rotary_embedding(randn({2, 3, 5}, &g)); }).find("must be even"), std::string::npos);
    EXPECT_NE(error_of([&] { rotary_embedding(randn({4}, &g)); }).find("shape (..., T, D)"), std::string::npos);
    RopeOptions o;
    o.position_offset = -1;
    EXPECT_NE(error_of([&] { rotary_embedding(randn({2, 4}, &g), o); }).find("position_offset must be >= 0"),
              std::string::npos);
    o = {};
    o.base = 0;
    EXPECT_NE(error_of([&] { rotary_embedding(randn({2, 4}, &g), o); }).find("base must be a positive"),
              std::string::npos);
    EXPECT_NE(error_of([&] { rotary_embedding(Tensor()); }).find("undefined"), std::string::npos);
}

}  // namespace
}  // namespace qkv::test
