// argmax_block (cpu/argmax.h), greedy decoding's fused output-layer scan, on every ISA path this
// CPU has, against a plain loop written here from the documented rule: the value of each column
// (int8: float(acc)·sx·sw + bias; fp32: logits + bias) in fp32, banned columns skipped, the first
// NaN, else the largest value with ties to the smaller column, -1 when every column is banned.
// Row widths around the 8- and 16-lane vectors (tails); ties, -0 / +0, ±inf, NaN, all -inf and
// all-banned rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/argmax.h"

namespace qkv::test {
namespace {

namespace cpu = kernels::cpu;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Block {
    int64_t rows = 0, width = 0;
    std::vector<int32_t> acc;  // empty: the fp32 form
    std::vector<float> logits, sx, sw, bias;
    std::vector<char> banned;
};

struct Best {
    std::vector<float> value;
    std::vector<int64_t> index;
};

/// The rule, one column at a time.
Best reference(const Block& b) {
    Best r{std::vector<float>(size_t(b.rows), 0.0f), std::vector<int64_t>(size_t(b.rows), -1)};
    for (int64_t n = 0; n < b.rows; ++n) {
        float best = 0.0f;
        int64_t at = -1;
        for (int64_t j = 0; j < b.width; ++j) {
            if (!b.banned.empty() && b.banned[size_t(j)]) continue;
            const size_t i = size_t(n * b.width + j);
            float v;
            if (!b.acc.empty()) {
                v = float(b.acc[i]) * b.sx[size_t(n)];
                v = v * b.sw[size_t(j)];
                v = v + (b.bias.empty() ? 0.0f : b.bias[size_t(j)]);
            } else {
                v = b.bias.empty() ? b.logits[i] : b.logits[i] + b.bias[size_t(j)];
            }
            const bool take = at < 0 ? true
                              : v != v ? !(best != best)  // the first NaN wins
                              : best != best ? false
                                             : v > best;  // ties keep the earlier column
            if (take) best = v, at = j;
        }
        r.value[size_t(n)] = best, r.index[size_t(n)] = at;
    }
    return r;
}

Best run(const Block& b) {
    Best r{std::vector<float>(size_t(b.rows), -7.0f), std::vector<int64_t>(size_t(b.rows), -7)};
    cpu::ArgmaxBlockParams p;
    p.rows = b.rows, p.width = b.width;
    p.acc = b.acc.empty() ? nullptr : b.acc.data();
    p.logits = b.acc.empty() ? b.logits.data() : nullptr;
    p.sx = b.sx.empty() ? nullptr : b.sx.data();
    p.sw = b.sw.empty() ? nullptr : b.sw.data();
    p.bias = b.bias.empty() ? nullptr : b.bias.data();
    p.banned = b.banned.empty() ? nullptr : b.banned.data();
    p.best = r.value.data(), p.index = r.index.data();
    cpu::argmax_block(p);
    return r;
}

void expect_same(const Best& got, const Best& want) {
    EXPECT_EQ(got.index, want.index);
    ASSERT_EQ(got.value.size(), want.value.size());
    for (size_t n = 0; n < want.value.size(); ++n) {
        if (want.value[n] != want.value[n]) {
            EXPECT_TRUE(got.value[n] != got.value[n]) << "row " << n;
        } else {  // bit for bit: -0 is not +0 here
            EXPECT_EQ(std::signbit(got.value[n]), std::signbit(want.value[n])) << "row " << n;
            EXPECT_EQ(got.value[n], want.value[n]) << "row " << n;
        }
    }
}

/// Rows 0-1 random; row 2 ties (equal maxima at columns 1 and width-1, and the max banned
/// elsewhere); row 3 all -inf (fp32) or zero sums (int8); row 4 a NaN in the tail or +inf.
Block make(int64_t width, bool int8, bool bias, bool banned, uint64_t seed) {
    Block b;
    b.rows = 5, b.width = width;
    const int64_t n = b.rows * width;
    const std::vector<float> r = random_floats(n, seed, -4.0f, 4.0f);
    if (int8) {
        b.acc.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) b.acc[size_t(i)] = int32_t(r[size_t(i)] * 30000.0f);
        b.sx = random_floats(b.rows, seed + 1, 0.001f, 0.01f);
        b.sw = random_floats(width, seed + 2, 0.001f, 0.01f);
        for (int64_t j = 0; j < width; ++j) b.acc[size_t(2 * width + j)] = -5;  // row 2: ties...
        b.acc[size_t(2 * width + std::min<int64_t>(1, width - 1))] = 9;
        b.acc[size_t(3 * width - 1)] = 9;
        for (int64_t j = 0; j < width; ++j) b.acc[size_t(3 * width + j)] = 0;  // row 3: ±0 only
        if (width > 3) b.acc[size_t(4 * width + width - 2)] = 2000000000;  // row 4: a large one
        if (!bias) std::fill(b.sw.begin(), b.sw.end(), 0.005f);  // equal sums give equal values
    } else {
        b.logits = r;
        for (int64_t j = 0; j < width; ++j) b.logits[size_t(2 * width + j)] = -1.0f;
        b.logits[size_t(2 * width + std::min<int64_t>(1, width - 1))] = 2.5f;
        b.logits[size_t(3 * width - 1)] = 2.5f;
        for (int64_t j = 0; j < width; ++j) b.logits[size_t(3 * width + j)] = -kInf;  // row 3
        b.logits[size_t(4 * width + width - 1)] = kNaN;                                // row 4: NaN in the tail
        if (width > 2) b.logits[size_t(4 * width)] = kInf;
    }
    if (bias) {
        b.bias = random_floats(width, seed + 3, -0.5f, 0.5f);
        if (int8) b.bias.assign(size_t(width), 0.25f);  // the ties stay ties
        else b.bias.assign(size_t(width), -0.0f);       // -0 + x: x, and -inf stays -inf
    }
    if (banned) {
        b.banned.assign(size_t(width), 0);
        for (int64_t j = 0; j < width; j += 3) b.banned[size_t(j)] = 1;
    }
    return b;
}

TEST(ArgmaxKernels, RuleOnEveryIsa) {
    for (int64_t width : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000})
    for (bool int8 : {false, true})
    for (bool bias : {false, true})
    for (bool banned : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "width " << width << (int8 ? " int8" : " fp32")
                                          << (bias ? " bias" : "") << (banned ? " banned" : ""));
        const Block b = make(width, int8, bias, banned, uint64_t(width));
        const Best want = reference(b);
        for (auto isa : available_isas()) {
            SCOPED_TRACE(cpu::isa_name(isa));
            const IsaGuard g(isa);
            expect_same(run(b), want);
        }
    }
}

TEST(ArgmaxKernels, CasesSpelledOut) {
    // The first of equal maxima, a banned maximum skipped, -0 before +0 kept (a tie), every
    // column banned, all -inf (the first allowed column), and the first NaN.
    Block b;
    b.rows = 6, b.width = 20;
    b.logits.assign(size_t(6 * 20), 1.0f);
    b.logits[size_t(0 * 20 + 17)] = 3.0f, b.logits[size_t(0 * 20 + 18)] = 3.0f;
    b.logits[size_t(1 * 20 + 5)] = 9.0f, b.logits[size_t(1 * 20 + 19)] = 8.0f;
    for (int64_t j = 0; j < 20; ++j) b.logits[size_t(2 * 20 + j)] = -1.0f;
    b.logits[size_t(2 * 20 + 3)] = -0.0f, b.logits[size_t(2 * 20 + 16)] = 0.0f;
    for (int64_t j = 0; j < 20; ++j) b.logits[size_t(4 * 20 + j)] = -kInf;
    b.logits[size_t(5 * 20 + 16)] = kNaN, b.logits[size_t(5 * 20 + 18)] = kNaN;
    b.banned.assign(20, 0);
    b.banned[5] = 1, b.banned[0] = 1;
    Block all = b;
    all.banned.assign(20, 1);
    for (auto isa : available_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const IsaGuard g(isa);
        const Best r = run(b);
        EXPECT_EQ(r.index, (std::vector<int64_t>{17, 19, 3, 1, 1, 16}));
        EXPECT_TRUE(std::signbit(r.value[2]));  // the -0 of column 3
        EXPECT_EQ(r.value[4], -kInf);
        EXPECT_EQ(run(all).index, std::vector<int64_t>(6, -1));
    }
}

}  // namespace
}  // namespace qkv::test
