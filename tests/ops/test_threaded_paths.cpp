// The threaded paths of the data-movement and reduction ops a training step runs between its
// GEMMs (strided copies, leading-dim sums, row gathers and scatters, fills, the gradient norm and
// scale over a parameter list). Each case is large enough to take the threaded branch, is checked
// exactly against a plain loop written here, and gives the same bits on 1 and on 2 threads. Also
// the loop helper detail::parallel_for (no OpenMP team for small or nested work).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/parallel_for.h"
#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/optim_step.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/optim/optimizer.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

struct RestoreThreads {
    int threads = get_num_threads();
    ~RestoreThreads() { set_num_threads(threads); }
};

/// f evaluated on 1 thread and on 2 threads; both results returned (for a bit-exact comparison).
template <class F>
std::pair<Tensor, Tensor> on_one_and_two_threads(F f) {
    RestoreThreads restore;
    set_num_threads(1);
    Tensor one = f();
    set_num_threads(2);
    Tensor two = f();
    return {one, two};
}

void expect_same_bits(const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.shape(), b.shape());
    ASSERT_EQ(a.dtype(), b.dtype());
    const Tensor ac = a.contiguous(), bc = b.contiguous();
    EXPECT_EQ(std::memcmp(ac.raw_data(), bc.raw_data(), size_t(ac.numel() * dtype_size(ac.dtype()))), 0);
}

}  // namespace

TEST(ThreadedPaths, PermutedCopyEqualsIndexedLoop) {
    // The head split of attention: (B, T, H, D) -> (B, H, T, D), 8*33*4*40 = 42,240 elements.
    Generator gen(1);
    const Tensor x = randn({8, 33, 4, 40}, &gen);
    const auto [one, two] = on_one_and_two_threads([&] { return x.permute({0, 2, 1, 3}).contiguous(); });
    expect_same_bits(one, two);
    const float* px = x.data<float>();
    const float* py = two.data<float>();
    int64_t wrong = 0;
    for (int64_t b = 0; b < 8; ++b)
        for (int64_t h = 0; h < 4; ++h)
            for (int64_t t = 0; t < 33; ++t)
                for (int64_t d = 0; d < 40; ++d)
                    wrong += py[((b * 4 + h) * 33 + t) * 40 + d] != px[((b * 33 + t) * 4 + h) * 40 + d];
    EXPECT_EQ(wrong, 0);
}

TEST(ThreadedPaths, TransposedCopyWithStridedInnerDimEqualsIndexedLoop) {
    // The innermost source stride is not 1 here (the general per-element branch).
    Generator gen(2);
    const Tensor x = randn({3, 150, 170}, &gen);
    const auto [one, two] = on_one_and_two_threads([&] { return x.transpose(1, 2).contiguous(); });
    expect_same_bits(one, two);
    int64_t wrong = 0;
    for (int64_t b = 0; b < 3; ++b)
        for (int64_t i = 0; i < 170; ++i)
            for (int64_t j = 0; j < 150; ++j)
                wrong += two.data<float>()[(b * 170 + i) * 150 + j] != x.data<float>()[(b * 150 + j) * 170 + i];
    EXPECT_EQ(wrong, 0);
}

TEST(ThreadedPaths, PermutedCopyToBf16RoundsEachElementOnce) {
    Generator gen(3);
    const Tensor x = randn({6, 50, 4, 32}, &gen);
    const Tensor y = x.permute({0, 2, 1, 3}).to(DType::bf16).contiguous();
    const Tensor y1 = [&] {
        RestoreThreads r;
        set_num_threads(1);
        return x.permute({0, 2, 1, 3}).to(DType::bf16).contiguous();
    }();
    expect_same_bits(y, y1);
    const uint16_t* py = static_cast<const uint16_t*>(y.raw_data());
    int64_t wrong = 0;
    for (int64_t b = 0; b < 6; ++b)
        for (int64_t h = 0; h < 4; ++h)
            for (int64_t t = 0; t < 50; ++t)
                for (int64_t d = 0; d < 32; ++d)
                    wrong += py[((b * 4 + h) * 50 + t) * 32 + d] !=
                             bf16_bits(x.data<float>()[((b * 50 + t) * 4 + h) * 32 + d]);
    EXPECT_EQ(wrong, 0);
}

TEST(ThreadedPaths, CopyIntoAPermutedViewWritesEveryElement) {
    // A non-contiguous destination keeps the serial walk; the result must still be exact.
    Generator gen(4);
    const Tensor src = randn({8, 4, 33, 40}, &gen);
    Tensor dst = zeros({8, 33, 4, 40});
    Tensor view = dst.permute({0, 2, 1, 3});
    copy_(view, src);
    expect_same_bits(view.contiguous(), src);
}

TEST(ThreadedPaths, LeadingDimSumEqualsOrderedDoubleSum) {
    // A bias gradient: (4, 300, 70) summed over dims 0 and 1; each column in row order in double.
    Generator gen(5);
    const Tensor x = randn({4, 300, 70}, &gen, 0.0, 3.0);
    const auto [one, two] = on_one_and_two_threads([&] { return sum(x, {0, 1}, false); });
    expect_same_bits(one, two);
    ASSERT_EQ(two.shape(), (Shape{70}));
    for (int64_t c = 0; c < 70; ++c) {
        double acc = 0;
        for (int64_t r = 0; r < 1200; ++r) acc += double(x.data<float>()[r * 70 + c]);
        EXPECT_EQ(two.data<float>()[c], float(acc)) << "column " << c;
    }
    const Tensor kept = sum(x, {0, 1}, true);
    EXPECT_EQ(kept.shape(), (Shape{1, 1, 70}));
    expect_same_bits(kept.reshape({70}), two);
}

TEST(ThreadedPaths, LeadingDimSumInFloat64) {
    Generator gen(6);
    const Tensor x = randn({2000, 33}, &gen, 0.0, 1.0, DType::f64);
    const Tensor s = sum(x, {0}, false);
    for (int64_t c = 0; c < 33; ++c) {
        double acc = 0;
        for (int64_t r = 0; r < 2000; ++r) acc += x.data<double>()[r * 33 + c];
        EXPECT_EQ(s.data<double>()[c], acc) << "column " << c;
    }
}

TEST(ThreadedPaths, IndexSelectRowsForwardAndBackwardWithRepeats) {
    // 3,000 picks of 250 rows of 130 (repeats accumulate in pick order in the backward).
    Generator gen(7);
    const Tensor x0 = randn({250, 130}, &gen);
    std::vector<int64_t> idx(3000);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 7919 + 13) % 250);
    const Tensor index = from_vector(idx, {3000});
    const Tensor g = randn({3000, 130}, &gen);
    auto run = [&] {
        Tensor x = x0.detach().clone().requires_grad_(true);
        Tensor y = index_select(x, 0, index);
        y.backward(g);
        return std::pair<Tensor, Tensor>{y.detach(), x.grad()};
    };
    std::pair<Tensor, Tensor> r1, r2;
    {
        RestoreThreads restore;
        set_num_threads(1);
        r1 = run();
        set_num_threads(2);
        r2 = run();
    }
    expect_same_bits(r1.first, r2.first);
    expect_same_bits(r1.second, r2.second);
    std::vector<float> ref(250 * 130, 0.0f);
    int64_t wrong_rows = 0;
    for (size_t i = 0; i < idx.size(); ++i)
        for (int64_t j = 0; j < 130; ++j) {
            ref[size_t(idx[i] * 130 + j)] += g.data<float>()[int64_t(i) * 130 + j];
            wrong_rows += r2.first.data<float>()[int64_t(i) * 130 + j] != x0.data<float>()[idx[i] * 130 + j];
        }
    EXPECT_EQ(wrong_rows, 0);
    int64_t wrong = 0;
    for (size_t k = 0; k < ref.size(); ++k) wrong += r2.second.data<float>()[k] != ref[k];
    EXPECT_EQ(wrong, 0);
}

TEST(ThreadedPaths, IndexSelectRowsBackwardWithDistinctIndices) {
    // 700 distinct picks of 1,000 rows (the pad-free path's gathers): each picked row's gradient
    // is 0 + g (so a -0 in g becomes +0, as the accumulating path gives), the others 0.
    Generator gen(12);
    std::vector<int64_t> idx(700);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 389 + 5) % 1000);
    const Tensor index = from_vector(idx, {700});
    Tensor g = randn({700, 96}, &gen);
    g.data<float>()[3 * 96 + 7] = -0.0f;
    auto run = [&] {
        Tensor x = zeros({1000, 96}).requires_grad_(true);
        index_select(x, 0, index).backward(g);
        return x.grad();
    };
    const auto [one, two] = on_one_and_two_threads(run);
    expect_same_bits(one, two);
    std::vector<float> ref(1000 * 96, 0.0f);
    for (size_t i = 0; i < idx.size(); ++i)
        for (int64_t j = 0; j < 96; ++j) ref[size_t(idx[i] * 96 + j)] += g.data<float>()[int64_t(i) * 96 + j];
    EXPECT_EQ(std::memcmp(two.data<float>(), ref.data(), ref.size() * sizeof(float)), 0);
    EXPECT_FALSE(std::signbit(two.data<float>()[idx[3] * 96 + 7]));
}

TEST(ThreadedPaths, ScatterRowsPlacesEveryRowAndZeroesTheRest) {
    Generator gen(8);
    const Tensor src = randn({700, 256}, &gen);
    std::vector<int64_t> idx(700);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 389) % 1000);  // distinct: gcd(389, 1000) = 1
    const Tensor index = from_vector(idx, {700});
    const auto [one, two] = on_one_and_two_threads([&] { return scatter_rows(src, index, 1000); });
    expect_same_bits(one, two);
    std::vector<float> ref(1000 * 256, 0.0f);
    for (size_t i = 0; i < idx.size(); ++i)
        std::memcpy(&ref[size_t(idx[i] * 256)], src.data<float>() + i * 256, 256 * sizeof(float));
    EXPECT_EQ(std::memcmp(two.data<float>(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(ThreadedPaths, LargeFillsHoldTheValueEverywhere) {
    const int64_t n = 100003;
    const Tensor f = full({n}, -2.5);
    const Tensor b = full({n}, 1.0 / 3.0, DType::bf16);
    const Tensor i = full({n}, 7.0, DType::i64);
    const Tensor m = full({n}, 0.25, DType::b8);
    int64_t wrong = 0;
    for (int64_t k = 0; k < n; ++k) {
        wrong += f.data<float>()[k] != -2.5f;
        wrong += static_cast<const uint16_t*>(b.raw_data())[k] != bf16_bits(1.0 / 3.0);
        wrong += i.data<int64_t>()[k] != 7;
        wrong += static_cast<const uint8_t*>(m.raw_data())[k] != 1;
    }
    EXPECT_EQ(wrong, 0);
}

TEST(ThreadedPaths, SumOfSquaresOverAListMatchesFloat64AndIgnoresTheThreadCount) {
    Generator gen(9);
    // Sizes around the 16,384-element chunk, an empty tensor, an undefined one, float64 and a
    // non-contiguous view.
    std::vector<Tensor> ts{randn({10}, &gen),          randn({70001}, &gen, 0.0, 2.0), randn({16384}, &gen),
                           zeros({0}),                 Tensor(),                       randn({300, 57}, &gen, 0.0, 1.0, DType::f64),
                           randn({90, 400}, &gen).transpose(0, 1)};
    double ref = 0;
    for (const Tensor& t : ts) {
        if (!t.defined()) continue;
        const Tensor c = t.to(DType::f64).contiguous();
        for (int64_t k = 0; k < c.numel(); ++k) ref += c.data<double>()[k] * c.data<double>()[k];
    }
    double s1 = 0, s2 = 0;
    {
        RestoreThreads restore;
        set_num_threads(1);
        s1 = sum_of_squares(ts);
        set_num_threads(2);
        s2 = sum_of_squares(ts);
    }
    EXPECT_EQ(s1, s2);  // fixed chunks, added in list order
    // Both sums are of the same float64 products in different orders: about n * eps(double)
    // relative apart at most (n = 243,395 terms, all positive).
    const double kReorderTolerance = 243395 * 1.2e-16;
    EXPECT_NEAR(s2 / ref, 1.0, kReorderTolerance);
    test::expect_error_containing([&] { sum_of_squares(std::vector<Tensor>{zeros({3}), zeros({3}, DType::i64)}); },
                                  "sum_of_squares: tensor 1 is int64");
}

TEST(ThreadedPaths, ScaleOverAListMultipliesEveryElement) {
    Generator gen(10);
    std::vector<Tensor> ts{randn({40000}, &gen), randn({17}, &gen), Tensor(), randn({100, 300}, &gen, 0.0, 1.0, DType::f64)};
    std::vector<Tensor> before;
    for (const Tensor& t : ts) before.push_back(t.defined() ? t.clone() : Tensor());
    scale_(ts, 0.375);
    int64_t wrong = 0;
    for (size_t k = 0; k < ts.size(); ++k) {
        if (!ts[k].defined()) continue;
        for (int64_t i = 0; i < ts[k].numel(); ++i) {
            if (ts[k].dtype() == DType::f32) wrong += ts[k].data<float>()[i] != before[k].data<float>()[i] * 0.375f;
            else wrong += ts[k].data<double>()[i] != before[k].data<double>()[i] * 0.375;
        }
    }
    EXPECT_EQ(wrong, 0);
    test::expect_error_containing([&] { scale_(std::vector<Tensor>{zeros({3}), zeros({4, 5}).transpose(0, 1)}, 2.0); },
                                  "scale_: tensor 1 must be contiguous");
}

TEST(ThreadedPaths, ClipGradNormScalesEveryGradientOfAManyTensorList) {
    // 40 parameters of 3,000 elements: the norm and the scaled gradients against float64.
    Generator gen(11);
    std::vector<Tensor> params;
    double ref = 0;
    for (int k = 0; k < 40; ++k) {
        Tensor p = zeros({3000}).requires_grad_(true);
        const Tensor g = randn({3000}, &gen);
        p.set_grad(g.clone());
        for (int64_t i = 0; i < 3000; ++i) ref += double(g.data<float>()[i]) * double(g.data<float>()[i]);
        params.push_back(p);
    }
    std::vector<Tensor> before;
    for (const Tensor& p : params) before.push_back(p.grad().clone());
    const double norm = optim::clip_grad_norm(params, 1.0);
    EXPECT_NEAR(norm, std::sqrt(ref), std::sqrt(ref) * 1e-12);
    const float factor = float(1.0 / norm);
    int64_t wrong = 0;
    for (size_t k = 0; k < params.size(); ++k)
        for (int64_t i = 0; i < 3000; ++i)
            wrong += params[k].grad().data<float>()[i] != before[k].data<float>()[i] * factor;
    EXPECT_EQ(wrong, 0);
}

// detail::parallel_for (core/parallel_for.h): work below the caller's threshold, or nested in a
// parallel region, runs on the calling thread without an OpenMP team (`#pragma omp parallel if
// (false)` would still start a team of one: omp_get_level() 1 inside, and a futex wake per call).
TEST(ThreadedPaths, ParallelForVisitsEveryIndexOnceOnTwoThreads) {
    RestoreThreads restore;
    set_num_threads(2);
    const int64_t n = 100003;
    std::vector<int> seen(size_t(n), 0);
    std::vector<int> team(size_t(n), 0);
    detail::parallel_for(n, true, [&](int64_t i) {
        ++seen[size_t(i)];
        team[size_t(i)] = omp_get_num_threads();
    });
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[size_t(i)], 1) << "index " << i;
        ASSERT_EQ(team[size_t(i)], 2) << "index " << i;
    }
}

TEST(ThreadedPaths, ParallelForStartsNoTeamForSmallWorkOrOneThread) {
    RestoreThreads restore;
    for (const auto& [threads, worth] : std::vector<std::pair<int, bool>>{{2, false}, {1, true}, {1, false}}) {
        set_num_threads(threads);
        std::vector<int> level(64, -1), seen(64, 0);
        detail::parallel_for(64, worth, [&](int64_t i) {
            ++seen[size_t(i)];
            level[size_t(i)] = omp_get_level();
        });
        for (int i = 0; i < 64; ++i) {
            EXPECT_EQ(seen[size_t(i)], 1) << threads << " threads, worth " << worth << ", index " << i;
            EXPECT_EQ(level[size_t(i)], 0) << threads << " threads, worth " << worth << ": a team was started";
        }
    }
}

TEST(ThreadedPaths, ParallelForNestedInARegionRunsOnTheCallingThread) {
    RestoreThreads restore;
    set_num_threads(2);
    const int64_t n = 50000;
    std::vector<std::vector<int>> seen(2, std::vector<int>(size_t(n), 0));
    std::vector<int> bad(2, 0);
#pragma omp parallel num_threads(2)
    {
        const int t = omp_get_thread_num();
        detail::parallel_for(n, true, [&](int64_t i) {
            ++seen[size_t(t)][size_t(i)];
            if (omp_get_level() != 1 || omp_get_thread_num() != t) bad[size_t(t)] = 1;
        });
    }
    for (int t = 0; t < 2; ++t) {
        if (seen[size_t(t)][0] == 0) continue;  // the runtime gave the region one thread
        EXPECT_EQ(bad[size_t(t)], 0) << "thread " << t << " ran its loop in a nested team";
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[size_t(t)][size_t(i)], 1) << "thread " << t << ", index " << i;
    }
}
