// Embedding kernels: gather and deterministic scatter-add, bit-identical to ref<float> on any
// thread count (repeated ids included); the reference backward vs float64 central differences.
#include <omp.h>

#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/embedding.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;

std::vector<int64_t> make_ids(int64_t n, int64_t V, uint64_t seed) {
    const auto r = random_floats(n, seed, 0.f, 1.f);
    std::vector<int64_t> ids(n);
    // Skewed towards small ids so that most rows repeat (like <pad>, <bos> and "." in D2L).
    for (int64_t i = 0; i < n; ++i) ids[i] = std::min<int64_t>(V - 1, int64_t(r[i] * r[i] * V));
    return ids;
}

TEST(EmbeddingKernels, ForwardGathersRows_OddSizes) {
    uint64_t seed = 1;
    for (int64_t V : {1, 17, 17496})
        for (int64_t C : {1, 7, 17, 256})
            for (int64_t n : {1, 7, 1000}) {
                const auto w   = random_floats(V * C, seed++);
                const auto ids = make_ids(n, V, seed++);
                std::vector<float> out(n * C), want(n * C);
                cpu::embedding_forward(out.data(), w.data(), ids.data(), n, C);
                ref::embedding_forward<float>(want.data(), w.data(), ids.data(), n, C);
                ASSERT_EQ(out, want) << "V=" << V << " C=" << C << " n=" << n;
            }
}

TEST(EmbeddingKernels, BackwardBitIdenticalToRef_AnyThreadCount) {
    uint64_t seed   = 100;
    const int saved = omp_get_max_threads();
    for (int64_t V : {1, 17, 17496})
        for (int64_t C : {1, 7, 17, 256})
            for (int64_t n : {1, 7, 1152}) {
                const auto dout = random_floats(n * C, seed++);
                const auto ids  = make_ids(n, V, seed++);
                std::vector<float> want(V * C);
                ref::embedding_backward<float>(want.data(), dout.data(), ids.data(), n, V, C);
                for (int threads : {1, 2, 3}) {
                    omp_set_num_threads(threads);
                    std::vector<float> dw(V * C, 123.f);  // overwritten, not accumulated
                    cpu::embedding_backward(dw.data(), dout.data(), ids.data(), n, V, C);
                    ASSERT_EQ(dw, want)
                        << "V=" << V << " C=" << C << " n=" << n << " threads=" << threads;
                }
            }
    omp_set_num_threads(saved);
}

TEST(EmbeddingKernels, BackwardSumsRepeatedIds) {
    const std::vector<int64_t> ids = {2, 0, 2, 2};
    const std::vector<float> dout  = {1, 2, 3, 4, 5, 6, 7, 8};  // (4, 2)
    std::vector<float> dw(3 * 2);
    cpu::embedding_backward(dw.data(), dout.data(), ids.data(), 4, 3, 2);
    EXPECT_EQ(dw, (std::vector<float>{3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8}));
}

TEST(EmbeddingKernels, RefBackwardMatchesFiniteDifferences) {
    const int64_t V = 5, C = 3;
    const std::vector<int64_t> ids = {4, 1, 4, 0, 4};
    const int64_t n                = int64_t(ids.size());
    const auto w                   = to_double(random_floats(V * C, 7));
    const auto dout                = to_double(random_floats(n * C, 8));
    auto fwd                       = [&](const std::vector<double>& wv) {
        std::vector<double> out(n * C);
        ref::embedding_forward<double>(out.data(), wv.data(), ids.data(), n, C);
        return out;
    };
    std::vector<double> dw(V * C);
    ref::embedding_backward<double>(dw.data(), dout.data(), ids.data(), n, V, C);
    EXPECT_TRUE(all_close(dw, numeric_grad(fwd, w, dout), kGradAtol, kGradRtol));
}

}  // namespace
