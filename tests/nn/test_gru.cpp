// nn::GRU against torch.nn.GRU (tools/gen_gru_fixtures.py, torch 1.13): forward values and every
// gradient for each recurrence implementation, unidirectional and bidirectional; float64
// gradcheck of the whole module; the reverse direction reading the sequence backwards; parameter
// names, shapes and init bounds; error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

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

/// Gradcheck in float64 of a GRU(3, 4, L layers, D directions) with dropout off: every parameter
/// (registration order), the input X (T 3, B 2, I 3) and h0 (D·L, B 2, H 4).
void expect_gru_gradcheck(nn::GRU& gru) {
    std::vector<Tensor> inputs;
    for (const auto& [name, p] : gru.named_parameters()) inputs.push_back(p.detach().to(DType::f64).requires_grad_());
    const size_t np = inputs.size();
    inputs.push_back(randn({3, 2, 3}, nullptr, 0.0, 1.0, DType::f64).requires_grad_());  // X (T, B, I)
    inputs.push_back(randn({gru.num_directions() * gru.num_layers, 2, 4}, nullptr, 0.0, 1.0, DType::f64)
                         .requires_grad_());  // h0 (D·L, B, H)
    auto fn = [&gru, np](const std::vector<Tensor>& x) {
        for (size_t i = 0; i < np / 4; ++i) {  // per layer and direction: l0, (l0_reverse), l1, ...
            gru.weight_ih[i] = x[4 * i];
            gru.weight_hh[i] = x[4 * i + 1];
            gru.bias_ih[i]   = x[4 * i + 2];
            gru.bias_hh[i]   = x[4 * i + 3];
        }
        auto [out, hn] = gru.forward(x[np], x[np + 1]);
        return concat({out.reshape({-1}), hn.reshape({-1})}, 0);
    };
    const GradcheckResult r = gradcheck(fn, inputs);
    EXPECT_TRUE(r.ok) << r.message;
}

// The whole module in float64 (2 layers, dropout off): every parameter, the input and h0.
class GruGradcheck : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(GruGradcheck, Float64) {
    nn::GRU gru(3, 4, 2);
    gru.impl = GetParam();
    expect_gru_gradcheck(gru);
}

INSTANTIATE_TEST_SUITE_P(AllImpls, GruGradcheck,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

// ---- bidirectional (torch.nn.GRU(..., bidirectional=True)) ----------------------------------

// gru_bidirectional.safetensors "gru.*": GRU(4, 6, 2 layers, bidirectional), T 5, B 3.
class BiGruParity : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(BiGruParity, MatchesTorchForwardAndGradients) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_bidirectional.safetensors");
    const auto at = [&f](const std::string& k) { return f.at("gru." + k); };
    nn::GRU gru(4, 6, 2, 0.0, /*bidirectional=*/true);
    gru.impl = GetParam();
    std::map<std::string, Tensor> sd;
    for (const auto& [name, t] : gru.named_parameters()) sd[name] = at("p." + name);
    gru.load_state_dict(sd);
    const double atol = test::kTolGoldenAtol, rtol = test::kTolGoldenRtol;
    for (bool with_h0 : {true, false}) {
        SCOPED_TRACE(std::string(impl_name(GetParam())) + (with_h0 ? " with h0" : " without h0"));
        gru.zero_grad();
        Tensor X = at("X").detach().requires_grad_();
        Tensor h0 = with_h0 ? at("h0").detach().requires_grad_() : Tensor();
        auto [out, hn] = gru.forward(X, h0);
        ASSERT_EQ(out.shape(), Shape({5, 3, 12}));
        ASSERT_EQ(hn.shape(), Shape({4, 3, 6}));
        const std::string sfx = with_h0 ? "" : "_noh0";
        EXPECT_TRUE(test::all_close(vec(out), vec(at("out" + sfx)), atol, rtol));
        EXPECT_TRUE(test::all_close(vec(hn), vec(at("h_n" + sfx)), atol, rtol));
        Tensor loss = sum(out * at("R_out")) + sum(hn * at("R_state"));
        loss.backward();
        const std::string gp = with_h0 ? "grad." : "grad_noh0.";
        int64_t checked = 0;
        for (const auto& [name, p] : gru.named_parameters()) {
            EXPECT_TRUE(test::all_close(vec(p.grad()), vec(at(gp + name)), atol, rtol)) << name;
            ++checked;
        }
        EXPECT_EQ(checked, 16);  // 2 layers × 2 directions × 4
        if (with_h0) {
            EXPECT_TRUE(test::all_close(vec(X.grad()), vec(at("grad.X")), atol, rtol)) << "X";
            EXPECT_TRUE(test::all_close(vec(h0.grad()), vec(at("grad.h0")), atol, rtol)) << "h0";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllImpls, BiGruParity,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

// forward_projected takes both directions' layer-0 projections side by side (T, B, 2·3H).
TEST(BiGru, ForwardProjectedEqualsForward) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_bidirectional.safetensors");
    nn::GRU gru(4, 6, 2, 0.0, true);
    std::map<std::string, Tensor> sd;
    for (const auto& [name, t] : gru.named_parameters()) sd[name] = f.at("gru.p." + name);
    gru.load_state_dict(sd);
    const Tensor X = f.at("gru.X"), h0 = f.at("gru.h0");
    auto [out, hn] = gru.forward_projected(
        concat({gru.input_projection(0, X, 0), gru.input_projection(0, X, 1)}, 2), h0);
    EXPECT_TRUE(test::all_close(vec(out), vec(f.at("gru.out")), test::kTolGoldenAtol, test::kTolGoldenRtol));
    EXPECT_TRUE(test::all_close(vec(hn), vec(f.at("gru.h_n")), test::kTolGoldenAtol, test::kTolGoldenRtol));
    EXPECT_THROW(gru.forward_projected(gru.input_projection(0, X, 0), h0), Error);  // one direction only
}

// float64, 2 layers, both directions: every parameter, the input and h0.
class BiGruGradcheck : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(BiGruGradcheck, Float64) {
    nn::GRU gru(3, 4, 2, 0.0, /*bidirectional=*/true);
    gru.impl = GetParam();
    ASSERT_EQ(gru.named_parameters().size(), 16u);
    expect_gru_gradcheck(gru);
}

INSTANTIATE_TEST_SUITE_P(AllImpls, BiGruGradcheck,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

// The reverse half reads the sequence from its end: it equals a unidirectional GRU with the
// "_reverse" weights run over the time-reversed input, read back in time order; changing the
// last step changes the reverse half at t = 0 but no earlier forward output; the final states
// are the forward half at T−1 and the reverse half at 0.
class BiGruReverse : public ::testing::TestWithParam<nn::GRUImpl> {};

TEST_P(BiGruReverse, RunsBackwardsInTime) {
    const int64_t Tn = 5, B = 2, I = 3, H = 4;
    manual_seed(7);
    nn::GRU bi(I, H, 1, 0.0, true), fwd(I, H, 1), rev(I, H, 1);
    bi.impl = fwd.impl = rev.impl = GetParam();
    const auto sd = bi.state_dict();
    fwd.load_state_dict({{"weight_ih_l0", sd.at("weight_ih_l0")}, {"weight_hh_l0", sd.at("weight_hh_l0")},
                         {"bias_ih_l0", sd.at("bias_ih_l0")}, {"bias_hh_l0", sd.at("bias_hh_l0")}});
    rev.load_state_dict({{"weight_ih_l0", sd.at("weight_ih_l0_reverse")},
                         {"weight_hh_l0", sd.at("weight_hh_l0_reverse")},
                         {"bias_ih_l0", sd.at("bias_ih_l0_reverse")}, {"bias_hh_l0", sd.at("bias_hh_l0_reverse")}});
    const Tensor X = randn({Tn, B, I});
    std::vector<int64_t> flip(static_cast<size_t>(Tn));
    for (int64_t t = 0; t < Tn; ++t) flip[size_t(t)] = Tn - 1 - t;
    const Tensor fi = from_vector(flip, {Tn});
    auto [out, hn] = bi.forward(X);
    ASSERT_EQ(out.shape(), Shape({Tn, B, 2 * H}));
    const double atol = test::kTolGoldenAtol, rtol = test::kTolGoldenRtol;
    EXPECT_TRUE(test::all_close(vec(out.slice(2, 0, H)), vec(fwd.forward(X).first), atol, rtol));
    EXPECT_TRUE(test::all_close(vec(out.slice(2, H, 2 * H)),
                                vec(index_select(rev.forward(index_select(X, 0, fi)).first, 0, fi)), atol, rtol));
    EXPECT_EQ(vec(hn.select(0, 0)), vec(out.select(0, Tn - 1).slice(1, 0, H)));
    EXPECT_EQ(vec(hn.select(0, 1)), vec(out.select(0, 0).slice(1, H, 2 * H)));
    // Change only the last step: the forward half before it stays, the reverse half at t = 0 moves.
    const Tensor X2 = concat({X.slice(0, 0, Tn - 1), full({1, B, I}, 3.0)}, 0);
    const Tensor out2 = bi.forward(X2).first;
    EXPECT_EQ(vec(out2.slice(0, 0, Tn - 1).slice(2, 0, H)), vec(out.slice(0, 0, Tn - 1).slice(2, 0, H)));
    EXPECT_FALSE(test::all_close(vec(out2.select(0, 0).slice(1, H, 2 * H)), vec(out.select(0, 0).slice(1, H, 2 * H)),
                                 1e-3, 0));
}

INSTANTIATE_TEST_SUITE_P(AllImpls, BiGruReverse,
                         ::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                           nn::GRUImpl::composite),
                         [](const auto& tp) { return std::string(impl_name(tp.param)); });

TEST(BiGru, ParameterNamesShapesAndInitBounds) {
    nn::GRU gru(5, 8, 2, 0.0, true);
    EXPECT_EQ(gru.num_directions(), 2);
    const auto params = gru.named_parameters();
    const std::vector<std::pair<std::string, Shape>> want = {
        {"weight_ih_l0", {24, 5}},          {"weight_hh_l0", {24, 8}},          {"bias_ih_l0", {24}},
        {"bias_hh_l0", {24}},               {"weight_ih_l0_reverse", {24, 5}},  {"weight_hh_l0_reverse", {24, 8}},
        {"bias_ih_l0_reverse", {24}},       {"bias_hh_l0_reverse", {24}},       {"weight_ih_l1", {24, 16}},
        {"weight_hh_l1", {24, 8}},          {"bias_ih_l1", {24}},               {"bias_hh_l1", {24}},
        {"weight_ih_l1_reverse", {24, 16}}, {"weight_hh_l1_reverse", {24, 8}},  {"bias_ih_l1_reverse", {24}},
        {"bias_hh_l1_reverse", {24}}};
    ASSERT_EQ(params.size(), want.size());
    const double bound = 1.0 / std::sqrt(8.0);
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(params[i].first, want[i].first);
        EXPECT_EQ(params[i].second.shape(), want[i].second);
        double mx = 0;
        for (float v : vec(params[i].second)) mx = std::max(mx, std::abs(double(v)));
        EXPECT_LE(mx, bound) << params[i].first;
        EXPECT_GT(mx, 0.5 * bound) << params[i].first;
    }
}

TEST(BiGru, DropoutBetweenLayersOnlyInTrainingAndEmptySequence) {
    nn::GRU two(4, 6, 2, 0.5, true);
    const Tensor X = randn({3, 2, 4});
    two.eval();
    const auto e1 = vec(two.forward(X).first);
    EXPECT_EQ(e1, vec(two.forward(X).first));
    two.train();
    EXPECT_NE(e1, vec(two.forward(X).first));
    auto [out, hn] = two.forward(zeros({0, 2, 4}));
    EXPECT_EQ(out.shape(), Shape({0, 2, 12}));
    EXPECT_EQ(hn.shape(), Shape({4, 2, 6}));
    EXPECT_EQ(vec(hn), std::vector<float>(48, 0.0f));
}

TEST(BiGru, RefusesStepsAndBadShapesNamingThem) {
    nn::GRU gru(5, 7, 2, 0.0, true);
    std::string e = test::error_of([&] { gru.step(zeros({3, 21}), {zeros({3, 7}), zeros({3, 7})}); });
    EXPECT_NE(e.find("bidirectional"), std::string::npos) << e;
    e = test::error_of([&] { gru.forward(zeros({4, 3, 5}), zeros({2, 3, 7})); });  // h0 needs 2 directions × 2 layers
    EXPECT_NE(e.find("(4, 3, 7)"), std::string::npos) << e;
    e = test::error_of([&] { gru.input_projection(0, zeros({3, 5}), 2); });
    EXPECT_NE(e.find("direction 2"), std::string::npos) << e;
    nn::GRU uni(5, 7);
    e = test::error_of([&] { uni.cell(0, zeros({3, 21}), zeros({3, 7}), 1); });
    EXPECT_NE(e.find("not bidirectional"), std::string::npos) << e;
}

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
