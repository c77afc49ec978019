// float16 q, k, v in scaled_dot_product_attention (ops/attention.h): widened exactly, computed in
// fp32, the output rounded once to float16. Checked against float64 attention on the same
// (half-valued) inputs with the bound
//     |out16 − ref64| <= kHalfRounding·|ref64| + kHalfSubnormal + kErrFactor·err32 + kErrFloor,
// kHalfRounding = 2^-11 the unit roundoff of float16 RNE (the output's one rounding; below 2^-14
// the rounding error is absolute, at most half the subnormal spacing 2^-24, kHalfSubnormal), and
// err32 = max|out32 − ref64| the fp32 call's own error on these inputs (the flash rule's 2x, as
// the fp32 kernels' tests use it). And bit for bit: the float16 call equals the float32 call on
// the widened inputs, rounded. PyTorch's float16 cases: an additive float16 mask with −inf, a
// fully masked row (0, as on the fp32 path), logits far beyond 65504 (q, k entries ~300, D = 64),
// causal masks; on both backends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/fp16.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/precision.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

constexpr double kHalfRounding  = 1.0 / 2048.0;           // 2^-11: RNE to float16, relative
constexpr double kHalfSubnormal = 1.0 / 33554432.0;       // 2^-25: RNE among float16 subnormals, absolute

Tensor half_tensor(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    return from_vector(test::random_floats(shape_numel(s), seed, lo, hi), s).to(DType::f16);
}

AttentionOptions on(AttentionBackend b) {
    AttentionOptions o;
    o.backend = b;
    return o;
}

/// Runs the float16 call and checks it against float64 (the bound above) and against the float32
/// call on the widened inputs, rounded (bit for bit). Returns the float16 output widened.
std::vector<float> check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& m16,
                         const AttentionMask& m32, const AttentionMask& m64, AttentionBackend backend) {
    const Tensor out = scaled_dot_product_attention(q, k, v, m16, on(backend));
    EXPECT_EQ(out.dtype(), DType::f16);
    EXPECT_FALSE(out.requires_grad());
    const std::vector<float> got = out.to(DType::f32).to_vector<float>();
    const Tensor out32 = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), m32,
                                                      on(backend));
    EXPECT_EQ(got, out32.to(DType::f16).to(DType::f32).to_vector<float>()) << "not the fp32 call, rounded once";
    const std::vector<double> ref = scaled_dot_product_attention(q.to(DType::f64), k.to(DType::f64),
                                                                 v.to(DType::f64), m64, on(AttentionBackend::math))
                                        .to_vector<double>();
    const std::vector<float> o32 = out32.to_vector<float>();
    const double err32 = test::max_abs_diff(o32.data(), ref.data(), int64_t(ref.size()));
    for (size_t i = 0; i < ref.size(); ++i) {
        const double bound = kHalfRounding * std::fabs(ref[i]) + kHalfSubnormal + test::kErrFactor * err32 +
                             test::kErrFloor;
        EXPECT_TRUE(std::isfinite(got[i])) << i;
        EXPECT_LE(std::fabs(double(got[i]) - ref[i]), bound) << "element " << i << " got " << got[i] << " ref "
                                                            << ref[i];
    }
    return got;
}

const AttentionBackend kBackends[] = {AttentionBackend::math, AttentionBackend::flash};

}  // namespace

TEST(AttentionFp16, RandomInputsAgainstFloat64) {
    const Tensor q = half_tensor({2, 3, 37, 16}, 1), k = half_tensor({2, 3, 45, 16}, 2), v = half_tensor({2, 3, 45, 8}, 3);
    for (AttentionBackend b : kBackends) {
        check(q, k, v, {}, {}, {}, b);
        AttentionMask c;  // causal, both alignments
        c.causal = CausalAlign::top_left;
        check(q, k, v, c, c, c, b);
        c.causal = CausalAlign::bottom_right;
        check(q, k, v, c, c, c, b);
        AttentionMask vl;
        vl.valid_lens = from_vector(std::vector<int64_t>{30, 7}, {2});
        check(q, k, v, vl, vl, vl, b);
    }
    // Rank 3 (B, T, D) as well.
    check(half_tensor({3, 9, 16}, 4), half_tensor({3, 11, 16}, 5), half_tensor({3, 11, 8}, 6), {}, {}, {},
          AttentionBackend::flash);
}

// q, k entries ~300 with D = 64: q·k reaches ~5.8e6 and the scaled logits ~7e5, far beyond
// float16's 65504, where half arithmetic overflows to inf (and inf − inf gives NaN in softmax).
// Computed in fp32 the output is finite and matches float64.
TEST(AttentionFp16, LogitsBeyondTheHalfRangeDoNotOverflow) {
    const Tensor q = half_tensor({1, 2, 20, 64}, 7, 250.f, 300.f);
    Tensor k = half_tensor({1, 2, 24, 64}, 8, -300.f, 300.f);
    const Tensor v = half_tensor({1, 2, 24, 32}, 9);
    const double logit = double(q.to(DType::f32).select(3, 0).select(2, 0).select(1, 0).select(0, 0).item()) * 300.0;
    ASSERT_GT(logit * 64 / 8, 65504.0) << "the case must reach beyond the half range";
    for (AttentionBackend b : kBackends) {
        check(q, k, v, {}, {}, {}, b);
        AttentionMask c;
        c.causal = CausalAlign::top_left;
        check(q, k, v, c, c, c, b);
    }
    // Every logit positive and huge: q = k = 300 everywhere gives q·k = 5.76e6 for all keys, a
    // uniform softmax: the output is the mean of v.
    const Tensor big = full({1, 1, 4, 64}, 300.0, DType::f16);
    const Tensor vv = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 4, 2}).to(DType::f16);
    for (AttentionBackend b : kBackends) {
        const auto got = scaled_dot_product_attention(big, big, vv, {}, on(b)).to(DType::f32).to_vector<float>();
        for (size_t i = 0; i < got.size(); i += 2) {
            EXPECT_EQ(got[i], 4.0f);
            EXPECT_EQ(got[i + 1], 5.0f);
        }
    }
}

// An additive float16 mask with −inf (PyTorch's float attn_mask of the query's dtype) hides keys
// exactly as the bool mask does; a row with every key at −inf gives 0, as on the fp32 path.
TEST(AttentionFp16, AdditiveMinusInfMaskAndFullyMaskedRows) {
    const int64_t Tq = 6, Tk = 10;
    const Tensor q = half_tensor({2, 2, Tq, 16}, 11), k = half_tensor({2, 2, Tk, 16}, 12), v = half_tensor({2, 2, Tk, 8}, 13);
    std::vector<float> add(size_t(Tq * Tk), 0.f);
    std::vector<bool> keep(size_t(Tq * Tk), true);
    for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j)
            if ((i + 2 * j) % 3 == 0 || i == 4) {  // row 4: every key masked
                add[size_t(i * Tk + j)] = -std::numeric_limits<float>::infinity();
                keep[size_t(i * Tk + j)] = false;
            } else if (j % 4 == 1) {
                add[size_t(i * Tk + j)] = -1.5f;  // a finite bias too
            }
    const Tensor a32 = from_vector(add, {Tq, Tk});
    AttentionMask m16, m32, m64, mb;
    m16.mask = a32.to(DType::f16);
    m32.mask = a32;
    m64.mask = a32.to(DType::f64);
    for (AttentionBackend b : kBackends) {
        const auto got = check(q, k, v, m16, m32, m64, b);
        for (int64_t bh = 0; bh < 4; ++bh)
            for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(got[size_t((bh * Tq + 4) * 8 + d)], 0.0f) << "fully masked row";
        // The bool mask of the same keys, without the finite bias: equal where no bias applies.
        mb.mask = from_vector(keep, {Tq, Tk});
        const auto with_bool = scaled_dot_product_attention(q, k, v, mb, on(b)).to(DType::f32).to_vector<float>();
        for (int64_t bh = 0; bh < 4; ++bh)
            for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(with_bool[size_t((bh * Tq + 4) * 8 + d)], 0.0f);
        // And a float32 additive mask is taken as given.
        EXPECT_EQ(scaled_dot_product_attention(q, k, v, m32, on(b)).to(DType::f32).to_vector<float>(), got);
    }
}

// The thread's bf16 matmul precision does not reach float16 attention (its operands would lose 3
// bits): the same bits as under fp32; weights, when asked, come back float32.
TEST(AttentionFp16, ComputesInFp32WhateverThePrecisionAndReturnsFloat32Weights) {
    const Tensor q = half_tensor({1, 2, 8, 16}, 21), k = half_tensor({1, 2, 12, 16}, 22), v = half_tensor({1, 2, 12, 8}, 23);
    for (AttentionBackend b : kBackends) {
        const auto plain = scaled_dot_product_attention(q, k, v, {}, on(b)).to(DType::f32).to_vector<float>();
        MatmulPrecisionGuard g(MatmulPrecision::bf16);
        EXPECT_EQ(scaled_dot_product_attention(q, k, v, {}, on(b)).to(DType::f32).to_vector<float>(), plain);
        EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16) << "the call changed the caller's precision";
    }
    Tensor w;
    const Tensor out = scaled_dot_product_attention(q, k, v, {}, on(AttentionBackend::math), &w);
    EXPECT_EQ(out.dtype(), DType::f16);
    EXPECT_EQ(w.dtype(), DType::f32);
    EXPECT_EQ(w.shape(), (Shape{1, 2, 8, 12}));
}

TEST(AttentionFp16, MixedDtypesAreAClearError) {
    const Tensor q = half_tensor({1, 1, 4, 8}, 31), k = half_tensor({1, 1, 4, 8}, 32), v = half_tensor({1, 1, 4, 8}, 33);
    EXPECT_NE(test::error_of([&] { scaled_dot_product_attention(q, k.to(DType::f32), v); })
                  .find("must share a dtype, got float16, float32, float16"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { scaled_dot_product_attention(q, k, v.to(DType::bf16)); })
                  .find("must share a dtype, got float16, float16, bfloat16"),
              std::string::npos);
    // No gradient: float16 tensors cannot require grad, and converting one that does is refused.
    Tensor x = q.to(DType::f32).requires_grad_(true);
    EXPECT_NE(test::error_of([&] { (void)x.to(DType::f16); }).find("requires grad"), std::string::npos);
}
