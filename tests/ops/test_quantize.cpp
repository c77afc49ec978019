// int8 linear layers (ops/quantize.h): the quantization by hand (per-channel scale, round half away
// from zero, all-zero rows); linear_int8 against the exact integer products of the same quantized
// operands (int64 in the test, then the two scales in float64: the kernel may differ only by its
// fp32 dequantization, at most 3 roundings); against the fp32 layer within the bound the
// quantization itself allows (derived below); the refusals; nn::Linear::quantize_int8.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/autograd/grad_mode.h"
#include "qkv/nn/layers.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/reduce.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

TEST(Quantize, WeightPerChannelByHand) {
    const Tensor w = from_vector(std::vector<float>{1.0f, -0.5f, 0.25f, 0, 0, 0, -2.0f, 2.0f, 1.0f}, {3, 3});
    const Int8Weight q = quantize_int8(w);
    ASSERT_EQ(q.scale.size(), 3u);
    EXPECT_EQ(q.scale[0], 1.0f / 127.0f);
    EXPECT_EQ(q.scale[1], 0.0f);                   // an all-zero row
    EXPECT_EQ(q.scale[2], 2.0f / 127.0f);
    EXPECT_EQ(std::vector<int8_t>(q.q.begin(), q.q.begin() + 3), (std::vector<int8_t>{127, -64, 32}));  // -63.5 -> -64
    EXPECT_EQ(std::vector<int8_t>(q.q.begin() + 3, q.q.begin() + 6), (std::vector<int8_t>{0, 0, 0}));
    EXPECT_EQ(std::vector<int8_t>(q.q.begin() + 6, q.q.end()), (std::vector<int8_t>{-127, 127, 64}));    // 63.5 -> 64
    std::vector<float> bad = {1, std::numeric_limits<float>::quiet_NaN()};
    try {
        quantize_int8(from_vector(bad, {1, 2}));
        FAIL() << "NaN weight accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("weight[0, 1] is nan"), std::string::npos) << e.what();
    }
}

void check_exact(int64_t N, int64_t K, int64_t O);

TEST(Quantize, LinearInt8IsTheExactIntegerProductDequantized) {
    check_exact(37, 70, 45);
    check_exact(600, 64, 80);  // N·K and N·O above the threading threshold: the parallel loops
}

TEST(Quantize, ArgmaxEqualsTheArgmaxOfTheOutput) {
    NoGradGuard ng;
    for (int64_t N : {7, 700}) {
        const int64_t K = 48, O = 90;
        const Tensor x = from_vector(random_floats(N * K, 11), {N, K});
        const Tensor w = from_vector(random_floats(O * K, 12), {O, K});
        const Tensor b = from_vector(random_floats(O, 13), {O});
        const Int8Weight q = quantize_int8(w);
        std::vector<char> banned(size_t(O), 0);
        for (int64_t o = 0; o < O; o += 3) banned[size_t(o)] = 1;
        for (const auto& ban : {std::vector<char>{}, banned})
            EXPECT_EQ(linear_int8_argmax(x, q, b, ban).to_vector<int64_t>(),
                      argmax_allowed(linear_int8(x, q, b), ban).to_vector<int64_t>())
                << N << " banned " << ban.size();
        EXPECT_EQ(linear_int8_argmax(x, q, b, std::vector<char>(size_t(O), 1)).to_vector<int64_t>(),
                  std::vector<int64_t>(size_t(N), -1));
    }
}

void check_exact(int64_t N, int64_t K, int64_t O) {
    NoGradGuard ng;
    const Tensor x = from_vector(random_floats(N * K, 1, -3.f, 3.f), {N, K});
    const Tensor w = from_vector(random_floats(O * K, 2), {O, K});
    const Tensor b = from_vector(random_floats(O, 3), {O});
    const Int8Weight q = quantize_int8(w);
    const auto y = linear_int8(x, q, b).to_vector<float>();
    const auto xv = x.to_vector<float>();
    const auto bv = b.to_vector<float>();
    for (int64_t n = 0; n < N; ++n) {
        float m = 0;
        for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(xv[size_t(n * K + k)]));
        const float sx = m / 127.0f, inv = 1.0f / sx;
        std::vector<int64_t> xq(K);
        for (int64_t k = 0; k < K; ++k)  // the documented rule: fp32 product, ties away from zero
            xq[size_t(k)] = std::clamp(std::lround(xv[size_t(n * K + k)] * inv), -127L, 127L);
        for (int64_t o = 0; o < O; ++o) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += xq[size_t(k)] * int64_t(q.q[size_t(o * K + k)]);
            const double want = double(acc) * double(sx) * double(q.scale[size_t(o)]) + double(bv[size_t(o)]);
            // fp32: acc·sx, ·scale, +bias: three roundings of values no larger than |want| + |b| + |acc·sx·s|.
            const double mag = std::fabs(double(acc) * double(sx) * double(q.scale[size_t(o)])) + std::fabs(bv[size_t(o)]);
            ASSERT_NEAR(y[size_t(n * O + o)], want, 3 * 0x1p-24 * 2 * mag + 1e-30) << n << " " << o;
        }
    }
}

TEST(Quantize, LinearInt8StaysWithinTheQuantizationBound) {
    // |x̃·w̃ - x·w| <= Σ_k (|x_k|·sw/2 + |w_k|·sx/2 + sx·sw/4) per output (each rounding moves a
    // value by at most half its scale), plus the fp32 rounding of both sums (1e-5 relative).
    NoGradGuard ng;
    const int64_t N = 20, K = 64, O = 30;
    const Tensor x = from_vector(random_floats(N * K, 4), {N, K});
    const Tensor w = from_vector(random_floats(O * K, 5), {O, K});
    const Int8Weight q = quantize_int8(w);
    const auto yq = linear_int8(x, q, Tensor()).to_vector<float>();
    const auto yf = linear(x, w, Tensor()).to_vector<float>();
    const auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
    double worst = 0;
    for (int64_t n = 0; n < N; ++n) {
        float m = 0;
        for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(xv[size_t(n * K + k)]));
        const double sx = m / 127.0;
        for (int64_t o = 0; o < O; ++o) {
            const double sw = q.scale[size_t(o)];
            double bound = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = std::fabs(xv[size_t(n * K + k)]), c = std::fabs(wv[size_t(o * K + k)]);
                bound += a * sw / 2 + c * sx / 2 + sx * sw / 4;
                mag += a * c;
            }
            const double err = std::fabs(double(yq[size_t(n * O + o)]) - yf[size_t(n * O + o)]);
            ASSERT_LE(err, bound + 1e-5 * mag) << n << " " << o;
            worst = std::max(worst, err / bound);
        }
    }
    EXPECT_GT(worst, 0.0) << "int8 gave the fp32 result exactly: no quantization happened";
}

TEST(Quantize, RefusalsAndZeroRows) {
    const Int8Weight q = quantize_int8(from_vector(random_floats(4 * 3, 6), {4, 3}));
    {
        NoGradGuard ng;
        const auto y = linear_int8(zeros({2, 3}), q, Tensor()).to_vector<float>();
        EXPECT_EQ(y, std::vector<float>(8, 0.0f));  // an all-zero row: scale 0, output 0
        EXPECT_THROW(linear_int8(zeros({2, 5}), q, Tensor()), Error);
        std::vector<float> inf = {1, std::numeric_limits<float>::infinity(), 0};
        EXPECT_THROW(linear_int8(from_vector(inf, {1, 3}), q, Tensor()), Error);
    }
    Tensor xg = from_vector(random_floats(3, 7), {1, 3}).requires_grad_(true);
    try {
        linear_int8(xg, q, Tensor());
        FAIL() << "a gradient-tracking input was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("int8 layers are for inference"), std::string::npos) << e.what();
    }
}

TEST(Quantize, LinearModuleUsesItsInt8WeightUntilDropped) {
    NoGradGuard ng;
    nn::Linear l(16, 8);
    const Tensor x = from_vector(random_floats(5 * 16, 8), {5, 16});
    const auto fp32 = l.forward(x).to_vector<float>();
    EXPECT_EQ(nn::quantize_linears_int8(l), 1);
    ASSERT_TRUE(l.is_int8());
    EXPECT_EQ(l.forward(x).to_vector<float>(), linear_int8(x, quantize_int8(l.weight), l.bias).to_vector<float>());
    EXPECT_NE(l.forward(x).to_vector<float>(), fp32);
    l.drop_int8();
    EXPECT_EQ(l.forward(x).to_vector<float>(), fp32);
}

}  // namespace
