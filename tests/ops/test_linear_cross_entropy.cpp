// linear_cross_entropy (the output layer fused with the token loss) against its definition,
// cross_entropy(linear(x, W, b), t), evaluated in float64: the fast fp32 path's loss and its
// three gradients must be within the flash-attention rule (kErrFactor · the fp32 composition's
// own error + kErrFloor), for every reduction, label smoothing, ignored rows, no bias, row and
// vocabulary sizes around the kernels' 16-lane vectors and the thread split, 1 and 2 threads.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <string>

#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

struct Result {
    std::vector<double> loss, dx, dw, db;
};

// Loss and gradients of `fused ? linear_cross_entropy : cross_entropy∘linear` on copies of the
// inputs in `dt`; the upstream gradient is 1 (scalar) or `up` (reduction none).
Result run(bool fused, DType dt, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& t,
           const CrossEntropyOptions& o, const Tensor& up) {
    Tensor x = x0.to(dt).detach().requires_grad_(true);
    Tensor w = w0.to(dt).detach().requires_grad_(true);
    Tensor b = b0.defined() ? b0.to(dt).detach().requires_grad_(true) : Tensor();
    Tensor loss = fused ? linear_cross_entropy(x, w, b, t, o) : cross_entropy(linear(x, w, b), t, Tensor(), o);
    EXPECT_EQ(loss.dtype(), dt);
    if (o.reduction == Reduction::none)
        loss.backward(up.to(dt));
    else
        loss.backward();
    Result r;
    r.loss = loss.to(DType::f64).contiguous().to_vector<double>();
    r.dx   = x.grad().to(DType::f64).contiguous().to_vector<double>();
    r.dw   = w.grad().to(DType::f64).contiguous().to_vector<double>();
    if (b.defined()) r.db = b.grad().to(DType::f64).contiguous().to_vector<double>();
    return r;
}

double max_err(const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    return max_abs_diff(a.data(), b.data(), int64_t(std::min(a.size(), b.size())));
}

// The fused fp32 result against the float64 composition, with the fp32 composition's own error
// as the yardstick.
void expect_close_to_definition(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& t,
                                const CrossEntropyOptions& o, const std::string& what) {
    const Tensor up = from_vector(random_floats(t.numel(), 77, -1.f, 1.f), t.shape());
    const Result want = run(false, DType::f64, x, w, b, t, o, up);
    const Result ref32 = run(false, DType::f32, x, w, b, t, o, up);
    const Result got = run(true, DType::f32, x, w, b, t, o, up);
    const std::pair<const char*, std::vector<double> Result::*> parts[] = {
        {"loss", &Result::loss}, {"dx", &Result::dx}, {"dW", &Result::dw}, {"db", &Result::db}};
    for (const auto& [name, m] : parts) {
        const double e_ref = max_err(ref32.*m, want.*m), e_got = max_err(got.*m, want.*m);
        EXPECT_LE(e_got, kErrFactor * e_ref + kErrFloor)
            << what << ": " << name << " error " << e_got << " vs the fp32 composition's " << e_ref;
        for (double v : got.*m) ASSERT_TRUE(std::isfinite(v)) << what << ": " << name;
    }
}

Tensor uniform(const Shape& s, uint64_t seed, float lo, float hi) {
    return from_vector(random_floats(shape_numel(s), seed, lo, hi), s);
}

// Targets spread over [0, V), every `ignore_every`-th one replaced by the ignore id.
Tensor targets(int64_t n, int64_t V, int64_t ignore_every, int64_t ignore_id) {
    std::vector<int64_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        t[size_t(i)] = ignore_every > 0 && i % ignore_every == ignore_every - 1 ? ignore_id : (i * 7919 + 3) % V;
    return from_vector(t, {n});
}

}  // namespace

TEST(LinearCrossEntropy, MatchesTheCompositionInFloat64) {
    ASSERT_EQ(kernel_mode(), KernelMode::fast);
    // 2000 rows: the bias gradient sums ~1000 rows per thread.
    const int64_t shapes[][3] = {{1, 8, 5},        {7, 31, 65},    {64, 64, 1000},
                                 {129, 16, 4099},  {33, 256, 17},  {2000, 8, 300}};
    uint64_t seed = 1;
    for (const auto& s : shapes) {
        const int64_t N = s[0], C = s[1], V = s[2];
        const Tensor x = uniform({N, C}, ++seed, -1.f, 1.f);
        const Tensor w = uniform({V, C}, ++seed, -0.5f, 0.5f);
        const Tensor b = uniform({V}, ++seed, -0.5f, 0.5f);
        for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none})
            for (double eps : {0.0, 0.1})
                for (bool with_bias : {true, false}) {
                    CrossEntropyOptions o;
                    o.reduction = red;
                    o.label_smoothing = eps;
                    o.ignore_index = 0;
                    const Tensor t = targets(N, V, 4, 0);
                    expect_close_to_definition(x, w, with_bias ? b : Tensor(), t, o,
                                               detail::str(N, "x", C, "x", V, " red ", int(red), " eps ", eps,
                                                           with_bias ? "" : " no bias"));
                }
    }
}

TEST(LinearCrossEntropy, SameOnOneAndTwoThreadsAndWithLeadingDims) {
    const int max_threads = omp_get_max_threads();
    const Tensor x = uniform({4, 25, 48}, 5, -1.f, 1.f), w = uniform({3001, 48}, 6, -0.3f, 0.3f),
                 b = uniform({3001}, 7, -0.3f, 0.3f);
    std::vector<int64_t> tv(100);
    for (int64_t i = 0; i < 100; ++i) tv[size_t(i)] = i % 9 == 0 ? -100 : (i * 131) % 3001;
    const Tensor t = from_vector(tv, {4, 25});
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        expect_close_to_definition(x, w, b, t, CrossEntropyOptions{}, detail::str(threads, " threads, (4, 25, 48)"));
    }
    omp_set_num_threads(max_threads);
}

TEST(LinearCrossEntropy, LargeLogitsStayFinite) {
    // Logits up to about ±1e4: the logsumexp must subtract the row maximum (V = 1500: over more
    // than one 16-lane vector pass and OpenMP split).
    for (int64_t V : {70, 1500}) {
        const Tensor x = uniform({9, 16}, 11, -1.f, 1.f);
        const Tensor w = mul(uniform({V, 16}, 12, -1.f, 1.f), 1000.0);
        const Tensor b = uniform({V}, 13, -1.f, 1.f);
        CrossEntropyOptions o;
        o.label_smoothing = 0.1;
        expect_close_to_definition(x, w, b, targets(9, V, 0, -100), o, detail::str("logits of order 1e4, V ", V));
    }
}

TEST(LinearCrossEntropy, EveryRowIgnoredGivesZeroLossAndZeroGradients) {
    Tensor x = uniform({3, 8}, 21, -1.f, 1.f).requires_grad_(true);
    Tensor w = uniform({10, 8}, 22, -1.f, 1.f).requires_grad_(true);
    Tensor b = uniform({10}, 23, -1.f, 1.f).requires_grad_(true);
    Tensor loss = linear_cross_entropy(x, w, b, from_vector<int64_t>({-100, -100, -100}, {3}));
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    for (const Tensor& g : {x.grad(), w.grad(), b.grad()})
        for (float v : g.contiguous().to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(LinearCrossEntropy, EmptyBatch) {
    Tensor x = Tensor::empty({0, 8}, DType::f32).requires_grad_(true);
    Tensor w = uniform({10, 8}, 31, -1.f, 1.f).requires_grad_(true);
    Tensor b = uniform({10}, 32, -1.f, 1.f).requires_grad_(true);
    Tensor loss = linear_cross_entropy(x, w, b, Tensor::empty({0}, DType::i64));
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    EXPECT_EQ(x.grad().shape(), (Shape{0, 8}));
    for (float v : w.grad().contiguous().to_vector<float>()) EXPECT_EQ(v, 0.f);
    for (float v : b.grad().contiguous().to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(LinearCrossEntropy, BadArgumentsNameTheProblem) {
    const Tensor x = uniform({2, 4}, 41, -1.f, 1.f), w = uniform({5, 4}, 42, -1.f, 1.f), b = zeros({5});
    const auto throws_with = [](auto f, const std::string& text) { expect_error_containing(f, text); };
    throws_with([&] { linear_cross_entropy(x, w, b, from_vector<int64_t>({1, 5}, {2})); },
                "target 5 at position 1 is out of range for 5 classes");
    throws_with([&] { linear_cross_entropy(x, w, b, from_vector<int64_t>({1}, {1})); }, "target must be int64 of shape");
    throws_with([&] { linear_cross_entropy(x, uniform({5, 3}, 43, -1.f, 1.f), b, from_vector<int64_t>({1, 2}, {2})); },
                "does not match weight");
    throws_with([&] { linear_cross_entropy(x, w, zeros({4}), from_vector<int64_t>({1, 2}, {2})); },
                "does not match V = 5");
    throws_with([&] { linear_cross_entropy(x.to(DType::f64), w, b, from_vector<int64_t>({1, 2}, {2})); },
                "dtypes differ");
}

TEST(LinearCrossEntropy, NaNLogitReachesTheLoss) {
    // A NaN weight row gives every row one NaN logit; the loss of every row must be NaN, not a
    // finite value from the other logits. A NaN in one row of x makes only that row's loss NaN.
    const int64_t N = 6, C = 8, V = 1500;
    const Tensor x = uniform({N, C}, 51, -1.f, 1.f), b = uniform({V}, 53, -0.5f, 0.5f);
    std::vector<float> wv = uniform({V, C}, 52, -0.5f, 0.5f).to_vector<float>();
    wv[size_t(700 * C + 3)] = NAN;
    const Tensor w = from_vector(wv, {V, C});
    CrossEntropyOptions o;
    o.reduction = Reduction::none;
    for (float v : linear_cross_entropy(x, w, b, targets(N, V, 0, -100), o).to_vector<float>())
        EXPECT_TRUE(std::isnan(v));
    std::vector<float> xv = x.to_vector<float>();
    xv[size_t(2 * C + 5)] = NAN;
    const std::vector<float> per =
        linear_cross_entropy(from_vector(xv, {N, C}), uniform({V, C}, 52, -0.5f, 0.5f), b, targets(N, V, 0, -100), o)
            .to_vector<float>();
    for (int64_t r = 0; r < N; ++r) EXPECT_EQ(std::isnan(per[size_t(r)]), r == 2) << "row " << r;
}

// float64 and KernelMode::reference run cross_entropy(linear(...)); its errors said
// "cross_entropy: ...". Every argument error names linear_cross_entropy on every path.
TEST(LinearCrossEntropy, ErrorsNameTheOpOnEveryPath) {
    auto throws_with = [](auto f, const std::string& text, const std::string& path) {
        try {
            f();
            ADD_FAILURE() << path << ": no exception; expected one containing '" << text << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << path << ": " << e.what();
        }
    };
    const std::pair<KernelMode, DType> paths[] = {
        {KernelMode::fast, DType::f32}, {KernelMode::reference, DType::f32}, {KernelMode::fast, DType::f64}};
    for (const auto& [mode, dt] : paths) {
        set_kernel_mode(mode);
        const std::string path = detail::str(dtype_name(dt), mode == KernelMode::fast ? " fast" : " ref");
        const Tensor x = uniform({2, 4}, 41, -1.f, 1.f).to(dt), w = uniform({5, 4}, 42, -1.f, 1.f).to(dt);
        const Tensor b = zeros({5}, dt), t = from_vector<int64_t>({1, 2}, {2});
        throws_with([&] { linear_cross_entropy(x, w, b, from_vector<int64_t>({1, 5}, {2})); },
                    "linear_cross_entropy: target 5 at position 1 is out of range for 5 classes", path);
        throws_with([&] { linear_cross_entropy(x, w, b, from_vector<int64_t>({-3, 0}, {2})); },
                    "linear_cross_entropy: target -3 at position 0 is out of range for 5 classes", path);
        CrossEntropyOptions o;
        o.label_smoothing = 1.5;
        throws_with([&] { linear_cross_entropy(x, w, b, t, o); },
                    "linear_cross_entropy: label_smoothing must be in [0, 1], got 1.5", path);
        throws_with([&] { linear_cross_entropy(x, w, b, from_vector<int64_t>({1}, {1})); },
                    "linear_cross_entropy: target must be int64 of shape (2,)", path);
        throws_with([&] { linear_cross_entropy(x, w, zeros({4}, dt), t); }, "linear_cross_entropy: bias of shape (4,)",
                    path);
        throws_with([&] { linear_cross_entropy(x.to(DType::i64), w.to(DType::i64), Tensor(), t); },
                    "linear_cross_entropy: x must be float32 or float64, got int64", path);
    }
    set_kernel_mode(KernelMode::fast);
}

// C = 0 (weight (V, 0)): the logits are the bias on every row, as for cross_entropy(linear(...));
// dx and dW are empty, db is the loss's gradient with respect to those logits summed over rows.
// Both dtypes, fast and reference kernels (C = 0 crashed in linear's reshape). V = 0 is refused.
TEST(LinearCrossEntropy, ZeroInFeaturesIsTheLossOfTheBias) {
    const Tensor t = from_vector<int64_t>({0, 3, -100}, {3});
    const Tensor up = from_vector<float>({0.5f, -2.f, 1.f}, {3});
    for (KernelMode mode : {KernelMode::fast, KernelMode::reference})
        for (DType dt : {DType::f32, DType::f64})
            for (Reduction red : {Reduction::mean, Reduction::none}) {
                set_kernel_mode(mode);
                const std::string what = detail::str(dtype_name(dt), mode == KernelMode::fast ? " fast" : " ref",
                                                     " reduction ", int(red));
                CrossEntropyOptions o;
                o.reduction = red;
                o.label_smoothing = 0.1;
                Tensor x = zeros({3, 0}, dt).requires_grad_(true);
                Tensor w = zeros({4, 0}, dt).requires_grad_(true);
                Tensor b = from_vector<float>({0.5f, -1.f, 2.f, 0.f}, {4}).to(dt).detach().requires_grad_(true);
                Tensor loss = linear_cross_entropy(x, w, b, t, o);
                Tensor b64 = b.detach().to(DType::f64).requires_grad_(true);
                Tensor want = cross_entropy(b64.unsqueeze(0).expand({3, 4}), t, Tensor(), o);
                EXPECT_TRUE(all_close(loss.to(DType::f64).contiguous().to_vector<double>(),
                                      want.contiguous().to_vector<double>(), 1e-6, 1e-6))
                    << what;
                if (red == Reduction::none) {
                    loss.backward(up.to(dt));
                    want.backward(up.to(DType::f64));
                } else {
                    loss.backward();
                    want.backward();
                }
                EXPECT_EQ(x.grad().shape(), (Shape{3, 0})) << what;
                EXPECT_EQ(w.grad().shape(), (Shape{4, 0})) << what;
                EXPECT_TRUE(all_close(b.grad().to(DType::f64).to_vector<double>(), b64.grad().to_vector<double>(),
                                      1e-6, 1e-6))
                    << what;
            }
    set_kernel_mode(KernelMode::fast);
    try {
        linear_cross_entropy(zeros({3, 2}), zeros({0, 2}), Tensor(), t);
        ADD_FAILURE() << "V = 0 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("linear_cross_entropy: weight has no output rows: (0, 2)"),
                  std::string::npos)
            << e.what();
    }
}
