// Thread control and the compute threads' floating-point environment (flush subnormals to zero).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/matmul.h"

using namespace qkv;

namespace {

// Restores the thread count and the flush state a test changed.
struct RestoreFpEnv {
    int  threads = get_num_threads();
    bool flush   = flush_denormal();
    ~RestoreFpEnv() {
        set_num_threads(threads);
        set_flush_denormal(flush);
    }
};

// What every thread of a two-thread team sees: its flush state, tiny * 0.5 (a subnormal result:
// FTZ makes it 0) and subnormal + 0 (a subnormal operand: DAZ reads it as 0).
struct ThreadView {
    bool  flush = false;
    float product = -1.0f;
    float sum     = -1.0f;
};

std::vector<ThreadView> team_view() {
    std::vector<ThreadView> views(2);
    volatile float tiny      = std::numeric_limits<float>::min();  // smallest normal, 1.18e-38
    volatile float subnormal = std::numeric_limits<float>::denorm_min() * 1000.0f;
#pragma omp parallel num_threads(2)
    {
        const int t = omp_get_thread_num();
        views[t].flush   = flush_denormal();
        views[t].product = tiny * 0.5f;
        views[t].sum     = subnormal + 0.0f;
    }
    return views;
}

}  // namespace

TEST(Parallel, FlushDenormalReachesEveryWorkerThreadAndTurnsOff) {
    RestoreFpEnv restore;
    set_num_threads(2);
    set_flush_denormal(false);
    team_view();  // the worker thread exists before flushing is turned on: set_flush_denormal must reach it
    if (!set_flush_denormal(true)) GTEST_SKIP() << "no flush-to-zero control on this CPU";
    EXPECT_TRUE(flush_denormal());
    for (const ThreadView& v : team_view()) {
        EXPECT_TRUE(v.flush);
        EXPECT_EQ(v.product, 0.0f);
        EXPECT_EQ(v.sum, 0.0f);
    }
    ASSERT_TRUE(set_flush_denormal(false));
    EXPECT_FALSE(flush_denormal());
    for (const ThreadView& v : team_view()) {
        EXPECT_FALSE(v.flush);
        EXPECT_EQ(std::fpclassify(v.product), FP_SUBNORMAL);
        EXPECT_EQ(std::fpclassify(v.sum), FP_SUBNORMAL);
    }
}

// The GEMM library's own (JIT) kernels run on the same threads and obey the same register: a
// product of subnormal entries is 0 with flushing and ~K·1e-39 (a normal float) without it.
TEST(Parallel, FlushDenormalAppliesInsideTheGemmLibrary) {
    RestoreFpEnv restore;
    set_num_threads(2);
    const int64_t M = 64, K = 256, N = 64;
    Tensor a = full({M, K}, 1e-39);  // subnormal in float32
    Tensor b = full({K, N}, 1.0);
    ASSERT_EQ(std::fpclassify(a.to_vector<float>()[0]), FP_SUBNORMAL);
    if (!set_flush_denormal(true)) GTEST_SKIP() << "no flush-to-zero control on this CPU";
    for (float x : matmul(a, b).to_vector<float>()) ASSERT_EQ(x, 0.0f);
    set_flush_denormal(false);
    for (float x : matmul(a, b).to_vector<float>()) ASSERT_NEAR(x, 2.56e-37f, 1e-40f);
}

// Float64 obeys the same bits (MXCSR covers scalar and vector doubles).
TEST(Parallel, FlushDenormalCoversFloat64) {
    RestoreFpEnv restore;
    if (!set_flush_denormal(true)) GTEST_SKIP() << "no flush-to-zero control on this CPU";
    volatile double tiny = std::numeric_limits<double>::min();
    EXPECT_EQ(tiny * 0.5, 0.0);
    set_flush_denormal(false);
    EXPECT_EQ(std::fpclassify(tiny * 0.5), FP_SUBNORMAL);
}
