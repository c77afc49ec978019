// bf16 matrix-product precision (ops/precision.h): under MatmulPrecisionGuard(bf16), matmul, linear
// (forward and both gradients) and linear_cross_entropy compute with bf16-rounded operands and fp32
// accumulation. Each result is checked against float64 on the rounded operands with the 2x rule
// (the fp32 product of the rounded operands' own error against float64, doubled, plus the floor):
// the operand rounding is exact by construction, only the accumulation may differ. Also: float64
// tensors are untouched, the setting is per thread, and bf16 differs from fp32 by about the
// rounding it claims (so a path that ignored the setting would fail).
#include <gtest/gtest.h>

#include <thread>

#include "qkv/core/bf16.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

Tensor rounded(const Tensor& t) {
    auto v = t.contiguous().to_vector<float>();
    for (float& x : v) x = round_to_bf16(x);
    return from_vector(v, t.shape());
}

std::vector<double> f64(const Tensor& t) { return t.to(DType::f64).contiguous().to_vector<double>(); }
std::vector<float> f32(const Tensor& t) { return t.contiguous().to_vector<float>(); }

::testing::AssertionResult within_2x(const Tensor& got, const Tensor& ref32, const Tensor& ref64) {
    const auto g = f32(got), r32 = f32(ref32);
    const auto r64 = f64(ref64);
    const double err = max_abs_diff(g.data(), r64.data(), int64_t(g.size()));
    const double err32 = max_abs_diff(r32.data(), r64.data(), int64_t(g.size()));
    if (err <= kErrFactor * err32 + kErrFloor) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "err " << err << " > 2·" << err32 << " + floor (" << bf16_matmul_path() << ")";
}

TEST(MatmulPrecision, MatmulUsesRoundedOperands) {
    const Tensor a = from_vector(random_floats(3 * 17 * 40, 1), {3, 17, 40});
    const Tensor b = from_vector(random_floats(3 * 29 * 40, 2), {3, 29, 40}).transpose(1, 2);  // a transposed view
    Tensor got;
    {
        MatmulPrecisionGuard g(MatmulPrecision::bf16);
        got = matmul(a, b);
    }
    const Tensor ar = rounded(a), br = rounded(b.contiguous());
    EXPECT_TRUE(within_2x(got, matmul(ar, br), matmul(ar.to(DType::f64), br.to(DType::f64))));
    // ... and not the fp32 product: the difference is the operand rounding, ~u = 2^-8 relative.
    const auto diff = max_abs_diff(f32(got).data(), f32(matmul(a, b)).data(), got.numel());
    EXPECT_GT(diff, 1e-4);
}

TEST(MatmulPrecision, LinearGradientsUseRoundedOperands) {
    // y = x·Wᵀ + b with upstream gradient r: dx = r·W, dW = rᵀ·x, each with both operands rounded.
    const Tensor x0 = from_vector(random_floats(6 * 4 * 24, 3), {6, 4, 24});
    const Tensor w0 = from_vector(random_floats(20 * 24, 4), {20, 24});
    const Tensor b0 = from_vector(random_floats(20, 5), {20});
    const Tensor r = from_vector(random_floats(6 * 4 * 20, 6), {6, 4, 20});
    Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
    Tensor y;
    {
        MatmulPrecisionGuard g(MatmulPrecision::bf16);
        y = linear(x, w, b);
        y.backward(r);
    }
    const Tensor xr = rounded(x0).reshape({24, 24}), wr = rounded(w0), rr = rounded(r).reshape({24, 20});
    const auto d = [](const Tensor& t) { return t.to(DType::f64); };
    EXPECT_TRUE(within_2x(y.reshape({24, 20}) - b0, matmul(xr, wr.transpose(0, 1)), matmul(d(xr), d(wr).transpose(0, 1))));
    EXPECT_TRUE(within_2x(x.grad().reshape({24, 24}), matmul(rr, wr), matmul(d(rr), d(wr))));
    EXPECT_TRUE(within_2x(w.grad(), matmul(rr.transpose(0, 1), xr), matmul(d(rr).transpose(0, 1), d(xr))));
    // The bias gradient is a sum, not a product: fp32 as always.
    EXPECT_EQ(f32(b.grad()), f32(sum(r.reshape({24, 20}), {0})));
}

TEST(MatmulPrecision, FusedOutputLayerAgreesWithTheComposition) {
    // linear_cross_entropy's own GEMMs honour the setting: under bf16 it equals
    // cross_entropy(linear(...)) under bf16 (the same rounded products), not the fp32 loss.
    const Tensor x0 = from_vector(random_floats(30 * 16, 7), {30, 16});
    const Tensor w0 = from_vector(random_floats(50 * 16, 8, -2.f, 2.f), {50, 16});
    std::vector<int64_t> tv(30);
    for (int i = 0; i < 30; ++i) tv[size_t(i)] = (i * 7) % 50;
    const Tensor t = from_vector(tv, {30});
    auto run = [&](bool fused, MatmulPrecision p) {
        MatmulPrecisionGuard g(p);
        Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
        Tensor loss = fused ? linear_cross_entropy(x, w, Tensor(), t) : cross_entropy(linear(x, w, Tensor()), t);
        loss.backward();
        return std::vector<std::vector<float>>{f32(loss), f32(x.grad()), f32(w.grad())};
    };
    const auto fused = run(true, MatmulPrecision::bf16), comp = run(false, MatmulPrecision::bf16);
    const auto full = run(true, MatmulPrecision::fp32);
    for (size_t k = 0; k < 3; ++k)
        for (size_t i = 0; i < fused[k].size(); ++i)
            ASSERT_NEAR(fused[k][i], comp[k][i], kTolGoldenAtol + kTolGoldenRtol * std::fabs(comp[k][i])) << k << " " << i;
    EXPECT_GT(std::fabs(fused[0][0] - full[0][0]), 1e-6) << "the bf16 loss equals the fp32 loss: the setting was ignored";
}

TEST(MatmulPrecision, Float64IsUntouchedAndTheSettingIsPerThread) {
    const Tensor a = from_vector(random_floats(8 * 8, 9), {8, 8}).to(DType::f64);
    const auto exact = f64(matmul(a, a));
    {
        MatmulPrecisionGuard g(MatmulPrecision::bf16);
        EXPECT_EQ(f64(matmul(a, a)), exact);
        MatmulPrecision other = MatmulPrecision::bf16;
        std::thread([&] { other = matmul_precision(); }).join();
        EXPECT_EQ(other, MatmulPrecision::fp32);
        EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16);
    }
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32);
    EXPECT_EQ(parse_precision("bf16", "--precision"), MatmulPrecision::bf16);
    try {
        parse_precision("fp16", "--precision");
        FAIL() << "fp16 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--precision: expected fp32 or bf16, got 'fp16'"), std::string::npos);
    }
}

// The flash backend under bf16 (kernels/params.h: AttentionParams::bf16): q, k, v and the upstream
// gradient enter as bf16-rounded copies (so pre-rounded inputs give bit-identical results, and the
// caller's tensors are not changed), and P is rounded before P·V: the output differs from the fp32
// kernel on the same rounded inputs, by at most the rounding of P. Bound: each P_ij moves by at most
// u = 2^-8 relative (RNE gives u/2; the factor 2 covers fp32 accumulation), so
// |out_bf16 - out_f64| <= u · max|v| since sum_j P_ij = 1. The kernels' own tests (FlashAttentionBf16.*)
// check every feature against float64 with the 2x rule.
TEST(MatmulPrecision, FlashAttentionUsesRoundedOperands) {
    constexpr double kPRounding = 1.0 / 256.0;
    const Tensor q0 = from_vector(random_floats(2 * 2 * 70 * 32, 11), {2, 2, 70, 32});
    const Tensor k0 = from_vector(random_floats(2 * 2 * 90 * 32, 12), {2, 2, 90, 32});
    const Tensor v0 = from_vector(random_floats(2 * 2 * 90 * 24, 13), {2, 2, 90, 24});
    const Tensor r0 = from_vector(random_floats(2 * 2 * 70 * 24, 14), {2, 2, 70, 24});
    AttentionOptions opt;
    opt.backend = AttentionBackend::flash;
    auto run = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& r_, MatmulPrecision p) {
        MatmulPrecisionGuard g(p);
        Tensor q = q_.detach().requires_grad_(true), k = k_.detach().requires_grad_(true),
               v = v_.detach().requires_grad_(true);
        Tensor out = scaled_dot_product_attention(q, k, v, AttentionMask{}, opt);
        out.backward(r_);
        return std::vector<std::vector<float>>{f32(out), f32(q.grad()), f32(k.grad()), f32(v.grad())};
    };
    const auto q_before = f32(q0);
    const auto bf = run(q0, k0, v0, r0, MatmulPrecision::bf16);
    EXPECT_EQ(f32(q0), q_before) << "the caller's q was rounded in place";
    const Tensor qr = rounded(q0), kr = rounded(k0), vr = rounded(v0), rr = rounded(r0);
    const auto pre = run(qr, kr, vr, rr, MatmulPrecision::bf16);
    for (size_t t = 0; t < 4; ++t) EXPECT_EQ(bf[t], pre[t]) << "result " << t << ": the operands were not rounded";
    const auto fp = run(qr, kr, vr, rr, MatmulPrecision::fp32);
    EXPECT_GT(max_abs_diff(bf[0].data(), fp[0].data(), int64_t(fp[0].size())), 1e-6) << "P was not rounded";
    AttentionOptions m64;
    m64.backend = AttentionBackend::math;
    const auto want = f64(scaled_dot_product_attention(qr.to(DType::f64), kr.to(DType::f64), vr.to(DType::f64),
                                                       AttentionMask{}, m64));
    double vmax = 0;
    for (float x : f32(vr)) vmax = std::max(vmax, double(std::fabs(x)));
    EXPECT_LE(max_abs_diff(bf[0].data(), want.data(), int64_t(want.size())), kPRounding * vmax);
}

// bfloat16 q, k, v (storage): widened exactly, bf16 compute, the output rounded to bfloat16 —
// bit for bit the float32 call under bf16 precision on the widened values, then rounded.
TEST(MatmulPrecision, AttentionTakesBfloat16Tensors) {
    const Tensor q = from_vector(random_floats(2 * 3 * 20 * 16, 21), {2, 3, 20, 16}).to(DType::bf16);
    const Tensor k = from_vector(random_floats(2 * 3 * 33 * 16, 22), {2, 3, 33, 16}).to(DType::bf16);
    const Tensor v = from_vector(random_floats(2 * 3 * 33 * 8, 23), {2, 3, 33, 8}).to(DType::bf16);
    AttentionMask m;
    m.causal = CausalAlign::bottom_right;
    const Tensor out = scaled_dot_product_attention(q, k, v, m);
    ASSERT_EQ(out.dtype(), DType::bf16);
    ASSERT_EQ(out.shape(), (Shape{2, 3, 20, 8}));
    Tensor want;
    {
        MatmulPrecisionGuard g(MatmulPrecision::bf16);
        want = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), m);
    }
    EXPECT_EQ(f32(out.to(DType::f32)), f32(want.to(DType::bf16).to(DType::f32)));
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32) << "the bf16 setting leaked out of the call";
    try {
        scaled_dot_product_attention(q, k.to(DType::f32), v);
        FAIL() << "mixed dtypes accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("must share a dtype, got bfloat16, float32, bfloat16"), std::string::npos)
            << e.what();
    }
}

}  // namespace
