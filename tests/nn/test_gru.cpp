// nn::GRU against torch.nn.GRU (tools/gen_gru_fixtures.py, torch 1.13): forward values and every
// gradient for each recurrence implementation; float64 gradcheck of the whole module; parameter
// names, shapes and init bounds; error messages.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/gradcheck.h"
#include "qkv/io/safetensors.h"
#include "qkv/nn/rnn.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

std::vector<float> vec(const Tensor& t) { return t.contiguous().to_vector<float>(); }

const char* impl_name(nn::GRUImpl i) {
    switch (i) {
        case nn::GRUImpl::sequence: return "sequence";
        case nn::GRUImpl::cell: return "cell";
        case nn::GRUImpl::composite: return "composite";
    }
    return "?";
}

class GruParity : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(GruParity, MatchesTorchForwardAndGradients) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_layer.safetensors");
    nn::GRU gru(5, 7, 2);
    gru.impl = GetParam();
    std::map<std::string, Tensor> sd;
    for (const auto& [name, t] : gru.named_parameters()) sd[name] = f.at("p." + name);
    gru.load_state_dict(sd);
    const double atol = test::kTolGoldenAtol, rtol = test::kTolGoldenRtol;
    for (bool with_h0 : {true, false}) {
        SCOPED_TRACE(std::string(impl_name(GetParam())) + (with_h0 ? " with h0" : " without h0"));
        gru.zero_grad();
        Tensor X = f.at("X").detach().requires_grad_();
        Tensor h0 = with_h0 ? f.at("h0").detach().requires_grad_() : Tensor();
        auto [out, hn] = gru.forward(X, h0);
        const std::string sfx = with_h0 ? "" : "_noh0";
        EXPECT_TRUE(test::all_close(vec(out), vec(f.at("out" + sfx)), atol, rtol));
        EXPECT_TRUE(test::all_close(vec(hn), vec(f.at("h_n" + sfx)), atol, rtol));
        Tensor loss = sum(out * f.at("R_out")) + sum(hn * f.at("R_state"));
        loss.backward();
        const std::string gp = with_h0 ? "grad." : "grad_noh0.";
        for (const auto& [name, p] : gru.named_parameters())
            EXPECT_TRUE(test::all_close(vec(p.grad()), vec(f.at(gp + name)), atol, rtol)) << name;
        if (with_h0) {
            EXPECT_TRUE(test::all_close(vec(X.grad()), vec(f.at("grad.X")), atol, rtol)) << "X";
            EXPECT_TRUE(test::all_close(vec(h0.grad()), vec(f.at("grad.h0")), atol, rtol)) << "h0";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllImpls, GruParity,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

// step() through every layer equals forward() run one step at a time (the decoder's use).
TEST(Gru, StepMatchesForward) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_layer.safetensors");
    nn::GRU gru(5, 7, 2);
    std::map<std::string, Tensor> sd;
    for (const auto& [name, t] : gru.named_parameters()) sd[name] = f.at("p." + name);
    gru.load_state_dict(sd);
    const Tensor X = f.at("X"), h0 = f.at("h0");
    std::vector<Tensor> h{h0.select(0, 0), h0.select(0, 1)};
    for (int64_t t = 0; t < 4; ++t) {
        h = gru.step(gru.input_projection(0, X.select(0, t)), h);
        EXPECT_TRUE(test::all_close(vec(h[1]), vec(f.at("out").select(0, t)), test::kTolGoldenAtol,
                                    test::kTolGoldenRtol)) << "step " << t;
    }
    EXPECT_TRUE(test::all_close(vec(stack(h, 0)), vec(f.at("h_n")), test::kTolGoldenAtol, test::kTolGoldenRtol));
}

// The whole module in float64 (2 layers, dropout off): every parameter, the input and h0.
class GruGradcheck : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(GruGradcheck, Float64) {
    nn::GRU gru(3, 4, 2);
    gru.impl = GetParam();
    std::vector<Tensor> inputs;
    for (const auto& [name, p] : gru.named_parameters()) inputs.push_back(p.detach().to(DType::f64).requires_grad_());
    inputs.push_back(randn({3, 2, 3}, nullptr, 0.0, 1.0, DType::f64).requires_grad_());  // X (T, B, I)
    inputs.push_back(randn({2, 2, 4}, nullptr, 0.0, 1.0, DType::f64).requires_grad_());  // h0 (L, B, H)
    auto fn = [&gru](const std::vector<Tensor>& x) {
        for (int64_t l = 0; l < 2; ++l) {
            gru.weight_ih[size_t(l)] = x[size_t(4 * l)];
            gru.weight_hh[size_t(l)] = x[size_t(4 * l + 1)];
            gru.bias_ih[size_t(l)]   = x[size_t(4 * l + 2)];
            gru.bias_hh[size_t(l)]   = x[size_t(4 * l + 3)];
        }
        auto [out, hn] = gru.forward(x[8], x[9]);
        return concat({out.reshape({-1}), hn.reshape({-1})}, 0);
    };
    const GradcheckResult r = gradcheck(fn, inputs);
    EXPECT_TRUE(r.ok) << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllImpls, GruGradcheck,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

TEST(Gru, ParameterNamesShapesAndInitBounds) {
    nn::GRU gru(5, 8, 2);
    const auto params = gru.named_parameters();
    const std::vector<std::pair<std::string, Shape>> want = {
        {"weight_ih_l0", {24, 5}}, {"weight_hh_l0", {24, 8}}, {"bias_ih_l0", {24}}, {"bias_hh_l0", {24}},
        {"weight_ih_l1", {24, 8}}, {"weight_hh_l1", {24, 8}}, {"bias_ih_l1", {24}}, {"bias_hh_l1", {24}}};
    ASSERT_EQ(params.size(), want.size());
    const double bound = 1.0 / std::sqrt(8.0);
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(params[i].first, want[i].first);
        EXPECT_EQ(params[i].second.shape(), want[i].second);
        double mx = 0;
        for (float v : vec(params[i].second)) mx = std::max(mx, std::abs(double(v)));
        EXPECT_LE(mx, bound) << params[i].first;
        EXPECT_GT(mx, 0.5 * bound) << params[i].first;  // really drawn from U(±1/√H), not zeros
    }
}

TEST(Gru, DropoutOnlyBetweenLayersAndOnlyInTraining) {
    nn::GRU one(4, 6, 1, 0.5), two(4, 6, 2, 0.5);
    const Tensor X = randn({3, 2, 4});
    // One layer: dropout never applies, training or not.
    one.train();
    const auto a = vec(one.forward(X).first);
    one.eval();
    EXPECT_EQ(a, vec(one.forward(X).first));
    // Two layers: eval is deterministic; training differs from eval (dropout between layers).
    two.eval();
    const auto e1 = vec(two.forward(X).first);
    EXPECT_EQ(e1, vec(two.forward(X).first));
    two.train();
    EXPECT_NE(e1, vec(two.forward(X).first));
}

TEST(Gru, EmptySequenceReturnsInitialState) {
    nn::GRU gru(2, 3, 2);
    const Tensor h0 = randn({2, 4, 3});
    auto [out, hn] = gru.forward(zeros({0, 4, 2}), h0);
    EXPECT_EQ(out.shape(), Shape({0, 4, 3}));
    EXPECT_EQ(vec(hn), vec(h0));
}

TEST(Gru, RejectsBadShapes) {
    nn::GRU gru(5, 7, 2);
    EXPECT_THROW(gru.forward(zeros({4, 3, 6})), Error);                  // wrong input size
    EXPECT_THROW(gru.forward(zeros({4, 5})), Error);                     // not (T, B, I)
    EXPECT_THROW(gru.forward(zeros({4, 3, 5}), zeros({1, 3, 7})), Error);  // h0 layers
    EXPECT_THROW(gru.step(zeros({3, 21}), {zeros({3, 7})}), Error);      // one state for 2 layers
    EXPECT_THROW(nn::GRU(0, 7), Error);
    EXPECT_THROW(nn::GRU(5, 7, 2, 1.0), Error);
    try {
        gru.forward(zeros({4, 3, 6}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("(4, 3, 6)"), std::string::npos) << e.what();
    }
}

}  // namespace
