// Dropout kernels against the Philox formula itself (keep_i iff uniform01(bits(seed, 0,
// offset + i)) >= p), exactly, for odd sizes and unaligned offsets on every SIMD path; the same
// mask and output on every path for one (seed, offset); thread-count independence; regenerated vs
// stored masks in the backward; the keep rate.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/dropout.h"
#include "kernels/kernel_test_util.h"
#include "qkv/core/philox.h"

namespace {

using namespace qkv::test;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

// The specification, element by element.
void dropout_spec(
    const float* x, float* y, uint8_t* mask, int64_t n, float p, uint64_t seed, uint64_t offset) {
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) {
        const bool keep =
            qkv::philox::uniform01(qkv::philox::bits(seed, 0, offset + uint64_t(i))) >= p;
        mask[i] = uint8_t(keep);
        y[i]    = keep ? x[i] * scale : 0.0f;
    }
}

TEST(DropoutKernels, MatchesPhiloxSpec_OddSizesAndOffsets) {
    const uint64_t offsets[] = {0, 1, 2, 3, 5, 4096, (uint64_t(1) << 34) - 6};  // last: carry
    uint64_t seed            = 1;
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        for (int64_t n : {1, 7, 17, 33, 1000, 17496, 100003})
            for (uint64_t off : offsets)
                for (float p : {0.1f, 0.5f}) {
                    const auto x = random_floats(n, seed++);
                    std::vector<float> y(n), want_y(n);
                    std::vector<uint8_t> mask(n, 7), want_mask(n);
                    const uint64_t s = 0x123456789ABCDEFull * seed;
                    cpu::dropout_forward(x.data(), y.data(), mask.data(), n, p, s, off);
                    dropout_spec(x.data(), want_y.data(), want_mask.data(), n, p, s, off);
                    ASSERT_EQ(mask, want_mask)
                        << cpu::isa_name(isa) << " n=" << n << " off=" << off;
                    ASSERT_EQ(y, want_y) << cpu::isa_name(isa) << " n=" << n << " off=" << off;
                    std::vector<float> y_nomask(n);
                    cpu::dropout_forward(x.data(), y_nomask.data(), nullptr, n, p, s, off);
                    ASSERT_EQ(y_nomask, want_y);
                }
    }
}

TEST(DropoutKernels, SameMaskOnEveryIsaPath) {
    // Sizes that end in each part of a call: the scalar head (unaligned offsets), the 64-element
    // groups of the AVX-512 body (16 Philox blocks), the 32-element groups (8 blocks) after them,
    // and the scalar tail; one size above the parallel threshold. Every path must give the scalar
    // path's bytes, forward and backward (stored and regenerated masks).
    const auto isas = available_isas();
    for (int64_t n : {3, 32, 64, 95, 96, 97, 161, 8192 + 37, 300001})
        for (uint64_t off : {uint64_t(0), uint64_t(2), uint64_t(7), (uint64_t(1) << 32) * 4 - 40})
            for (float p : {0.25f, 0.9f}) {
                const auto x = random_floats(n, uint64_t(n) + off);
                const uint64_t seed = 0xFEEDFACE12345ull ^ off;
                std::vector<float> y0, dx0, dr0;
                std::vector<uint8_t> m0;
                for (Isa isa : isas) {
                    IsaGuard guard(isa);
                    std::vector<float> y(n), dx(n), dr(n);
                    std::vector<uint8_t> m(n, 9);
                    cpu::dropout_forward(x.data(), y.data(), m.data(), n, p, seed, off);
                    cpu::dropout_backward(x.data(), dx.data(), m.data(), n, p, seed, off);
                    cpu::dropout_backward(x.data(), dr.data(), nullptr, n, p, seed, off);
                    if (isa == isas.front()) {
                        y0 = y, m0 = m, dx0 = dx, dr0 = dr;
                        continue;
                    }
                    const std::string at = std::string(cpu::isa_name(isa)) + " n=" + std::to_string(n) +
                                           " off=" + std::to_string(off) + " p=" + std::to_string(p);
                    ASSERT_EQ(m, m0) << at;
                    ASSERT_EQ(std::memcmp(y.data(), y0.data(), sizeof(float) * size_t(n)), 0) << at;
                    ASSERT_EQ(std::memcmp(dx.data(), dx0.data(), sizeof(float) * size_t(n)), 0) << at;
                    ASSERT_EQ(std::memcmp(dr.data(), dr0.data(), sizeof(float) * size_t(n)), 0) << at;
                }
            }
}

TEST(DropoutKernels, ZeroProbabilityIsIdentity) {
    const auto x = random_floats(1001, 9);
    std::vector<float> y(x.size());
    std::vector<uint8_t> mask(x.size());
    cpu::dropout_forward(x.data(), y.data(), mask.data(), int64_t(x.size()), 0.f, 3, 0);
    EXPECT_EQ(y, x);
    EXPECT_EQ(mask, std::vector<uint8_t>(x.size(), 1));
}

TEST(DropoutKernels, IndependentOfThreadCount) {
    const int64_t n = 300001;
    const auto x    = random_floats(n, 10);
    const int saved = omp_get_max_threads();
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> y[3];
        for (int t = 0; t < 3; ++t) {
            omp_set_num_threads(t + 1);
            y[t].resize(n);
            cpu::dropout_forward(x.data(), y[t].data(), nullptr, n, 0.2f, 77, 12);
        }
        EXPECT_EQ(y[0], y[1]) << cpu::isa_name(isa);
        EXPECT_EQ(y[0], y[2]) << cpu::isa_name(isa);
    }
    omp_set_num_threads(saved);
}

TEST(DropoutKernels, BackwardStoredAndRegeneratedMasksAgree) {
    // Every SIMD path, sizes around the 32-element groups of the vector body and one above the
    // parallel threshold; dy holds -0, inf and NaN so that a dropped element must come out as +0
    // exactly (not NaN, not -0), as the scalar definition gives.
    const float p = 0.3f;
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        for (int64_t n : {1, 31, 32, 33, 5003, 300001}) {
            const auto x = random_floats(n, 20);
            auto dy      = random_floats(n, 21);
            for (int64_t i = 0; i < n; i += 7) dy[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? INFINITY : NAN;
            std::vector<float> y(n), dx_mask(n), dx_regen(n);
            std::vector<uint8_t> mask(n);
            cpu::dropout_forward(x.data(), y.data(), mask.data(), n, p, 5, 3);
            cpu::dropout_backward(dy.data(), dx_mask.data(), mask.data(), n, p, 5, 3);
            cpu::dropout_backward(dy.data(), dx_regen.data(), nullptr, n, p, 5, 3);
            const float scale = 1.0f / (1.0f - p);
            for (int64_t i = 0; i < n; ++i) {
                const float want = mask[i] ? dy[i] * scale : 0.0f;
                ASSERT_EQ(std::memcmp(&dx_mask[i], &want, sizeof(float)), 0)
                    << cpu::isa_name(isa) << " n=" << n << " i=" << i << " got " << dx_mask[i] << " want " << want;
                ASSERT_EQ(std::memcmp(&dx_regen[i], &want, sizeof(float)), 0)
                    << cpu::isa_name(isa) << " n=" << n << " i=" << i << " (regenerated mask)";
            }
        }
    }
}

TEST(DropoutKernels, KeepRateMatchesP) {
    const int64_t n = 1 << 20;
    std::vector<float> x(n, 1.f), y(n);
    std::vector<uint8_t> mask(n);
    for (float p : {0.1f, 0.2f, 0.5f}) {
        cpu::dropout_forward(x.data(), y.data(), mask.data(), n, p, 2024, 0);
        double kept = 0;
        for (uint8_t m : mask) kept += m;
        const double sigma = std::sqrt(n * p * (1 - p));
        EXPECT_NEAR(kept, n * (1 - p), 5 * sigma) << "p=" << p;
        // Inverted dropout keeps the mean: E[y] = 1.
        double mean = 0;
        for (float v : y) mean += v;
        EXPECT_NEAR(mean / n, 1.0, 5 * sigma / (n * (1 - p)));
    }
}

}  // namespace
