// Edge cases of scaled_dot_product_attention's math path and of masked_softmax: valid_lens (1-D,
// 2-D, float, 0), causal masks with Tq != Tk in both alignments (hand-derived weights), bool and
// additive masks, ±1e4 logits, rows summing to 1, dropout (identity in eval, 1/(1−p) scaling in
// training), and the documented difference from D2L's −1e6 fill on fully masked rows.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/gradcheck.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/softmax.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

/// Hand-derived weights are sums/quotients of a few exact exponentials: fp32 rounding ≤ 1e-6.
constexpr double kTolHand = 1e-6;

AttentionOptions math_opts() {
    AttentionOptions o;
    o.backend = AttentionBackend::math;
    return o;
}

/// The math path with its weights (B, [H,] Tq, Tk).
Tensor weights_of(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& m,
                  AttentionOptions o = math_opts()) {
    Tensor w;
    scaled_dot_product_attention(q, k, v, m, o, &w);
    return w;
}

std::vector<float> vec(const Tensor& t) { return t.contiguous().to_vector<float>(); }


/// D2L's masked_softmax (d2l_spec.md §1.1): entries j >= len set to −1e6, then softmax.
Tensor d2l_masked_softmax(const Tensor& X, const std::vector<int64_t>& lens_per_row) {
    const int64_t K = X.shape().back(), rows = X.numel() / K;
    std::vector<bool> m(size_t(rows * K));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < K; ++j) m[size_t(r * K + j)] = j >= lens_per_row[size_t(r)];
    return softmax(masked_fill(X, from_vector(m, X.shape()), -1e6), -1);
}

}  // namespace

// ---- masked_softmax ----------------------------------------------------------------------------

TEST(MaskedSoftmax, BookChecksZerosBeyondLengthsAndRowsSumToOne) {
    Generator g(1);
    Tensor X = rand({2, 2, 4}, &g);
    // 1-D lengths [2, 3]: batch 0 keeps 2 keys, batch 1 keeps 3 (D2L 11.3.1).
    std::vector<float> w = vec(masked_softmax(X, from_vector<int64_t>({2, 3}, {2})));
    const int lens1[4] = {2, 2, 3, 3};
    for (int r = 0; r < 4; ++r) {
        double s = 0;
        for (int j = 0; j < 4; ++j) {
            if (j >= lens1[r]) {
                EXPECT_EQ(w[size_t(r * 4 + j)], 0.f);
            }
            s += w[size_t(r * 4 + j)];
        }
        EXPECT_NEAR(s, 1.0, kTolHand);
    }
    // 2-D lengths [[1, 3], [2, 4]]: one per query row.
    w = vec(masked_softmax(X, from_vector<int64_t>({1, 3, 2, 4}, {2, 2})));
    const int lens2[4] = {1, 3, 2, 4};
    for (int r = 0; r < 4; ++r)
        for (int j = lens2[r]; j < 4; ++j) EXPECT_EQ(w[size_t(r * 4 + j)], 0.f);
    EXPECT_EQ(w[0], 1.f);  // a single valid key takes all the weight
}

TEST(MaskedSoftmax, PartialRowsEqualD2LAndFullyMaskedRowsAreZero) {
    Generator g(2);
    Tensor X = randn({2, 3, 5}, &g);
    Tensor lens = from_vector<int64_t>({1, 4, 0, 5, 2, 3}, {2, 3});
    std::vector<float> ours = vec(masked_softmax(X, lens));
    std::vector<float> d2l  = vec(d2l_masked_softmax(X, {1, 4, 0, 5, 2, 3}));
    for (int r = 0; r < 6; ++r) {
        for (int j = 0; j < 5; ++j) {
            const size_t i = size_t(r * 5 + j);
            if (r == 2) {
                // valid_len 0: qkv gives 0 (PyTorch >= 2.5 SDPA, ONNX, MLX agree); D2L's −1e6 fill
                // gives the uniform 1/K over every position, padding included.
                EXPECT_EQ(ours[i], 0.f);
                EXPECT_NEAR(d2l[i], 0.2f, kTolHand);
            } else {
                EXPECT_NEAR(ours[i], d2l[i], kTolHand) << "row " << r << " col " << j;
            }
        }
    }
}

TEST(MaskedSoftmax, FullyMaskedRowHasZeroGradient) {
    Generator g(3);
    Tensor X = randn({1, 2, 4}, &g).requires_grad_();
    Tensor y = masked_softmax(X, from_vector<int64_t>({0, 2}, {1, 2}));
    y.backward(randn({1, 2, 4}, &g));
    std::vector<float> gx = X.grad().to_vector<float>();
    for (int j = 0; j < 4; ++j) EXPECT_EQ(gx[size_t(j)], 0.f) << j;      // row 0: all masked
    for (int j = 2; j < 4; ++j) EXPECT_EQ(gx[size_t(4 + j)], 0.f) << j;  // masked tail of row 1
    EXPECT_NE(gx[4], 0.f);
    for (float v : gx) EXPECT_TRUE(std::isfinite(v));
}

TEST(MaskedSoftmax, FloatLengthsCountLikeArangeLessThan) {
    // D2L compares arange(K) < valid_len: 2.5 keeps positions 0, 1, 2.
    Tensor X = zeros({1, 1, 4});
    std::vector<float> w = vec(masked_softmax(X, from_vector<float>({2.5f}, {1})));
    EXPECT_TRUE(all_close(w, std::vector<float>{1 / 3.f, 1 / 3.f, 1 / 3.f, 0.f}, kTolHand, 0));
}

TEST(MaskedSoftmax, SequenceMaskBookChecks) {
    Tensor X = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    EXPECT_EQ(vec(sequence_mask(X, from_vector<int64_t>({1, 2}, {2}))),
              (std::vector<float>{1, 0, 0, 4, 5, 0}));
    // 3-D: ones (2, 3, 4), lengths [1, 2], value −1 -> whole time steps beyond the length are −1.
    std::vector<float> m = vec(sequence_mask(ones({2, 3, 4}), from_vector<int64_t>({1, 2}, {2}), -1));
    for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 3; ++t)
            for (int c = 0; c < 4; ++c)
                EXPECT_EQ(m[size_t((b * 3 + t) * 4 + c)], t < b + 1 ? 1.f : -1.f);
}

// ---- scaled_dot_product_attention, math path ---------------------------------------------------

TEST(AttentionMath, SeedShapesWithDropout) {
    // Seed 002: q, k, v (2, 10, 8), nn.Dropout(0.1) in training mode.
    Generator g(4);
    Tensor q = randn({2, 10, 8}, &g), k = randn({2, 10, 8}, &g), v = randn({2, 10, 8}, &g);
    AttentionOptions o = math_opts();
    o.dropout = 0.1, o.training = true;
    Generator d1(9), d2(9);
    o.gen = &d1;
    Tensor a = scaled_dot_product_attention(q, k, v, {}, o);
    o.gen = &d2;
    Tensor b = scaled_dot_product_attention(q, k, v, {}, o);
    EXPECT_EQ(a.shape(), (Shape{2, 10, 8}));
    EXPECT_EQ(vec(a), vec(b));  // same generator state -> same dropout mask
    for (float x : vec(a)) EXPECT_TRUE(std::isfinite(x));
    // The training output differs from the eval output (some weights were dropped).
    Tensor e = scaled_dot_product_attention(q, k, v, {}, math_opts());
    EXPECT_GT(max_abs_diff(vec(a).data(), vec(e).data(), a.numel()), 1e-3);
}

TEST(AttentionMath, DropoutIdentityInEvalScaledInTraining) {
    // With v = I (Tk × Tk) the output is the (dropped-out) weight matrix itself.
    Generator g(5);
    const int64_t B = 2, Tq = 10, Tk = 10, D = 8;
    const double p = 0.1;
    Tensor q = randn({B, Tq, D}, &g), k = randn({B, Tk, D}, &g);
    std::vector<float> eye(size_t(B * Tk * Tk), 0.f);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Tk; ++i) eye[size_t((b * Tk + i) * Tk + i)] = 1.f;
    Tensor v = from_vector(eye, {B, Tk, Tk});
    AttentionOptions o = math_opts();
    o.dropout = p;
    o.training = false;  // eval: dropout is the identity
    Tensor w;
    const std::vector<float> eval_out = vec(scaled_dot_product_attention(q, k, v, {}, o, &w));
    EXPECT_EQ(eval_out, vec(w));
    o.training = true;
    Generator dg(21);
    o.gen = &dg;
    std::vector<float> out = vec(scaled_dot_product_attention(q, k, v, {}, o, &w));
    std::vector<float> ww  = vec(w);  // weights before dropout
    int zeros = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == 0.f) {
            ++zeros;
        } else {
            EXPECT_NEAR(out[i], ww[i] / (1 - p), 1e-6 * ww[i] / (1 - p)) << i;  // one fp32 multiply
        }
    }
    // 200 Bernoulli(0.1) drops: mean 20, sd 4.2; [5, 40] is beyond 3.5 sd on both sides.
    EXPECT_GE(zeros, 5);
    EXPECT_LE(zeros, 40);
}

TEST(AttentionMath, ValidLensOneAndTwoDimensional) {
    Generator g(6);
    Tensor q = randn({2, 3, 4}, &g), k = randn({2, 5, 4}, &g), v = randn({2, 5, 3}, &g);
    AttentionMask m1;
    m1.valid_lens = from_vector<int64_t>({2, 4}, {2});
    AttentionMask m2;
    m2.valid_lens = from_vector<int64_t>({2, 2, 2, 4, 4, 4}, {2, 3});
    // (B) and the equivalent (B, Tq) give the same weights, equal to masked_softmax of the scores.
    Tensor w1 = weights_of(q, k, v, m1), w2 = weights_of(q, k, v, m2);
    EXPECT_EQ(vec(w1), vec(w2));
    Tensor ref = masked_softmax(matmul(q, k.transpose(1, 2)) / 2.0, m1.valid_lens);
    EXPECT_TRUE(all_close(vec(w1), vec(ref), kTolHand, kTolHand));
    // Per-query lengths, and the output is weights @ v.
    m2.valid_lens = from_vector<int64_t>({1, 3, 5, 2, 4, 1}, {2, 3});
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, m2, math_opts(), &w);
    const std::vector<float> ww = vec(w);
    const int lens[6] = {1, 3, 5, 2, 4, 1};
    for (int r = 0; r < 6; ++r)
        for (int j = lens[r]; j < 5; ++j) EXPECT_EQ(ww[size_t(r * 5 + j)], 0.f);
    EXPECT_TRUE(all_close(vec(out), vec(matmul(w, v)), kTolHand, kTolHand));
}

TEST(AttentionMath, ValidLenZeroGivesZeroOutputAndZeroGrads) {
    Generator g(7);
    Tensor q = randn({2, 3, 4}, &g).requires_grad_(), k = randn({2, 5, 4}, &g).requires_grad_();
    Tensor v = randn({2, 5, 3}, &g).requires_grad_();
    AttentionMask m;
    m.valid_lens = from_vector<int64_t>({0, 5}, {2});
    Tensor out = scaled_dot_product_attention(q, k, v, m, math_opts());
    out.backward(ones({2, 3, 3}));
    std::vector<float> o = vec(out), gq = q.grad().to_vector<float>(), gk = k.grad().to_vector<float>(),
                       gv = v.grad().to_vector<float>();
    for (int i = 0; i < 9; ++i) EXPECT_EQ(o[size_t(i)], 0.f);    // batch 0 output
    for (int i = 0; i < 12; ++i) EXPECT_EQ(gq[size_t(i)], 0.f);  // batch 0 grads
    for (int i = 0; i < 20; ++i) EXPECT_EQ(gk[size_t(i)], 0.f);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(gv[size_t(i)], 0.f);
    for (float x : o) EXPECT_TRUE(std::isfinite(x));
    EXPECT_NE(gv[15], 0.f);  // batch 1 is unmasked
}

TEST(AttentionMath, CausalTopLeftAndBottomRightHandDerived) {
    // D = 1, scale 1, q = 1, k = [0, ln 2, ln 3, 0]: exp(scores) = [1, 2, 3, 1]; v = [1, 2, 3, 4].
    Tensor q = ones({1, 2, 1});
    Tensor k = from_vector<float>({0.f, float(std::log(2.0)), float(std::log(3.0)), 0.f}, {1, 4, 1});
    Tensor v = from_vector<float>({1, 2, 3, 4}, {1, 4, 1});
    AttentionOptions o = math_opts();
    o.scale = 1.0;
    AttentionMask m;
    m.causal = CausalAlign::top_left;  // query i sees keys j <= i
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, m, o, &w);
    EXPECT_TRUE(all_close(vec(w), std::vector<float>{1, 0, 0, 0, 1 / 3.f, 2 / 3.f, 0, 0}, kTolHand, 0));
    EXPECT_TRUE(all_close(vec(out), std::vector<float>{1.f, 5 / 3.f}, kTolHand, kTolHand));
    m.causal = CausalAlign::bottom_right;  // query i sees keys j <= i + Tk − Tq = i + 2
    out = scaled_dot_product_attention(q, k, v, m, o, &w);
    EXPECT_TRUE(all_close(vec(w), std::vector<float>{1 / 6.f, 2 / 6.f, 3 / 6.f, 0, 1 / 7.f, 2 / 7.f, 3 / 7.f, 1 / 7.f},
                          kTolHand, 0));
    EXPECT_TRUE(all_close(vec(out), std::vector<float>{14 / 6.f, 18 / 7.f}, kTolHand, kTolHand));
}

TEST(AttentionMath, CausalBottomRightWithMoreQueriesThanKeys) {
    // Tq = 4 > Tk = 2, bottom_right: query i sees keys j <= i − 2, so queries 0 and 1 see nothing
    // (output 0, never NaN); query 2 sees key 0; query 3 sees both (equal scores: ½, ½).
    Tensor q = zeros({1, 4, 2}), k = zeros({1, 2, 2});
    Tensor v = from_vector<float>({1, 10, 3, 30}, {1, 2, 2});
    AttentionMask m;
    m.causal = CausalAlign::bottom_right;
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, m, math_opts(), &w);
    EXPECT_EQ(vec(w), (std::vector<float>{0, 0, 0, 0, 1, 0, 0.5f, 0.5f}));
    EXPECT_EQ(vec(out), (std::vector<float>{0, 0, 0, 0, 1, 10, 2, 20}));
    // top_left with the same shapes: query i sees keys j <= i.
    m.causal = CausalAlign::top_left;
    scaled_dot_product_attention(q, k, v, m, math_opts(), &w);
    EXPECT_EQ(vec(w), (std::vector<float>{1, 0, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}));
}

TEST(AttentionMath, CausalCombinesWithValidLens) {
    // D2L's decoder training mask dec_valid_lens = 1..T is the top-left causal mask.
    Generator g(8);
    Tensor q = randn({2, 4, 3}, &g), k = randn({2, 4, 3}, &g), v = randn({2, 4, 3}, &g);
    AttentionMask causal;
    causal.causal = CausalAlign::top_left;
    AttentionMask lens;
    lens.valid_lens = from_vector<int64_t>({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4});
    EXPECT_EQ(vec(weights_of(q, k, v, causal)), vec(weights_of(q, k, v, lens)));
    // Both at once: the smaller limit wins (valid_lens 2 for batch 1 caps rows 2, 3).
    AttentionMask both;
    both.causal     = CausalAlign::top_left;
    both.valid_lens = from_vector<int64_t>({4, 2}, {2});
    AttentionMask expect;
    expect.valid_lens = from_vector<int64_t>({1, 2, 3, 4, 1, 2, 2, 2}, {2, 4});
    EXPECT_EQ(vec(weights_of(q, k, v, both)), vec(weights_of(q, k, v, expect)));
}

TEST(AttentionMath, BoolAndAdditiveMasks) {
    Generator g(9);
    Tensor q = randn({2, 3, 4}, &g), k = randn({2, 5, 4}, &g), v = randn({2, 5, 3}, &g);
    // A bool mask (true = attend) broadcast over queries equals valid_lens [2, 4].
    std::vector<bool> keep = {true, true, false, false, false, true, true, true, true, false};
    AttentionMask mb;
    mb.mask = from_vector(keep, {2, 1, 5});
    AttentionMask ml;
    ml.valid_lens = from_vector<int64_t>({2, 4}, {2});
    EXPECT_TRUE(all_close(vec(weights_of(q, k, v, mb)), vec(weights_of(q, k, v, ml)), kTolHand, 0));
    // An additive mask with −inf where masked gives the same weights.
    std::vector<float> add(10);
    for (size_t i = 0; i < 10; ++i) add[i] = keep[i] ? 0.f : -INFINITY;
    AttentionMask ma;
    ma.mask = from_vector(add, {2, 1, 5});
    EXPECT_TRUE(all_close(vec(weights_of(q, k, v, ma)), vec(weights_of(q, k, v, ml)), kTolHand, 0));
    // A finite additive bias shifts the logits: equal scores + [0, ln 2] -> [1/3, 2/3].
    Tensor qz = zeros({1, 1, 2}), kz = zeros({1, 2, 2}), vz = zeros({1, 2, 1});
    AttentionMask mf;
    mf.mask = from_vector<float>({0.f, float(std::log(2.0))}, {1, 1, 2});
    EXPECT_TRUE(all_close(vec(weights_of(qz, kz, vz, mf)), std::vector<float>{1 / 3.f, 2 / 3.f}, kTolHand, 0));
    // A bool row of all false is fully masked: zeros, not NaN.
    AttentionMask mz;
    mz.mask = from_vector<bool>({false, false}, {1, 1, 2});
    EXPECT_EQ(vec(weights_of(qz, kz, vz, mz)), (std::vector<float>{0, 0}));
    // Masks that do not broadcast are rejected, naming the mask and its shape.
    AttentionMask bad;
    bad.mask = from_vector<bool>({true, false, true}, {1, 1, 3});
    try {
        weights_of(qz, kz, vz, bad);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("mask of shape (1, 1, 3) does not broadcast"), std::string::npos)
            << e.what();
    }
}

TEST(AttentionMath, HugeLogitsStayFiniteAndRowsSumToOne) {
    // Scores of about ±1e4 (q·k/√D with entries ±100): exp would overflow without the max shift.
    Generator g(10);
    Tensor q = mul(randn({2, 2, 6, 4}, &g), 100.0).requires_grad_();
    Tensor k = mul(randn({2, 2, 7, 4}, &g), 100.0).requires_grad_();
    Tensor v = randn({2, 2, 7, 5}, &g).requires_grad_();
    AttentionMask m;
    m.valid_lens = from_vector<int64_t>({7, 3}, {2});
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, m, math_opts(), &w);
    const std::vector<float> ww = vec(w);
    float max_score = 0;
    for (float x : vec(matmul(q, k.transpose(-1, -2)))) max_score = std::max(max_score, std::abs(x) / 2);
    EXPECT_GT(max_score, 5e3f);  // the test really reaches the ±1e4 range
    for (int64_t r = 0; r < 2 * 2 * 6; ++r) {
        double s = 0;
        for (int64_t j = 0; j < 7; ++j) s += ww[size_t(r * 7 + j)];
        EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
    }
    out.backward(ones(out.shape()));
    for (const Tensor& t : {out, q.grad(), k.grad(), v.grad()})
        for (float x : vec(t)) ASSERT_TRUE(std::isfinite(x));
}

TEST(AttentionMath, RowsSumToOneUnderRandomMasks) {
    Generator g(11);
    for (int trial = 0; trial < 5; ++trial) {
        const int64_t Tq = 1 + trial * 3, Tk = 2 + trial * 5;
        Tensor q = randn({3, Tq, 8}, &g), k = randn({3, Tk, 8}, &g), v = randn({3, Tk, 8}, &g);
        std::vector<int64_t> lens;
        for (int64_t i = 0; i < 3 * Tq; ++i) lens.push_back(1 + int64_t(g.randint(uint64_t(Tk))));
        AttentionMask m;
        m.valid_lens = from_vector(lens, {3, Tq});
        m.causal     = trial % 2 ? CausalAlign::bottom_right : CausalAlign::none;
        for (float s : vec(sum(weights_of(q, k, v, m), {-1}))) {
            // bottom_right with Tq > Tk can fully mask a row: then the row is 0, else it sums to 1.
            EXPECT_TRUE(std::abs(s - 1.f) < 1e-5f || s == 0.f) << s;
        }
    }
}

TEST(AttentionMath, GradcheckFloat64WithMasks) {
    Tensor lens = from_vector<int64_t>({3, 1, 2, 4}, {2, 2});
    for (CausalAlign c : {CausalAlign::none, CausalAlign::top_left, CausalAlign::bottom_right}) {
        GradcheckResult r = gradcheck(
            [&](const std::vector<Tensor>& x) {
                AttentionMask m;
                m.valid_lens = lens;
                m.causal     = c;
                return scaled_dot_product_attention(x[0], x[1], x[2], m, math_opts());
            },
            {randn({2, 2, 3}, nullptr, 0, 1, DType::f64).requires_grad_(),
             randn({2, 4, 3}, nullptr, 0, 1, DType::f64).requires_grad_(),
             randn({2, 4, 2}, nullptr, 0, 1, DType::f64).requires_grad_()});
        EXPECT_TRUE(r.ok) << int(c) << ": " << r.message;
    }
}

TEST(AttentionMath, FloatValidLensNanThrowsInfOrHugeMeansTkNegativeMeansZeroOnBothBackends) {
    // NaN, +inf and 1e30 once crashed the flash kernel (an undefined float -> int64 conversion) and
    // gave zeros on the math path; every reader now clamps to [0, Tk] and NaN throws.
    Generator g(11);
    Tensor q = randn({2, 1, 5, 8}, &g), k = randn({2, 1, 5, 8}, &g), v = randn({2, 1, 5, 8}, &g);
    AttentionMask ref;
    ref.valid_lens = from_vector<int64_t>({3, 5}, {2});
    for (AttentionBackend be : {AttentionBackend::math, AttentionBackend::flash}) {
        AttentionOptions o;
        o.backend = be;
        const std::vector<float> want = vec(scaled_dot_product_attention(q, k, v, ref, o));
        AttentionMask nan;
        nan.valid_lens = from_vector<float>({3.f, NAN}, {2});
        const std::string msg = error_of([&] { scaled_dot_product_attention(q, k, v, nan, o); });
        EXPECT_NE(msg.find("valid_lens[1]"), std::string::npos) << int(be) << ": " << msg;
        EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
        for (float big : {INFINITY, 1e30f, 6.f, 4.5e9f}) {
            AttentionMask m;
            m.valid_lens = from_vector<float>({2.5f, big}, {2});
            EXPECT_EQ(vec(scaled_dot_product_attention(q, k, v, m, o)), want) << int(be) << " " << big;
        }
        AttentionMask neg;
        neg.valid_lens = from_vector<float>({3.f, -INFINITY}, {2});
        AttentionMask neg_i;
        neg_i.valid_lens = from_vector<int64_t>({3, -7}, {2});
        for (const AttentionMask& m : {neg, neg_i}) {
            const std::vector<float> out = vec(scaled_dot_product_attention(q, k, v, m, o));
            EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 40), std::vector<float>(want.begin(),
                      want.begin() + 40)) << int(be);
            for (size_t i = 40; i < 80; ++i) EXPECT_EQ(out[i], 0.f) << int(be) << " " << i;  // no key
        }
    }
    // masked_softmax and sequence_mask read lengths the same way.
    Tensor X = randn({2, 3, 5}, &g);
    EXPECT_TRUE(all_close(vec(masked_softmax(X, from_vector<float>({INFINITY, 1e30f}, {2}))),
                          vec(masked_softmax(X)), 1e-7, 1e-7));
    std::string msg = error_of([&] { masked_softmax(X, from_vector<float>({NAN, 1.f}, {2})); });
    EXPECT_NE(msg.find("masked_softmax: valid_lens[0]"), std::string::npos) << msg;
    msg = error_of([&] { sequence_mask(X, from_vector<double>({1.0, NAN}, {2})); });
    EXPECT_NE(msg.find("sequence_mask: valid_lens[1]"), std::string::npos) << msg;
    const std::vector<float> sm = vec(sequence_mask(X, from_vector<float>({INFINITY, -INFINITY}, {2}))),
                             x = vec(X);
    for (size_t i = 0; i < 30; ++i) EXPECT_EQ(sm[i], i < 15 ? x[i] : 0.f) << i;
}

TEST(AttentionMath, ScaleMustBeFiniteAndNegativeIsUsedAsGivenOnBothBackends) {
    // Once NaN (and every value <= 0) silently meant 1/sqrt(D) and inf gave NaN output.
    Generator g(12);
    Tensor q = randn({1, 2, 3, 4}, &g), k = randn({1, 2, 5, 4}, &g), v = randn({1, 2, 5, 4}, &g);
    for (AttentionBackend be : {AttentionBackend::math, AttentionBackend::flash}) {
        AttentionOptions o;
        o.backend = be;
        for (double s : {double(NAN), double(INFINITY), -double(INFINITY), 1e39, -1e39}) {  // 1e39: inf as float
            o.scale = s;
            const std::string msg = error_of([&] { scaled_dot_product_attention(q, k, v, {}, o); });
            EXPECT_NE(msg.find("scaled_dot_product_attention: scale must be finite"), std::string::npos)
                << int(be) << ": " << msg;
        }
        o.scale = -0.5;
        const std::vector<float> neg = vec(scaled_dot_product_attention(q, k, v, {}, o));
        o.scale = 0.5;
        EXPECT_TRUE(all_close(neg, vec(scaled_dot_product_attention(mul(q, -1.0), k, v, {}, o)), 1e-6, 1e-6))
            << int(be);
        const std::vector<float> half = vec(scaled_dot_product_attention(q, k, v, {}, o));
        o.scale = 0.0;  // the default 1/sqrt(D) = 0.5 here
        EXPECT_EQ(vec(scaled_dot_product_attention(q, k, v, {}, o)), half) << int(be);
    }
}

TEST(AttentionMath, AllNanRowGivesNanAndOnlyAFullyMaskedRowGivesZeroOnBothBackends) {
    // Once the math path's max dropped NaN, so an all-NaN row came out as exact zeros.
    for (float x : vec(masked_softmax(full({1, 1, 3}, NAN)))) EXPECT_TRUE(std::isnan(x));
    for (float x : vec(masked_softmax(from_vector<float>({1.f, NAN, 2.f}, {1, 1, 3}))))
        EXPECT_TRUE(std::isnan(x));
    for (float x : vec(masked_softmax(full({1, 1, 3}, -INFINITY)))) EXPECT_EQ(x, 0.f);
    for (float x : vec(masked_softmax(full({1, 1, 3}, NAN), from_vector<int64_t>({0}, {1}))))
        EXPECT_EQ(x, 0.f);  // NaN behind the valid length is masked, never read
    for (double x : masked_softmax(full({1, 1, 3}, NAN, DType::f64)).to_vector<double>())
        EXPECT_TRUE(std::isnan(x));

    // q (2, 1, 2, 4): query row 0 of batch 0 is all NaN; batch 1 has valid_lens 0 (fully masked).
    Generator g(13);
    Tensor q = randn({2, 1, 2, 4}, &g), k = randn({2, 1, 3, 4}, &g), v = randn({2, 1, 3, 4}, &g);
    std::vector<float> qv = vec(q);
    for (size_t i = 0; i < 4; ++i) qv[i] = NAN;
    q = from_vector(qv, {2, 1, 2, 4});
    AttentionMask m;
    m.valid_lens = from_vector<int64_t>({3, 0}, {2});
    for (AttentionBackend be : {AttentionBackend::math, AttentionBackend::flash}) {
        AttentionOptions o;
        o.backend = be;
        const std::vector<float> out = vec(scaled_dot_product_attention(q, k, v, m, o));
        for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(out[i])) << int(be) << " " << i;
        for (size_t i = 4; i < 8; ++i) EXPECT_TRUE(std::isfinite(out[i])) << int(be) << " " << i;
        for (size_t i = 8; i < 16; ++i) EXPECT_EQ(out[i], 0.f) << int(be) << " " << i;
    }
}
