// Forward values and error messages of the dense NN ops (cross_entropy, dropout, embedding,
// layer_norm, softmax, matmul) against hand-derived values or compositions of simpler ops.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/dropout.h"
#include "qkv/ops/embedding.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/softmax.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

TEST(CrossEntropy, MatchesLogSoftmaxComposition) {
    Generator g(1);
    Tensor x = randn({5, 7}, &g);
    Tensor t = from_vector<int64_t>({0, 6, 3, 3, 1}, {5});
    const double ce = cross_entropy(x, t).item();
    Tensor ls = log_softmax(x, -1);
    double want = 0;
    for (int64_t i = 0; i < 5; ++i) want -= ls.select(0, i).select(0, t.to_vector<int64_t>()[size_t(i)]).item();
    EXPECT_NEAR(ce, want / 5, 1e-6);
}

TEST(CrossEntropy, D2LMaskedLossCheck) {
    // D2L 10.7 MaskedSoftmaxCELoss: ones logits (3, 4, 10), labels ones, valid lens [4, 2, 0]
    // -> per-sequence mean over 4 steps: [2.3026, 1.1513, 0].
    Tensor logits = ones({3, 4, 10});
    Tensor labels = ones({3, 4}, DType::i64);
    std::vector<float> w(12, 0.f);
    const int lens[3] = {4, 2, 0};
    for (int b = 0; b < 3; ++b)
        for (int t = 0; t < lens[b]; ++t) w[size_t(b * 4 + t)] = 1.f;
    CrossEntropyOptions o;
    o.reduction = Reduction::none;
    Tensor per = cross_entropy(logits, labels, from_vector(w, {3, 4}), o);
    std::vector<float> got = mean(per, {1}).to_vector<float>();
    EXPECT_TRUE(all_close(got, std::vector<float>{2.3026f, 1.1513f, 0.f}, 1e-4, 0));
}

TEST(CrossEntropy, IgnoreIndexAndErrors) {
    Tensor x = zeros({2, 4});
    CrossEntropyOptions o;
    o.ignore_index = 1;
    EXPECT_NEAR(cross_entropy(x, from_vector<int64_t>({1, 2}, {2}), Tensor(), o).item(), std::log(4.0), 1e-6);
    try {
        cross_entropy(x, from_vector<int64_t>({0, 4}, {2}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("target 4 at position 1 is out of range for 4 classes"),
                  std::string::npos) << e.what();
    }
    EXPECT_THROW(cross_entropy(x, from_vector<int64_t>({0}, {1})), Error);
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
    Tensor x = from_vector<float>({1e4f, -1e4f, 0.f, 1e4f}, {2, 2});
    Tensor l = cross_entropy(x, from_vector<int64_t>({1, 0}, {2}));
    EXPECT_TRUE(std::isfinite(l.item()));
    EXPECT_NEAR(l.item(), (2e4 + 1e4) / 2, 1.0);
}

// Mixed dtypes used to reach the GEMM with mismatched element sizes and return garbage (a loss of
// 9e18 for an f64 bias on f32 data); an undefined input hit an internal assertion.
TEST(Linear, RefusesMixedDtypesAndUndefinedInputs) {
    const auto throws_with = [](auto f, const std::string& text) { expect_error_containing(f, text); };
    throws_with([] { linear(ones({4, 3}), ones({5, 3}, DType::f64)); }, "linear: dtypes differ: x float32, weight float64");
    throws_with([] { linear(ones({4, 3}, DType::f64), ones({5, 3})); }, "linear: dtypes differ: x float64, weight float32");
    throws_with([] { linear(ones({4, 3}), ones({5, 3}), zeros({5}, DType::f64)); }, ", bias float64");
    throws_with([] { linear(Tensor(), ones({5, 3})); }, "linear: undefined tensor argument");
}

// Zero-size operands follow torch.nn.functional.linear: in_features 0 gives the bias on every row
// (zeros without one), out_features 0 or no rows an empty result; the backward gives gradients of
// the inputs' shapes (in_features 0 crashed: reshape of the (rows, 0) input recursed forever, and
// the row count was numel / in_features = 0). Both dtypes, fast and reference kernels.
TEST(Linear, ZeroInFeaturesGivesTheBiasOnEveryRow) {
    for (KernelMode mode : {KernelMode::fast, KernelMode::reference})
        for (DType dt : {DType::f32, DType::f64}) {
            set_kernel_mode(mode);
            const std::string what = detail::str(dtype_name(dt), mode == KernelMode::fast ? " fast" : " ref");
            Tensor x = zeros({2, 3, 0}, dt).requires_grad_(true);
            Tensor w = zeros({4, 0}, dt).requires_grad_(true);
            Tensor b = from_vector<float>({1, 2, 3, 4}, {4}).to(dt).detach().requires_grad_(true);
            Tensor y = linear(x, w, b);
            ASSERT_EQ(y.shape(), (Shape{2, 3, 4})) << what;
            const std::vector<double> yv = y.to(DType::f64).contiguous().to_vector<double>();
            for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i], double(i % 4 + 1)) << what;
            const std::vector<float> up = random_floats(24, 5);
            y.backward(from_vector(up, {2, 3, 4}).to(dt));
            EXPECT_EQ(x.grad().shape(), (Shape{2, 3, 0})) << what;
            EXPECT_EQ(w.grad().shape(), (Shape{4, 0})) << what;
            std::vector<double> db(4, 0.0);
            for (size_t i = 0; i < up.size(); ++i) db[i % 4] += double(up[i]);
            EXPECT_TRUE(all_close(b.grad().to(DType::f64).to_vector<double>(), db, 1e-5, 0)) << what;
            const std::vector<double> nb = linear(x, w).to(DType::f64).contiguous().to_vector<double>();
            EXPECT_EQ(nb, std::vector<double>(24, 0.0)) << what;
        }
    set_kernel_mode(KernelMode::fast);
}

TEST(Linear, ZeroOutFeaturesOrZeroRowsGiveEmptyResults) {
    for (KernelMode mode : {KernelMode::fast, KernelMode::reference})
        for (DType dt : {DType::f32, DType::f64}) {
            set_kernel_mode(mode);
            const std::string what = detail::str(dtype_name(dt), mode == KernelMode::fast ? " fast" : " ref");
            Tensor x = ones({3, 5}, dt).requires_grad_(true);
            Tensor w = zeros({0, 5}, dt).requires_grad_(true);
            Tensor b = zeros({0}, dt).requires_grad_(true);
            Tensor y = linear(x, w, b);
            EXPECT_EQ(y.shape(), (Shape{3, 0})) << what;
            sum(y).backward();
            EXPECT_EQ(x.grad().to(DType::f64).to_vector<double>(), std::vector<double>(15, 0.0)) << what;
            EXPECT_EQ(w.grad().shape(), (Shape{0, 5})) << what;
            EXPECT_EQ(b.grad().shape(), (Shape{0})) << what;

            Tensor x0 = zeros({0, 5}, dt).requires_grad_(true);
            Tensor w0 = ones({4, 5}, dt).requires_grad_(true);
            Tensor b0 = ones({4}, dt).requires_grad_(true);
            Tensor y0 = linear(x0, w0, b0);
            EXPECT_EQ(y0.shape(), (Shape{0, 4})) << what;
            sum(y0).backward();
            EXPECT_EQ(x0.grad().shape(), (Shape{0, 5})) << what;
            EXPECT_EQ(w0.grad().to(DType::f64).to_vector<double>(), std::vector<double>(20, 0.0)) << what;
            EXPECT_EQ(b0.grad().to(DType::f64).to_vector<double>(), std::vector<double>(4, 0.0)) << what;
        }
    set_kernel_mode(KernelMode::fast);
}

TEST(Dropout, IdentityInEvalAndScaledInTraining) {
    Tensor x = ones({10000});
    EXPECT_TRUE(dropout(x, 0.3, false).is_same(x));
    Generator g(5);
    std::vector<float> y = dropout(x, 0.3, true, &g).to_vector<float>();
    int64_t kept = 0;
    for (float v : y) {
        ASSERT_TRUE(v == 0.f || std::abs(v - 1.f / 0.7f) < 1e-6);
        kept += v != 0.f;
    }
    EXPECT_NEAR(double(kept) / 10000.0, 0.7, 0.02);  // 4.5 sigma of a binomial(10000, 0.7)
    EXPECT_THROW(dropout(x, 1.0, true), Error);
    Generator g1(9), g2(9);
    EXPECT_EQ(dropout(x, 0.5, true, &g1).to_vector<float>(), dropout(x, 0.5, true, &g2).to_vector<float>());
}

// The fast fp32 backward (kernels::cpu::embedding_backward, threads split by columns) against the
// reference loop (KernelMode::reference): bit-identical, repeated ids included, on 1 and 2 threads.
TEST(Embedding, FastBackwardEqualsReferenceBitwiseWithRepeatedIds) {
    const int64_t V = 50, C = 37, n = 300;
    std::vector<int64_t> idv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idv[size_t(i)] = (i * i + 3) % 17;  // ids 0..16 repeat, 17..49 never appear
    const Tensor ids = from_vector(idv, {n});
    const Tensor w0 = from_vector(test::random_floats(V * C, 3), {V, C});
    const Tensor up = from_vector(test::random_floats(n * C, 4), {n, C});
    auto grad = [&](KernelMode mode) {
        set_kernel_mode(mode);
        Tensor w = w0.detach().requires_grad_(true);
        embedding(ids, w).backward(up);
        set_kernel_mode(KernelMode::fast);
        return w.grad().to_vector<float>();
    };
    const int max_threads = omp_get_max_threads();
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        EXPECT_EQ(grad(KernelMode::fast), grad(KernelMode::reference)) << threads << " threads";
    }
    omp_set_num_threads(max_threads);
}

TEST(Embedding, GathersRowsAndNamesBadIds) {
    Tensor w = arange(0, 6).reshape({3, 2});
    EXPECT_EQ(embedding(from_vector<int64_t>({2, 0}, {2}), w).to_vector<float>(), (std::vector<float>{4, 5, 0, 1}));
    try {
        embedding(from_vector<int64_t>({1, 3}, {2}), w);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("id 3 at position 1 is out of range for a vocabulary of 3"),
                  std::string::npos) << e.what();
    }
}

TEST(LayerNorm, BookDemo) {
    // D2L 11.7.3: LayerNorm of [[1, 2], [2, 3]] -> [[-1, 1], [-1, 1]] (eps makes it 0.99999).
    Tensor y = layer_norm(from_vector<float>({1, 2, 2, 3}, {2, 2}), {2}, ones({2}), zeros({2}));
    EXPECT_TRUE(all_close(y.to_vector<float>(), std::vector<float>{-1, 1, -1, 1}, 1e-4, 0));
    EXPECT_THROW(layer_norm(ones({2, 3}), {2}, Tensor(), Tensor()), Error);
}

// The fused AddNorm op against add + layer_norm: the same output and gradients bit for bit in
// fp32 (same additions, same kernels), and clear errors for a residual that does not match.
TEST(LayerNorm, AddLayerNormEqualsAddThenLayerNorm) {
    Generator g(11);
    const Tensor x0 = randn({3, 9, 256}, &g), r0 = randn({3, 9, 256}, &g), dy = randn({3, 9, 256}, &g);
    const Tensor w0 = add(randn({256}, &g), 1.0), b0 = randn({256}, &g);
    auto run = [&](bool fused) {
        Tensor x = x0.clone().requires_grad_(), r = r0.clone().requires_grad_();
        Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
        Tensor y = fused ? add_layer_norm(x, r, {256}, w, b) : layer_norm(add(x, r), {256}, w, b);
        sum(mul(y, dy)).backward();
        return std::vector<Tensor>{y, x.grad(), r.grad(), w.grad(), b.grad()};
    };
    const auto fused = run(true), plain = run(false);
    const char* names[] = {"y", "dx", "dresidual", "dweight", "dbias"};
    for (size_t i = 0; i < fused.size(); ++i)
        EXPECT_EQ(fused[i].to_vector<float>(), plain[i].to_vector<float>()) << names[i];
    try {
        add_layer_norm(ones({2, 4}), ones({2, 3}), {4}, Tensor(), Tensor());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("add_layer_norm: residual of shape"), std::string::npos) << e.what();
    }
    EXPECT_THROW(add_layer_norm(ones({2, 4}), Tensor(), {4}, Tensor(), Tensor()), Error);
    EXPECT_THROW(add_layer_norm(ones({2, 4}), ones({2, 4}, DType::f64), {4}, Tensor(), Tensor()), Error);
}

TEST(Softmax, RowsSumToOneAndMatchMaskedSoftmax) {
    Generator g(2);
    Tensor x = mul(randn({4, 9}, &g), 10.0);
    Tensor y = softmax(x, -1);
    for (float s : sum(y, {1}).to_vector<float>()) EXPECT_NEAR(s, 1.0, 1e-6);
    EXPECT_TRUE(all_close(y.to_vector<float>(), masked_softmax(x).to_vector<float>(), 1e-7, 1e-6));
    Tensor yl = softmax(x.transpose(0, 1), 0).transpose(0, 1);
    EXPECT_TRUE(all_close(yl.contiguous().to_vector<float>(), y.to_vector<float>(), 1e-7, 1e-6));
}

TEST(MaskedSoftmax, FullyMaskedRowIsZeroWithZeroGradient) {
    Tensor x = randn({2, 2, 4}).requires_grad_();
    Tensor y = masked_softmax(x, from_vector<int64_t>({0, 3}, {2}));
    const std::vector<float> v = y.to_vector<float>();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(v[size_t(i)], 0.f);
    for (int r = 2; r < 4; ++r) EXPECT_EQ(v[size_t(r * 4 + 3)], 0.f);
    sum(mul(y, randn({2, 2, 4}))).backward();
    const std::vector<float> gx = x.grad().to_vector<float>();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(gx[size_t(i)], 0.f);
    // sequence_mask book check (D2L ZH 9.7)
    Tensor sm = sequence_mask(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), from_vector<int64_t>({1, 2}, {2}));
    EXPECT_EQ(sm.to_vector<float>(), (std::vector<float>{1, 0, 0, 4, 5, 0}));
}

TEST(Matmul, ErrorsNameBothShapes) {
    try {
        matmul(zeros({2, 3}), zeros({4, 5}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "matmul: inner dimensions differ: (2, 3) x (4, 5)");
    }
    // batch matmul demo (D2L 11.2): weights 0.1 (2, 10) times arange(20) (2, 10) -> 4.5, 14.5
    Tensor w = full({2, 1, 10}, 0.1), v = arange(0, 20).reshape({2, 10, 1});
    EXPECT_TRUE(all_close(matmul(w, v).to_vector<float>(), std::vector<float>{4.5f, 14.5f}, 1e-5, 0));
}

// A zero inner dim gives zeros (torch.matmul), a zero outer or batch dim an empty result; the
// gradients have the operands' shapes. (2, 3, 0) x (0, 4) crashed like linear with in_features 0.
TEST(Matmul, ZeroSizedDims) {
    struct Case {
        Shape a, b, out;
    };
    const Case cases[] = {{{2, 3, 0}, {0, 4}, {2, 3, 4}}, {{2, 3, 0}, {2, 0, 4}, {2, 3, 4}},
                          {{3, 0}, {0, 4}, {3, 4}},       {{2, 3, 5}, {5, 0}, {2, 3, 0}},
                          {{2, 0, 5}, {5, 3}, {2, 0, 3}}, {{0, 2, 5}, {0, 5, 3}, {0, 2, 3}},
                          {{0}, {0}, {}},                 {{0}, {0, 3}, {3}}};
    for (KernelMode mode : {KernelMode::fast, KernelMode::reference})
        for (DType dt : {DType::f32, DType::f64})
            for (const Case& c : cases) {
                set_kernel_mode(mode);
                const std::string what = detail::str(dtype_name(dt), mode == KernelMode::fast ? " fast " : " ref ",
                                                     c.a, " x ", c.b);
                Tensor a = ones(c.a, dt).requires_grad_(true), b = ones(c.b, dt).requires_grad_(true);
                Tensor y = matmul(a, b);
                ASSERT_EQ(y.shape(), c.out) << what;
                const std::vector<double> yv = y.to(DType::f64).contiguous().to_vector<double>();
                EXPECT_EQ(yv, std::vector<double>(size_t(y.numel()), 0.0)) << what;
                sum(y).backward();
                EXPECT_EQ(a.grad().shape(), c.a) << what;
                EXPECT_EQ(b.grad().shape(), c.b) << what;
                for (const Tensor& g : {a.grad(), b.grad()})
                    for (double v : g.to(DType::f64).contiguous().to_vector<double>()) EXPECT_EQ(v, 0.0) << what;
            }
    set_kernel_mode(KernelMode::fast);
}
