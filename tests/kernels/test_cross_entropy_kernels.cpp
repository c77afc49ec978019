// Fused cross-entropy kernels: fast vs ref<double> (2x rule) for loss, lse and dlogits on every
// SIMD path, with weights, ignore_index and label smoothing; the D2L vocabulary width (17496,
// several 4096-logit blocks); edge values; PyTorch golden values; the reference backward vs
// float64 central differences.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/cross_entropy.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

constexpr int64_t kIgnore = -100;

struct CeCase {
    int64_t N, V;
    bool weighted;
    double smoothing;
    bool scalar_grad;  // dloss_stride 0
    float lo = -6.f, hi = 6.f;
};

std::vector<int64_t> make_targets(int64_t N, int64_t V, uint64_t seed) {
    const auto r = random_floats(N, seed, 0.f, 1.f);
    std::vector<int64_t> t(N);
    for (int64_t i = 0; i < N; ++i) t[i] = std::min<int64_t>(V - 1, int64_t(r[i] * float(V)));
    if (N > 2) t[1] = kIgnore;  // one ignored row
    return t;
}

void check_case(const CeCase& c, uint64_t seed, std::vector<float> logits = {}) {
    const int64_t n = c.N * c.V;
    if (logits.empty()) logits = random_floats(n, seed, c.lo, c.hi);
    const auto target   = make_targets(c.N, c.V, seed + 1);
    const auto w        = random_floats(c.N, seed + 2, 0.f, 2.f);
    const auto g        = random_floats(c.N, seed + 3, 0.5f, 1.5f);
    const float* w32    = c.weighted ? w.data() : nullptr;
    const int64_t gs    = c.scalar_grad ? 0 : 1;
    const auto logits64 = to_double(logits), w64v = to_double(w), g64 = to_double(g);
    const double* w64 = c.weighted ? w64v.data() : nullptr;

    std::vector<float> loss32(c.N), lse32(c.N), dx32(n);
    std::vector<double> loss64(c.N), lse64(c.N), dx64(n);
    ref::cross_entropy_forward<float>({loss32.data(), lse32.data(), logits.data(), target.data(), w32, c.N, c.V, kIgnore, c.smoothing});
    ref::cross_entropy_forward<double>({loss64.data(), lse64.data(), logits64.data(), target.data(), w64, c.N, c.V, kIgnore, c.smoothing});
    // Backward from the same float lse for all three.
    const auto lse32d = to_double(lse32);
    ref::cross_entropy_backward<float>({nullptr, const_cast<float*>(lse32.data()), logits.data(), target.data(), w32, c.N, c.V, kIgnore, c.smoothing}, {dx32.data(), g.data(), gs});
    ref::cross_entropy_backward<double>({nullptr, const_cast<double*>(lse32d.data()), logits64.data(), target.data(), w64, c.N, c.V, kIgnore, c.smoothing}, {dx64.data(), g64.data(), gs});
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> loss(c.N), lse(c.N), dx(n);
        cpu::cross_entropy_forward({loss.data(), lse.data(), logits.data(), target.data(), w32, c.N, c.V, kIgnore, c.smoothing});
        cpu::cross_entropy_backward({nullptr, const_cast<float*>(lse32.data()), logits.data(), target.data(), w32, c.N, c.V, kIgnore, c.smoothing}, {dx.data(), g.data(), gs});
        const auto where = ::testing::Message()
                           << cpu::isa_name(isa) << " N=" << c.N << " V=" << c.V
                           << " weighted=" << c.weighted << " eps=" << c.smoothing
                           << " scalar_grad=" << c.scalar_grad;
        EXPECT_TRUE(within_2x(loss, loss32, loss64)) << "loss " << where;
        EXPECT_TRUE(within_2x(lse, lse32, lse64)) << "lse " << where;
        EXPECT_TRUE(within_2x(dx, dx32, dx64)) << "dlogits " << where;
        if (c.N > 2) {
            EXPECT_EQ(loss[1], 0.f) << "ignored row, " << where;
            for (int64_t v = 0; v < c.V; ++v) ASSERT_EQ(dx[c.V + v], 0.f) << where;
        }
    }
}

TEST(CrossEntropyKernels, FastMatchesRef_OddSizes) {
    uint64_t seed = 1;
    for (int64_t V : {1, 7, 17, 1000, 17496})
        for (int64_t N : {1, 7})
            for (double eps : {0.0, 0.1}) {
                check_case({N, V, false, eps, false}, seed += 4);
                check_case({N, V, true, eps, true}, seed += 4);
            }
}

TEST(CrossEntropyKernels, FastMatchesRef_D2LVocabParallel) {
    // 48 rows of the 17496-word vocabulary: five 4096-logit blocks per row, OpenMP over rows.
    check_case({48, 17496, true, 0.0, false}, 100);
    check_case({48, 17496, false, 0.1, true}, 101);
}

TEST(CrossEntropyKernels, LargeMagnitudeLogits) {
    check_case({5, 37, true, 0.1, false, -1e4f, 1e4f}, 200);
    check_case({3, 9000, false, 0.0, false, -1e4f, 1e4f}, 201);
}

TEST(CrossEntropyKernels, MaxInLaterBlock_FirstBlockMasked) {
    const int64_t N = 3, V = 9000;
    auto x          = random_floats(N * V, 300, -3.f, 3.f);
    x[0 * V + 8500] = 40.f;  // row 0: the max sits in the third block
    for (int64_t v = 0; v < 4096; ++v) x[2 * V + v] = -std::numeric_limits<float>::infinity();
    check_case({N, V, false, 0.0, false}, 301, x);  // row 2: whole first block masked
}

TEST(CrossEntropyKernels, EqualLogitsGiveLogV) {
    const int64_t N = 2, V = 17496;
    std::vector<float> x(N * V, 0.75f);
    const std::vector<int64_t> t = {5, 17495};
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        for (double eps : {0.0, 0.1}) {
            std::vector<float> loss(N), lse(N);
            cpu::cross_entropy_forward({loss.data(), lse.data(), x.data(), t.data(), nullptr, N, V, kIgnore, eps});
            for (int64_t i = 0; i < N; ++i)
                EXPECT_NEAR(loss[i], std::log(double(V)), 2e-6 * std::log(double(V)))
                    << cpu::isa_name(isa) << " eps=" << eps;
        }
    }
}

TEST(CrossEntropyKernels, InPlaceBackward) {
    const int64_t N = 4, V = 1000;
    const auto x  = random_floats(N * V, 400, -4.f, 4.f);
    const auto t  = make_targets(N, V, 401);
    const float g = 0.25f;
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> loss(N), lse(N), dx(x.size()), inplace = x;
        cpu::cross_entropy_forward({loss.data(), lse.data(), x.data(), t.data(), nullptr, N, V, kIgnore, 0.1});
        cpu::cross_entropy_backward({nullptr, const_cast<float*>(lse.data()), x.data(), t.data(), nullptr, N, V, kIgnore, 0.1}, {dx.data(), &g, 0});
        cpu::cross_entropy_backward({nullptr, const_cast<float*>(lse.data()), inplace.data(), t.data(), nullptr, N, V, kIgnore, 0.1}, {inplace.data(), &g, 0});
        EXPECT_EQ(dx, inplace) << cpu::isa_name(isa);
    }
}

TEST(CrossEntropyKernels, MatchesPyTorchGolden) {
    // PYENV_VERSION=system python3: x = [[0.5,-1.25,2,0],[3,1,-2,0.25],[0.1,0.2,0.3,0.4]] (f64),
    // t = [2, 0, -100]; F.cross_entropy(x, t, reduction='none', label_smoothing=0.1), then
    // .sum().backward() for x.grad (torch 1.13).
    const std::vector<double> x         = {0.5, -1.25, 2, 0, 3, 1, -2, 0.25, 0.1, 0.2, 0.3, 0.4};
    const std::vector<int64_t> t        = {2, 0, -100};
    const std::vector<double> want_loss = {0.5032486126036626, 0.43106000331487088, 0};
    const std::vector<double> want_grad = {0.13469355003210826,
                                           0.0027505779326804092,
                                           -0.20930316221761569,
                                           0.071859034252827053,
                                           -0.095813354070868773,
                                           0.087218209582835882,
                                           -0.019412984327380069,
                                           0.02800812881541289,
                                           0,
                                           0,
                                           0,
                                           0};
    std::vector<double> loss(3), lse(3), dx(12);
    const double one = 1.0;
    ref::cross_entropy_forward<double>({loss.data(), lse.data(), x.data(), t.data(), nullptr, 3, 4, kIgnore, 0.1});
    ref::cross_entropy_backward<double>({nullptr, const_cast<double*>(lse.data()), x.data(), t.data(), nullptr, 3, 4, kIgnore, 0.1}, {dx.data(), &one, 0});
    EXPECT_TRUE(all_close(loss, want_loss, 1e-14, 1e-13));
    EXPECT_TRUE(all_close(dx, want_grad, 1e-14, 1e-13));
    const std::vector<float> xf(x.begin(), x.end());
    std::vector<float> lossf(3), lsef(3), dxf(12);
    const float onef = 1.f;
    cpu::cross_entropy_forward({lossf.data(), lsef.data(), xf.data(), t.data(), nullptr, 3, 4, kIgnore, 0.1});
    cpu::cross_entropy_backward({nullptr, const_cast<float*>(lsef.data()), xf.data(), t.data(), nullptr, 3, 4, kIgnore, 0.1}, {dxf.data(), &onef, 0});
    EXPECT_TRUE(all_close(lossf, want_loss, kTolGoldenAtol, kTolGoldenRtol));
    EXPECT_TRUE(all_close(dxf, want_grad, kTolGoldenAtol, kTolGoldenRtol));
}

TEST(CrossEntropyKernels, RefBackwardMatchesFiniteDifferences) {
    const int64_t N = 4, V = 6;
    const auto x                 = to_double(random_floats(N * V, 500, -3.f, 3.f));
    const std::vector<int64_t> t = {3, kIgnore, 0, 5};
    const auto w                 = to_double(random_floats(N, 501, 0.f, 2.f));
    const auto g                 = to_double(random_floats(N, 502));
    for (double eps : {0.0, 0.2}) {
        auto fwd = [&](const std::vector<double>& xv) {
            std::vector<double> loss(N);
            ref::cross_entropy_forward<double>({loss.data(), nullptr, xv.data(), t.data(), w.data(), N, V, kIgnore, eps});
            return loss;
        };
        std::vector<double> loss(N), lse(N), dx(N * V);
        ref::cross_entropy_forward<double>({loss.data(), lse.data(), x.data(), t.data(), w.data(), N, V, kIgnore, eps});
        ref::cross_entropy_backward<double>({nullptr, const_cast<double*>(lse.data()), x.data(), t.data(), w.data(), N, V, kIgnore, eps}, {dx.data(), g.data(), 1});
        EXPECT_TRUE(all_close(dx, numeric_grad(fwd, x, g), kGradAtol, kGradRtol)) << "eps=" << eps;
    }
}

}  // namespace
