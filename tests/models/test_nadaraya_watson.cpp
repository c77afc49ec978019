// Nadaraya–Watson: parity of the seed program and of D2L ZH's parametric model with PyTorch
// (tools/gen_fixtures.py), hand-derived estimator values, float64 gradchecks, and the CSV reader.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "support/temp_dir.h"
#include "qkv/autograd/gradcheck.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/nadaraya_watson.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::models;
using namespace qkv::test;

namespace {

/// Per-epoch loss and w vs PyTorch: the 1e-4 relative. Both sides are fp32; after 20 SGD
/// steps over sums of 150 × 149 terms the observed drift is ~1e-6 relative, so 1e-4 has margin
/// without hiding a wrong formula (a missing ½ or a sum-vs-mean changes values by ≥ 2×).
constexpr double kTolNWRel = 1e-4;

std::map<std::string, Tensor> fixture(const std::string& name) {
    return io::load_safetensors(std::string(QKV_FIXTURE_DIR) + "/" + name + ".safetensors");
}

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
    const std::string p = dir / name;
    std::ofstream(p) << text;
    return p;
}

}  // namespace

TEST(NadarayaWatson, SeedProgramMatchesPyTorchEveryEpoch) {
    auto fx = fixture("nw_seed");
    NWKernelRegression model(1.0);
    const auto hist = train_nw(model, fx.at("x_train"), fx.at("y_train"), NWTrainConfig{});
    const auto loss = fx.at("loss").to_vector<double>();
    const auto w    = fx.at("w").to_vector<double>();
    ASSERT_EQ(hist.size(), loss.size());
    for (size_t i = 0; i < hist.size(); ++i) {
        EXPECT_EQ(hist[i].epoch, int64_t(i + 1));
        EXPECT_NEAR(hist[i].loss, loss[i], kTolNWRel * std::abs(loss[i])) << "epoch " << i + 1;
        EXPECT_NEAR(hist[i].w, w[i], kTolNWRel * std::abs(w[i])) << "epoch " << i + 1;
    }
    // The trained model on the test grid (keys/values = all training points, shared).
    Tensor y_hat = model.forward(fx.at("x_test"), fx.at("x_train"), fx.at("y_train"));
    EXPECT_TRUE(all_close(y_hat.to_vector<float>(), fx.at("y_hat_test").to_vector<float>(),
                          kTolGoldenAtol, kTolGoldenRtol));
    EXPECT_EQ(model.attention_weights().shape(), (Shape{50, 150}));
}

TEST(NadarayaWatson, D2LZhParametricMatchesPyTorch) {
    auto fx = fixture("nw_zh");
    NWKernelRegression model(fx.at("w0").item());
    NWTrainConfig cfg;
    cfg.epochs = 5;
    cfg.loss   = NWLoss::sum;
    const auto hist = train_nw(model, fx.at("x_train"), fx.at("y_train"), cfg);
    const auto loss = fx.at("loss").to_vector<double>();
    const auto w    = fx.at("w").to_vector<double>();
    ASSERT_EQ(hist.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_NEAR(hist[i].loss, loss[i], kTolNWRel * std::abs(loss[i])) << "epoch " << i + 1;
        EXPECT_NEAR(hist[i].w, w[i], kTolNWRel * std::abs(w[i])) << "epoch " << i + 1;
    }
}

TEST(NadarayaWatson, NonParametricHandValues) {
    // q = 0, keys [0, 1], values [1, 3], σ = 1: weights ∝ [1, e^−½].
    const double a = 1.0 / (1.0 + std::exp(-0.5));
    NWResult r = nadaraya_watson(from_vector<double>({0.0}, {1}), from_vector<double>({0, 1}, {2}),
                                 from_vector<double>({1, 3}, {2}));
    EXPECT_NEAR(r.predictions.item(), a * 1 + (1 - a) * 3, 1e-12);
    // σ = 0.5: weights ∝ [1, e^−2].
    const double b = 1.0 / (1.0 + std::exp(-2.0));
    r = nadaraya_watson(from_vector<double>({0.0}, {1}), from_vector<double>({0, 1}, {2}),
                        from_vector<double>({1, 3}, {2}), 0.5);
    EXPECT_NEAR(r.attention_weights.to_vector<double>()[0], b, 1e-12);
    EXPECT_NEAR(r.predictions.item(), b * 1 + (1 - b) * 3, 1e-12);
}

TEST(NadarayaWatson, WidthSigmaEqualsParametricWOneOverSigma) {
    Generator g(3);
    Tensor q = rand({7}, &g, 0, 5), k = rand({7, 9}, &g, 0, 5), v = randn({7, 9}, &g);
    NWKernelRegression model(1.0 / 0.3);
    Tensor p = model.forward(q, k, v);
    NWResult r = nadaraya_watson(q, k, v, 0.3);
    EXPECT_TRUE(all_close(p.to_vector<float>(), r.predictions.to_vector<float>(), 1e-6, 1e-5));
    // Rows of the weights sum to 1.
    for (float s : sum(model.attention_weights(), {1}).to_vector<float>()) EXPECT_NEAR(s, 1.f, 1e-6);
}

TEST(NadarayaWatson, BookBatchMatmulDemo) {
    // D2L §4: weights 0.1 (2, 10) pooled over arange(20) reshaped (2, 10) -> 4.5 and 14.5.
    Tensor w = full({2, 1, 10}, 0.1);
    Tensor v = arange(0, 20).reshape({2, 10, 1});
    EXPECT_TRUE(all_close(matmul(w, v).to_vector<float>(), std::vector<float>{4.5f, 14.5f}, 1e-6,
                          1e-6));
}

TEST(NadarayaWatson, LeaveOneOutDropsTheDiagonal) {
    Tensor t = leave_one_out(from_vector<float>({1, 2, 3}, {3}));
    EXPECT_EQ(t.shape(), (Shape{3, 2}));
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2, 3, 1, 3, 1, 2}));
    EXPECT_THROW(leave_one_out(from_vector<float>({1}, {1})), Error);
}

TEST(NadarayaWatson, GradcheckFloat64) {
    GradcheckResult r = gradcheck(
        [](const std::vector<Tensor>& x) { return nadaraya_watson(x[0], x[1], x[2], 0.7).predictions; },
        {rand({3}, nullptr, 0, 2, DType::f64).requires_grad_(),
         rand({3, 4}, nullptr, 0, 2, DType::f64).requires_grad_(),
         rand({3, 4}, nullptr, -1, 1, DType::f64).requires_grad_()});
    EXPECT_TRUE(r.ok) << r.message;
    NWKernelRegression model;
    r = gradcheck(
        [&](const std::vector<Tensor>& x) {
            model.w = x[3];  // an f64 w for the check (the registered f32 parameter is unused)
            return model.forward(x[0], x[1], x[2]);
        },
        {rand({3}, nullptr, 0, 2, DType::f64).requires_grad_(),
         rand({4}, nullptr, 0, 2, DType::f64).requires_grad_(),
         rand({4}, nullptr, -1, 1, DType::f64).requires_grad_(),
         scalar_tensor(1.3, DType::f64).requires_grad_()});
    EXPECT_TRUE(r.ok) << r.message;
}

TEST(NadarayaWatson, RejectsBadShapesAndWidths) {
    Tensor q = zeros({3}), k = zeros({3, 4});
    EXPECT_NE(error_of([&] { nadaraya_watson(q, zeros({2, 4}), zeros({2, 4})); }).find("keys must be (N, M)"),
              std::string::npos);
    EXPECT_NE(error_of([&] { nadaraya_watson(q, k, zeros({3, 5})); }).find("same shape"),
              std::string::npos);
    EXPECT_NE(error_of([&] { nadaraya_watson(q, k, k, 0.0); }).find("width must be positive"),
              std::string::npos);
    EXPECT_THROW(nadaraya_watson(zeros({3, 1}), k, k), Error);
    NWKernelRegression model;
    EXPECT_THROW(train_nw(model, zeros({3}), zeros({4}), {}), Error);
}

TEST(NadarayaWatson, DivergingTrainingThrowsNamingTheEpoch) {
    Generator g(5);
    NWData d = make_nw_data(NWPreset::seed, 20, g);
    NWKernelRegression model(1.0);
    NWTrainConfig cfg;
    cfg.lr = 1e30;
    const std::string msg = error_of([&] { train_nw(model, d.x_train, d.y_train, cfg); });
    EXPECT_NE(msg.find("not finite at epoch"), std::string::npos) << msg;
    // Both causes are named: a too-large step, or data whose squared error overflows.
    EXPECT_NE(msg.find("lower --lr, or scale the data down"), std::string::npos) << msg;
}

TEST(NadarayaWatson, MakeDataIsSortedSeededAndInRange) {
    Generator g1(7), g2(7);
    NWData a = make_nw_data(NWPreset::zh, 50, g1), b = make_nw_data(NWPreset::zh, 50, g2);
    const auto x = a.x_train.to_vector<float>();
    ASSERT_EQ(x.size(), 50u);
    EXPECT_TRUE(std::is_sorted(x.begin(), x.end()));
    for (float v : x) EXPECT_TRUE(v >= 0.f && v < 5.f) << v;
    EXPECT_EQ(x, b.x_train.to_vector<float>());
    EXPECT_EQ(a.y_train.to_vector<float>(), b.y_train.to_vector<float>());
    EXPECT_EQ(a.x_test.shape(), (Shape{50}));
    EXPECT_NEAR(a.x_test.to_vector<float>()[49], 4.9f, 1e-6);
    // y_true = 2 sin x + x^0.8 at x = 1.
    EXPECT_NEAR(nw_target(from_vector<float>({1.f}, {1}), NWPreset::zh).item(), 2 * std::sin(1.0) + 1.0, 1e-6);
    EXPECT_NEAR(nw_target(from_vector<float>({2.f}, {1}), NWPreset::seed).item(),
                2.333 * std::sin(2.0) + std::pow(2.0, 0.666), 1e-5);
}

TEST(NadarayaWatsonCsv, ReadsHeaderCommentsAndSorts) {
    TempDir dir;
    const auto p = write_file(dir, "d.csv", "# made by hand\nx,y\n\n3, 30\n1,10\r\n2.5e0,-2\n");
    auto [x, y] = read_xy_csv(p);
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2.5f, 3}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, -2, 30}));
}

TEST(NadarayaWatsonCsv, BadRowsNameTheirLine) {
    TempDir dir;
    auto msg = error_of([&] { read_xy_csv(write_file(dir, "a.csv", "x,y\n1,2\n3,four\n")); });
    EXPECT_NE(msg.find("a.csv:3: expected two numbers"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "b.csv", "1,2\n3,4,5\n")); });
    EXPECT_NE(msg.find("b.csv:2:"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "c.csv", "1,2\nnan,4\n")); });
    EXPECT_NE(msg.find("c.csv:2: values must be finite"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "d.csv", "1,inf\n2,3\n4,5\n")); });
    EXPECT_NE(msg.find("d.csv:1: values must be finite"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "g.csv", "1,2\n-1e300,4\n0,1\n")); });  // sorted first
    EXPECT_NE(msg.find("g.csv:2: values must fit in float32"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "e.csv", "1,abc\n2,3\n")); });
    EXPECT_NE(msg.find("e.csv:1: expected two numbers"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(write_file(dir, "f.csv", "x,y\n1,2\n")); });
    EXPECT_NE(msg.find("at least 2 data rows"), std::string::npos) << msg;
    msg = error_of([&] { read_xy_csv(dir / "missing.csv"); });
    EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}
