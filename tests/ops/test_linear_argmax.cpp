// linear_argmax (greedy decoding's fused output layer) against its definition,
// argmax(linear(x, W, b), -1): exact ties, banned ids, NaN, block edges, threads, errors; and
// argmax_allowed, the rule it shares with EncoderDecoder::greedy_next's default.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <string>

#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

// Small integers in [-3, 3]: with K <= 64 every product and partial sum is an exact float, so
// the fused path and linear + argmax see identical logits and must agree id for id (no
// tolerance), ties included.
Tensor small_ints(const Shape& shape, uint64_t seed) {
    std::vector<float> v = random_floats(shape_numel(shape), seed, -3.5f, 3.5f);
    for (float& x : v) x = std::round(x);
    return from_vector(v, shape);
}

std::vector<int64_t> reference(const Tensor& x, const Tensor& w, const Tensor& b,
                               const std::vector<char>& banned) {
    const Tensor y = linear(x, w, b);
    const int64_t V = y.shape().back(), rows = y.numel() / V;
    const std::vector<double> lv = y.to(DType::f64).contiguous().to_vector<double>();
    std::vector<int64_t> out(size_t(rows), -1);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t best = -1;
        for (int64_t j = 0; j < V; ++j) {
            if (!banned.empty() && banned[size_t(j)]) continue;
            const double v = lv[size_t(r * V + j)], m = best < 0 ? 0.0 : lv[size_t(r * V + best)];
            if (best < 0 || (v != v && m == m) || v > m) best = j;
        }
        out[size_t(r)] = best;
    }
    return out;
}

template <class F>
void expect_throw_contains(F f, const std::string& text) {
    try {
        f();
        ADD_FAILURE() << "no exception; expected one containing '" << text << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
}

}  // namespace

// Shapes around the column-block edges (64..1024 ids per block, chosen from the row count) and
// row counts from 1 to past a block's budget; exact integer logits with many ties.
TEST(LinearArgmax, EqualsArgmaxOfLinearExactlyWithTies) {
    const int64_t shapes[][3] = {{1, 8, 5},    {3, 16, 64},   {7, 32, 65},  {250, 64, 1000},
                                 {300, 16, 4099}, {2, 1, 17},  {129, 64, 2049}};
    uint64_t seed = 10;
    for (auto& s : shapes) {
        const int64_t M = s[0], K = s[1], N = s[2];
        const Tensor x = small_ints({M, K}, ++seed), w = small_ints({N, K}, ++seed),
                     b = small_ints({N}, ++seed);
        const std::vector<int64_t> want = reference(x, w, b, {});
        EXPECT_EQ(linear_argmax(x, w, b).to_vector<int64_t>(), want) << M << "x" << K << "x" << N;
        EXPECT_EQ(linear_argmax(x, w).to_vector<int64_t>(), reference(x, w, Tensor(), {}))
            << "no bias, " << M << "x" << K << "x" << N;
    }
}

TEST(LinearArgmax, TiesGoToTheFirstIdAcrossBlocks) {
    // Every logit equal: the answer is id 0, whichever block or thread sees it first.
    const Tensor x = ones({5, 4}), w = ones({3000, 4}), b = zeros({3000});
    for (int64_t id : linear_argmax(x, w, b).to_vector<int64_t>()) EXPECT_EQ(id, 0);
    // The maximum repeated in the last block and in an early one: the early one wins.
    std::vector<float> bv(3000, 0.0f);
    bv[2999] = 1.0f;
    bv[700] = 1.0f;
    for (int64_t id : linear_argmax(x, w, from_vector(bv, {3000})).to_vector<int64_t>()) EXPECT_EQ(id, 700);
}

TEST(LinearArgmax, RandomFloatsAgreeWhereTheMaximumIsClear) {
    // Random fp32 data: the fused blocks may round differently from one big GEMM, so rows whose
    // top two logits (in f64) are closer than kGap may legitimately flip; every other row must
    // match, and the chosen logit is never more than kGap below the maximum.
    // kGap: K = 256 products of N(0,1) values, fp32 accumulation error ~ sqrt(K)·|x||w|·2^-24
    // ≈ 16·16·6e-8 ≈ 2e-5; 1e-3 leaves a wide margin.
    constexpr double kGap = 1e-3;
    Generator g(3);
    const int64_t M = 250, K = 256, N = 5000;
    const Tensor x = randn({M, K}, &g), w = randn({N, K}, &g), b = randn({N}, &g);
    const std::vector<int64_t> got = linear_argmax(x, w, b).to_vector<int64_t>();
    const Tensor y = linear(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64));
    const std::vector<double> lv = y.to_vector<double>();
    int clear = 0;
    for (int64_t r = 0; r < M; ++r) {
        const double* row = lv.data() + r * N;
        int64_t best = 0;
        for (int64_t j = 1; j < N; ++j)
            if (row[j] > row[best]) best = j;
        double second = -1e300;
        for (int64_t j = 0; j < N; ++j)
            if (j != best) second = std::max(second, row[j]);
        EXPECT_LE(row[best] - row[got[size_t(r)]], kGap) << "row " << r;
        if (row[best] - second > kGap) {
            ++clear;
            EXPECT_EQ(got[size_t(r)], best) << "row " << r;
        }
    }
    EXPECT_GT(clear, M * 9 / 10);  // the check above really ran on most rows
}

TEST(LinearArgmax, BannedIdsAreSkipped) {
    const Tensor x = small_ints({40, 8}, 1), w = small_ints({700, 8}, 2), b = small_ints({700}, 3);
    std::vector<char> banned(700, 0);
    const std::vector<int64_t> plain = linear_argmax(x, w, b).to_vector<int64_t>();
    for (int64_t id : plain) banned[size_t(id)] = 1;  // ban every row's winner
    const std::vector<int64_t> got = linear_argmax(x, w, b, banned).to_vector<int64_t>();
    EXPECT_EQ(got, reference(x, w, b, banned));
    EXPECT_EQ(got, argmax_allowed(linear(x, w, b), banned).to_vector<int64_t>());  // the shared rule
    for (size_t r = 0; r < got.size(); ++r) EXPECT_FALSE(banned[size_t(got[r])]) << "row " << r;
    // Only id 699 allowed: every row gets it. Every id banned: -1.
    std::vector<char> all_but_last(700, 1);
    all_but_last[699] = 0;
    for (int64_t id : linear_argmax(x, w, b, all_but_last).to_vector<int64_t>()) EXPECT_EQ(id, 699);
    for (int64_t id : linear_argmax(x, w, b, std::vector<char>(700, 1)).to_vector<int64_t>()) EXPECT_EQ(id, -1);
}

TEST(LinearArgmax, NaNCountsAsTheLargestLikeArgmax) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor x = small_ints({3, 4}, 5);
    const Tensor w = small_ints({900, 4}, 6);
    std::vector<float> bv(900, 0.0f);
    bv[650] = nan;  // row-independent NaN at id 650
    bv[820] = nan;
    const Tensor b = from_vector(bv, {900});
    const std::vector<int64_t> got = linear_argmax(x, w, b).to_vector<int64_t>();
    EXPECT_EQ(got, argmax(linear(x, w, b), -1).to_vector<int64_t>());
    for (int64_t id : got) EXPECT_EQ(id, 650);
    // A NaN input row makes the whole row NaN: id 0, as argmax.
    std::vector<float> xv = x.to_vector<float>();
    xv[4] = nan;
    const Tensor xn = from_vector(xv, {3, 4});
    EXPECT_EQ(linear_argmax(xn, w).to_vector<int64_t>(), argmax(linear(xn, w), -1).to_vector<int64_t>());
    EXPECT_EQ(linear_argmax(xn, w).to_vector<int64_t>()[1], 0);
}

TEST(LinearArgmax, SameAnswerOnOneAndTwoThreadsAndOnTheReferencePath) {
    const Tensor x = small_ints({64, 32}, 7), w = small_ints({3001, 32}, 8), b = small_ints({3001}, 9);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<int64_t> one = linear_argmax(x, w, b).to_vector<int64_t>();
    omp_set_num_threads(2);
    const std::vector<int64_t> two = linear_argmax(x, w, b).to_vector<int64_t>();
    omp_set_num_threads(saved);
    EXPECT_EQ(one, two);
    set_kernel_mode(KernelMode::reference);
    const std::vector<int64_t> ref = linear_argmax(x, w, b).to_vector<int64_t>();
    set_kernel_mode(KernelMode::fast);
    EXPECT_EQ(one, ref);
    // float64 takes the reference path and agrees on exact data.
    EXPECT_EQ(linear_argmax(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64)).to_vector<int64_t>(), one);
}

TEST(LinearArgmax, LeadingDimsAreKept) {
    const Tensor x = small_ints({2, 3, 8}, 11), w = small_ints({100, 8}, 12);
    const Tensor got = linear_argmax(x, w);
    EXPECT_EQ(got.shape(), Shape({2, 3}));
    EXPECT_EQ(got.dtype(), DType::i64);
    EXPECT_EQ(got.to_vector<int64_t>(), argmax(linear(x, w), -1).to_vector<int64_t>());
}

TEST(LinearArgmax, BadArgumentsThrowNamingThem) {
    const Tensor x = ones({2, 4}), w = ones({10, 4}), b = ones({10});
    expect_throw_contains([&] { linear_argmax(ones({2, 5}), w, b); }, "does not match weight");
    expect_throw_contains([&] { linear_argmax(x, w, ones({9})); }, "bias of shape");
    expect_throw_contains([&] { linear_argmax(x, w, b, std::vector<char>(3, 0)); }, "banned has 3 flags");
    expect_throw_contains([&] { linear_argmax(x.to(DType::f64), w, b); }, "dtypes differ");
    expect_throw_contains([&] { linear_argmax(x, ones({0, 4})); }, "no output rows");
    expect_throw_contains([&] { linear_argmax(x, ones({4})); }, "weight must be (out, in)");
}

TEST(ArgmaxAllowed, FirstMaximumNaNFirstBannedSkipped) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const Tensor a = from_vector<float>({1, 3, 3, 2,  //
                                         nan, 5, nan, 1,  //
                                         2, 2, 2, 2},
                                        {3, 4});
    EXPECT_EQ(argmax_allowed(a, {}).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
    EXPECT_EQ(argmax_allowed(a, {}).to_vector<int64_t>(), argmax(a, -1).to_vector<int64_t>());
    EXPECT_EQ(argmax_allowed(a, {0, 1, 0, 0}).to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 0}));
    EXPECT_EQ(argmax_allowed(a, {1, 0, 0, 0}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 1}));
    EXPECT_EQ(argmax_allowed(a, {1, 0, 1, 0}).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
    EXPECT_EQ(argmax_allowed(a, {1, 1, 1, 1}).to_vector<int64_t>(), (std::vector<int64_t>{-1, -1, -1}));
    // leading dims are kept; f64 and i64 follow the same rule
    const Tensor c = small_ints({2, 3, 50}, 7);
    std::vector<char> banned(50, 0);
    banned[3] = banned[17] = 1;
    const Tensor got = argmax_allowed(c, banned);
    EXPECT_EQ(got.shape(), Shape({2, 3}));
    EXPECT_EQ(got.dtype(), DType::i64);
    EXPECT_EQ(got.to_vector<int64_t>(), argmax_allowed(c.to(DType::f64), banned).to_vector<int64_t>());
    EXPECT_EQ(got.to_vector<int64_t>(), argmax_allowed(c.to(DType::i64), banned).to_vector<int64_t>());
    EXPECT_EQ(argmax_allowed(c, {}).to_vector<int64_t>(), argmax(c, -1).to_vector<int64_t>());
    expect_throw_contains([&] { argmax_allowed(a, {0, 0, 0}); }, "banned has 3 flags, expected 0 or 4");
    expect_throw_contains([&] { argmax_allowed(ones({2, 0}), {}); }, "empty dim");
    expect_throw_contains([&] { argmax_allowed(Tensor(), {}); }, "at least 1 dim");
}
