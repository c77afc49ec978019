// The per-row int8 quantizer (cpu/quantize.h) on every ISA path this CPU has, for 8-bit (qmax 127)
// and 7-bit (63) activations: the documented rule (scale = max|x| / qmax in fp32, q = x·(1/scale)
// in fp32 rounded half away from zero, clamped to ±qmax) computed here with std::lround, byte for byte, at row lengths around the 8- and 16-lane
// vectors (tails), with exact ties, -0, an all-zero row and a NaN row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/quantize.h"

namespace qkv::test {
namespace {

namespace cpu = kernels::cpu;

struct Quantized {
    std::vector<int8_t> q;
    std::vector<float>  scale;
};

Quantized run(const std::vector<float>& x, int64_t rows, int64_t cols, int qmax) {
    Quantized r{std::vector<int8_t>(size_t(rows * cols), int8_t(99)), std::vector<float>(size_t(rows), -1.0f)};
    cpu::quantize_rows_int8(r.q.data(), r.scale.data(), x.data(), rows, cols, float(qmax));
    return r;
}

TEST(QuantizeKernels, RuleByteForByteOnEveryIsa) {
    for (const int A : {127, 63})
    for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 37, 64, 100}) {
        const float a = float(A);
        const int64_t rows = 4;
        std::vector<float> x = random_floats(rows * cols, uint64_t(cols), -3.0f, 3.0f);
        // Row 1: max A (scale 1, 1/scale 1), so the values are their own quotients: exact ties.
        const float ties[] = {a, 2.5f, -2.5f, 0.5f, -0.5f, -0.0f, a - 0.5f, 0.5f - a, 1.49999988f, -a};
        for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = ties[c % 10];
        x[size_t(cols)] = a;
        for (int64_t c = 0; c < cols; ++c) x[size_t(2 * cols + c)] = 0.0f;  // row 2: all zero
        const std::vector<float> xs = x;
        SCOPED_TRACE(::testing::Message() << "qmax " << A << " cols " << cols);
        std::vector<int8_t> want(size_t(rows * cols));
        std::vector<float>  want_scale(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            float m = 0;
            for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(xs[size_t(r * cols + c)]));
            const float s = m / a, inv = s > 0 ? 1.0f / s : 0.0f;
            want_scale[size_t(r)] = s;
            for (int64_t c = 0; c < cols; ++c)
                want[size_t(r * cols + c)] =
                    int8_t(std::clamp(std::lround(xs[size_t(r * cols + c)] * inv), -long(A), long(A)));
        }
        if (cols >= 10) {  // the ties, spelled out
            const std::vector<int8_t> t(want.begin() + cols, want.begin() + cols + 10);
            const auto q = int8_t(A);
            EXPECT_EQ(t, (std::vector<int8_t>{q, 3, -3, 1, -1, 0, q, int8_t(-q), 1, int8_t(-q)}));
        }
        for (auto isa : available_isas()) {
            SCOPED_TRACE(cpu::isa_name(isa));
            const IsaGuard g(isa);
            const Quantized got = run(xs, rows, cols, A);
            EXPECT_EQ(got.q, want);
            EXPECT_EQ(got.scale, want_scale);
            // A NaN anywhere in a row (here in the vector part and in the tail) makes its scale NaN.
            for (int64_t at : {int64_t(0), cols - 1}) {
                std::vector<float> bad = xs;
                bad[size_t(3 * cols + at)] = std::numeric_limits<float>::quiet_NaN();
                const Quantized b = run(bad, rows, cols, A);
                EXPECT_TRUE(std::isnan(b.scale[3])) << "NaN at " << at;
                EXPECT_EQ(std::vector<float>(b.scale.begin(), b.scale.begin() + 3),
                          std::vector<float>(want_scale.begin(), want_scale.begin() + 3));
            }
        }
    }
}

}  // namespace
}  // namespace qkv::test
