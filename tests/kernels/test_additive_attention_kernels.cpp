// Additive-attention score kernels: fast (every SIMD path) vs ref<double> with the 2x rule for
// the scores and dq, dk, dw, on hidden widths around the vector widths; dw does not depend on the
// thread count; the reference backward against float64 central differences.
#include <omp.h>

#include <vector>

#include "kernels/cpu/additive_attention.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/additive_attention.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

struct Case {
    int64_t B, Tq, Tk, H;
};

void check_case(const Case& c, uint64_t seed) {
    const int64_t nq = c.B * c.Tq * c.H, nk = c.B * c.Tk * c.H, ns = c.B * c.Tq * c.Tk;
    const auto q = random_floats(nq, seed, -2.f, 2.f), k = random_floats(nk, seed + 1, -2.f, 2.f);
    const auto w = random_floats(c.H, seed + 2), ds = random_floats(ns, seed + 3);
    const auto q64 = to_double(q), k64 = to_double(k), w64 = to_double(w), ds64 = to_double(ds);
    std::vector<float> s32(ns), dq32(nq), dk32(nk), dw32(c.H);
    std::vector<double> s64(ns), dq64(nq), dk64(nk), dw64(c.H);
    ref::additive_scores_forward<float>({s32.data(), q.data(), k.data(), w.data(), c.B, c.Tq, c.Tk, c.H});
    ref::additive_scores_forward<double>({s64.data(), q64.data(), k64.data(), w64.data(), c.B, c.Tq, c.Tk, c.H});
    ref::additive_scores_backward<float>({nullptr, q.data(), k.data(), w.data(), c.B, c.Tq, c.Tk, c.H}, {dq32.data(), dk32.data(), dw32.data(), ds.data()});
    ref::additive_scores_backward<double>({nullptr, q64.data(), k64.data(), w64.data(), c.B, c.Tq, c.Tk, c.H}, {dq64.data(), dk64.data(), dw64.data(), ds64.data()});
    for (Isa isa : available_isas()) {
        SCOPED_TRACE(::testing::Message() << cpu::isa_name(isa) << " B=" << c.B << " Tq=" << c.Tq
                                          << " Tk=" << c.Tk << " H=" << c.H);
        IsaGuard guard(isa);
        std::vector<float> s(ns), dq(nq), dk(nk), dw(c.H);
        cpu::additive_scores_forward({s.data(), q.data(), k.data(), w.data(), c.B, c.Tq, c.Tk, c.H});
        EXPECT_TRUE(within_2x(s, s32, s64));
        cpu::additive_scores_backward({nullptr, q.data(), k.data(), w.data(), c.B, c.Tq, c.Tk, c.H}, {dq.data(), dk.data(), dw.data(), ds.data()});
        EXPECT_TRUE(within_2x(dq, dq32, dq64));
        EXPECT_TRUE(within_2x(dk, dk32, dk64));
        EXPECT_TRUE(within_2x(dw, dw32, dw64));
    }
}

TEST(AdditiveAttentionKernels, FastMatchesRef_OddSizes) {
    uint64_t seed = 5;
    for (Case c : {Case{1, 1, 1, 1}, {2, 1, 9, 7}, {3, 1, 5, 8}, {2, 3, 4, 9}, {5, 2, 7, 31}, {4, 1, 9, 256},
                   {64, 1, 9, 256}})
        check_case(c, seed += 13);
}

TEST(AdditiveAttentionKernels, DwIndependentOfThreadCount) {
    const int64_t B = 64, Tq = 1, Tk = 9, H = 64;
    const auto q = random_floats(B * Tq * H, 1), k = random_floats(B * Tk * H, 2), w = random_floats(H, 3),
               ds = random_floats(B * Tq * Tk, 4);
    std::vector<float> dq(B * Tq * H), dk(B * Tk * H), dw1(H), dw2(H);
    const int old = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu::additive_scores_backward({nullptr, q.data(), k.data(), w.data(), B, Tq, Tk, H}, {dq.data(), dk.data(), dw1.data(), ds.data()});
    omp_set_num_threads(2);
    cpu::additive_scores_backward({nullptr, q.data(), k.data(), w.data(), B, Tq, Tk, H}, {dq.data(), dk.data(), dw2.data(), ds.data()});
    omp_set_num_threads(old);
    EXPECT_EQ(dw1, dw2);
}

TEST(AdditiveAttentionKernels, RefBackwardMatchesCentralDifferences) {
    const int64_t B = 2, Tq = 2, Tk = 3, H = 4;
    const auto q = to_double(random_floats(B * Tq * H, 7)), k = to_double(random_floats(B * Tk * H, 8)),
               w = to_double(random_floats(H, 9)), ds = to_double(random_floats(B * Tq * Tk, 10));
    std::vector<double> dq(q.size()), dk(k.size()), dw(w.size());
    ref::additive_scores_backward<double>({nullptr, q.data(), k.data(), w.data(), B, Tq, Tk, H}, {dq.data(), dk.data(), dw.data(), ds.data()});
    auto scores = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& ww) {
        std::vector<double> s(size_t(B * Tq * Tk));
        ref::additive_scores_forward<double>({s.data(), qq.data(), kk.data(), ww.data(), B, Tq, Tk, H});
        return s;
    };
    const auto nq = numeric_grad([&](const std::vector<double>& x) { return scores(x, k, w); }, q, ds);
    const auto nk = numeric_grad([&](const std::vector<double>& x) { return scores(q, x, w); }, k, ds);
    const auto nw = numeric_grad([&](const std::vector<double>& x) { return scores(q, k, x); }, w, ds);
    EXPECT_TRUE(all_close(dq, nq, kGradAtol, kGradRtol));
    EXPECT_TRUE(all_close(dk, nk, kGradAtol, kGradRtol));
    EXPECT_TRUE(all_close(dw, nw, kGradAtol, kGradRtol));
}

}  // namespace
