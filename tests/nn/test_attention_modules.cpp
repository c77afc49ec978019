// D2L attention modules: PyTorch golden parity (tools/gen_fixtures.py builds each module as
// D2L ZH does, with fixed weights: outputs, attention weights and every parameter/input
// gradient), the books' deterministic test vectors (d2l_spec.md §8), module behaviour (dropout,
// stored weights, causal MHA, odd-width positional encoding), errors, and float64 gradchecks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "qkv/autograd/gradcheck.h"
#include "qkv/io/safetensors.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::nn;
using namespace qkv::test;

namespace {

using Fixture = std::map<std::string, Tensor>;

Fixture fixture(const std::string& name) {
    return io::load_safetensors(std::string(QKV_FIXTURE_DIR) + "/" + name + ".safetensors");
}

std::vector<float> vec(const Tensor& t) { return t.contiguous().to_vector<float>(); }

/// Loads the fixture's "param.*" tensors into m (strict: names and shapes as in PyTorch).
void load_params(Module& m, const Fixture& f) {
    std::map<std::string, Tensor> sd;
    for (const auto& [k, t] : f)
        if (k.rfind("param.", 0) == 0) sd[k.substr(6)] = t;
    m.load_state_dict(sd);
}

/// An input of the fixture as a fresh leaf that requires grad (float) or as is (valid_lens).
Tensor input(const Fixture& f, const std::string& name) {
    auto it = f.find("in." + name);
    if (it == f.end()) return Tensor();
    Tensor t = it->second.detach();
    if (t.dtype() == DType::f32) t.requires_grad_();
    return t;
}

/// Backpropagates sum(out * grad_out) and compares out, the weights (when given) and the
/// gradients of every parameter and of the named inputs with the fixture (kTolGolden*).
void check_golden(const std::string& name, Module& m, const Fixture& f, const Tensor& out,
                  const Tensor& weights, const std::map<std::string, Tensor>& inputs) {
    SCOPED_TRACE(name);
    ASSERT_EQ(out.shape(), f.at("out").shape());
    EXPECT_TRUE(all_close(vec(out), vec(f.at("out")), kTolGoldenAtol, kTolGoldenRtol)) << "out";
    if (weights.defined()) {
        ASSERT_EQ(weights.numel(), f.at("attention_weights").numel());  // (B·h, ...) vs (B, h, ...)
        EXPECT_TRUE(all_close(vec(weights), vec(f.at("attention_weights")), kTolGoldenAtol,
                              kTolGoldenRtol))
            << "attention_weights";
    }
    out.backward(f.at("in.grad_out"));
    for (const auto& [pname, p] : m.named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << pname;
        EXPECT_TRUE(all_close(vec(p.grad()), vec(f.at("grad." + pname)), kTolGoldenAtol,
                              kTolGoldenRtol))
            << "grad of " << pname;
    }
    for (const auto& [iname, t] : inputs) {
        if (t.dtype() != DType::f32) continue;
        EXPECT_TRUE(all_close(vec(t.grad()), vec(f.at("grad." + iname)), kTolGoldenAtol,
                              kTolGoldenRtol))
            << "grad of " << iname;
    }
}

std::map<std::string, Tensor> qkv_inputs(const Fixture& f) {
    return {{"queries", input(f, "queries")}, {"keys", input(f, "keys")},
            {"values", input(f, "values")}};
}

}  // namespace

// ---- PyTorch golden parity ---------------------------------------------------------------------

TEST(AttentionGolden, DotProductAttention) {
    for (const char* name : {"dot_attention_vl1d", "dot_attention_vl2d"}) {
        Fixture f = fixture(name);
        DotProductAttention m(0.0);
        auto in = qkv_inputs(f);
        Tensor out = m.forward(in["queries"], in["keys"], in["values"], input(f, "valid_lens"));
        check_golden(name, m, f, out, m.attention_weights(), in);
    }
}

TEST(AttentionGolden, AdditiveAttentionQueryAndKeySizesDiffer) {
    for (const char* name : {"additive_attention_vl1d", "additive_attention_vl2d"}) {
        Fixture f = fixture(name);
        AdditiveAttention m(3, 5, 6, 0.0);
        load_params(m, f);
        auto in = qkv_inputs(f);
        Tensor out = m.forward(in["queries"], in["keys"], in["values"], input(f, "valid_lens"));
        check_golden(name, m, f, out, m.attention_weights(), in);
    }
}

TEST(AttentionGolden, MultiHeadAttention) {
    struct Case {
        const char* name;
        MultiHeadAttentionConfig cfg;
    };
    // ZH constructor order: key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias.
    const Case cases[] = {
        {"mha_vl1d", {8, 2, 0.0, false, 6, 7, 5}},
        {"mha_vl2d_bias", {8, 2, 0.0, true, 6, 7, 5}},
        {"mha_nomask", {8, 4, 0.0, false, 8, 8, 8}},
    };
    for (const Case& c : cases) {
        Fixture f = fixture(c.name);
        MultiHeadAttention m(c.cfg);
        load_params(m, f);
        m.keep_attention_weights(true);
        auto in = qkv_inputs(f);
        Tensor out = m.forward(in["queries"], in["keys"], in["values"], input(f, "valid_lens"));
        ASSERT_EQ(m.attention_weights().shape(),
                  (Shape{2, c.cfg.num_heads, in["queries"].size(1), in["keys"].size(1)}));
        check_golden(c.name, m, f, out, m.attention_weights(), in);
    }
}

TEST(AttentionGolden, MultiHeadAttentionFusedPathMatchesToo) {
    // Without kept weights MHA may take the flash kernel; the result and gradients must still
    // match PyTorch's math.
    Fixture f = fixture("mha_vl2d_bias");
    MultiHeadAttention m({8, 2, 0.0, true, 6, 7, 5});
    load_params(m, f);
    auto in = qkv_inputs(f);
    Tensor out = m.forward(in["queries"], in["keys"], in["values"], input(f, "valid_lens"));
    EXPECT_FALSE(m.attention_weights().defined());
    check_golden("mha_vl2d_bias (auto backend)", m, f, out, Tensor(), in);
}

TEST(AttentionGolden, PositionalEncoding) {
    Fixture f = fixture("positional_encoding");
    PositionalEncoding m(8, 0.0, 10);
    Tensor X = input(f, "X");
    check_golden("positional_encoding", m, f, m.forward(X), Tensor(), {{"X", X}});
    Fixture t = fixture("positional_encoding_table");
    EXPECT_TRUE(all_close(vec(m.P), vec(t.at("P")), kTolGoldenAtol, kTolGoldenRtol));
}

TEST(AttentionGolden, PositionWiseFFN) {
    Fixture f = fixture("position_wise_ffn");
    PositionWiseFFN m(4, 8, 6);
    load_params(m, f);
    Tensor X = input(f, "X");
    check_golden("position_wise_ffn", m, f, m.forward(X), Tensor(), {{"X", X}});
}

TEST(AttentionGolden, AddNorm) {
    for (auto [name, shape] : {std::pair<const char*, Shape>{"add_norm", {4}},
                               std::pair<const char*, Shape>{"add_norm_2d_shape", {3, 4}}}) {
        Fixture f = fixture(name);
        AddNorm m(shape, 0.0);
        load_params(m, f);
        Tensor X = input(f, "X"), Y = input(f, "Y");
        check_golden(name, m, f, m.forward(X, Y), Tensor(), {{"X", X}, {"Y", Y}});
    }
}

TEST(AttentionGolden, ParameterNamesMatchD2L) {
    AdditiveAttention add(2, 3, 4, 0.0);
    MultiHeadAttention mha({8, 2, 0.0, true, 0, 0, 0});
    AddNorm an({4}, 0.1);
    PositionWiseFFN ffn(4, 8, 4);
    auto names = [](const Module& m) {
        std::vector<std::string> v;
        for (const auto& [n, t] : m.named_parameters()) v.push_back(n);
        return v;
    };
    EXPECT_EQ(names(add), (std::vector<std::string>{"W_k.weight", "W_q.weight", "w_v.weight"}));
    EXPECT_EQ(names(mha), (std::vector<std::string>{"W_q.weight", "W_q.bias", "W_k.weight", "W_k.bias",
                                                    "W_v.weight", "W_v.bias", "W_o.weight", "W_o.bias"}));
    EXPECT_EQ(names(an), (std::vector<std::string>{"ln.weight", "ln.bias"}));
    EXPECT_EQ(names(ffn), (std::vector<std::string>{"dense1.weight", "dense1.bias", "dense2.weight",
                                                    "dense2.bias"}));
    EXPECT_TRUE(PositionalEncoding(8, 0.1).named_parameters().empty());
}

// ---- book test vectors (d2l_spec.md §8) --------------------------------------------------------

TEST(AttentionBook, IdenticalKeysGiveUniformWeightsOverValidKeys) {
    // ZH 10.3: keys all ones (2, 10, 2), values arange(40) as (1, 10, 4) repeated to batch 2,
    // valid_lens [2, 6] -> [[2, 3, 4, 5]] and [[10, 11, 12, 13]]; weights 1/2 and 1/6.
    Generator g(1);
    Tensor keys = ones({2, 10, 2});
    Tensor values = arange(0, 40).reshape({1, 10, 4}).expand({2, 10, 4}).contiguous();
    Tensor lens = from_vector<int64_t>({2, 6}, {2});
    const std::vector<float> want = {2, 3, 4, 5, 10, 11, 12, 13};
    AdditiveAttention add(2, 20, 8, 0.1);
    add.eval();
    Tensor out = add.forward(randn({2, 1, 20}, &g), keys, values, lens);
    EXPECT_EQ(out.shape(), (Shape{2, 1, 4}));
    EXPECT_TRUE(all_close(vec(out), want, 1e-5, 1e-6));  // mean of ≤ 6 values of ≤ 23, fp32
    DotProductAttention dot(0.5);
    dot.eval();
    EXPECT_TRUE(all_close(vec(dot.forward(randn({2, 1, 2}, &g), keys, values, lens)), want, 1e-5, 1e-6));
    std::vector<float> w = vec(dot.attention_weights());  // (2, 1, 10)
    for (int j = 0; j < 10; ++j) {
        EXPECT_NEAR(w[size_t(j)], j < 2 ? 0.5f : 0.f, 1e-7);
        EXPECT_NEAR(w[size_t(10 + j)], j < 6 ? 1 / 6.f : 0.f, 1e-7);
    }
}

TEST(AttentionBook, MultiHeadShapes) {
    // H = 100, h = 5, dropout 0.5; X ones (2, 4, 100), Y ones (2, 6, 100), valid_lens [3, 2].
    MultiHeadAttention mha({100, 5, 0.5});
    mha.eval();
    Tensor out = mha.forward(ones({2, 4, 100}), ones({2, 6, 100}), ones({2, 6, 100}),
                             from_vector<int64_t>({3, 2}, {2}));
    EXPECT_EQ(out.shape(), (Shape{2, 4, 100}));
}

TEST(AttentionBook, LayerNormDemo) {
    // [[1, 2], [2, 3]] -> [[−1, 1], [−1, 1]] (exactly ±0.5/√(0.25 + 1e-5) with eps 1e-5).
    AddNorm an({2}, 0.0);
    Tensor out = an.forward(zeros({2, 2}), from_vector<float>({1, 2, 2, 3}, {2, 2}));
    const float e = float(0.5 / std::sqrt(0.25 + 1e-5));
    EXPECT_TRUE(all_close(vec(out), std::vector<float>{-e, e, -e, e}, 1e-6, 1e-6));
}

// ---- behaviour -----------------------------------------------------------------------------------

TEST(AttentionModules, DropoutOnlyInTrainingAndWeightsArePreDropout) {
    Generator g(2);
    Tensor q = randn({2, 10, 8}, &g), k = randn({2, 10, 8}, &g), v = randn({2, 10, 8}, &g);
    DotProductAttention dot(0.5);
    dot.eval();
    const std::vector<float> e1 = vec(dot.forward(q, k, v)), w_eval = vec(dot.attention_weights());
    EXPECT_EQ(vec(dot.forward(q, k, v)), e1);  // eval is deterministic
    dot.train();
    const std::vector<float> t1 = vec(dot.forward(q, k, v));
    EXPECT_GT(max_abs_diff(t1.data(), e1.data(), int64_t(e1.size())), 1e-3);
    EXPECT_EQ(vec(dot.attention_weights()), w_eval);  // stored weights are before dropout
    // AdditiveAttention and MHA likewise: eval ignores dropout.
    AdditiveAttention add(8, 8, 4, 0.5);
    add.eval();
    const std::vector<float> a1 = vec(add.forward(q, k, v));
    EXPECT_EQ(vec(add.forward(q, k, v)), a1);
    for (float s : vec(sum(add.attention_weights(), {-1}))) EXPECT_NEAR(s, 1.f, 1e-6);
}

TEST(AttentionModules, MultiHeadKeepsPerHeadWeightsAndCausal) {
    Generator g(3);
    MultiHeadAttention mha({8, 2, 0.0});
    mha.eval();
    Tensor x = randn({2, 5, 8}, &g);
    Tensor plain = mha.forward(x, x, x);
    EXPECT_FALSE(mha.attention_weights().defined());
    mha.keep_attention_weights(true);
    Tensor kept = mha.forward(x, x, x, Tensor(), /*causal=*/true);
    const Tensor& w = mha.attention_weights();
    ASSERT_EQ(w.shape(), (Shape{2, 2, 5, 5}));
    const std::vector<float> ww = vec(w);
    for (int64_t r = 0; r < 2 * 2 * 5; ++r)
        for (int64_t j = r % 5 + 1; j < 5; ++j) EXPECT_EQ(ww[size_t(r * 5 + j)], 0.f);  // no future keys
    // Causal equals D2L's training-time dec_valid_lens = 1..T.
    Tensor lens = from_vector<int64_t>({1, 2, 3, 4, 5, 1, 2, 3, 4, 5}, {2, 5});
    EXPECT_TRUE(all_close(vec(mha.forward(x, x, x, lens)), vec(kept), 1e-6, 1e-5));
    // The last query sees every key: its row equals the unmasked call's last row.
    EXPECT_TRUE(all_close(vec(kept.slice(1, 4, 5)), vec(plain.slice(1, 4, 5)), 1e-6, 1e-5));
}

TEST(AttentionModules, PositionalEncodingTableOddWidthAndOffset) {
    PositionalEncoding pe(7, 0.0, 50);  // odd num_hiddens: the last column is a sin
    ASSERT_EQ(pe.P.shape(), (Shape{1, 50, 7}));
    const std::vector<float> P = vec(pe.P);
    EXPECT_EQ(std::vector<float>(P.begin(), P.begin() + 7), (std::vector<float>{0, 1, 0, 1, 0, 1, 0}));
    for (int i = 0; i < 50; ++i)
        for (int c = 0; c < 7; ++c) {
            const double a = i / std::pow(10000.0, double(c - c % 2) / 7);
            EXPECT_NEAR(P[size_t(i * 7 + c)], c % 2 ? std::cos(a) : std::sin(a), 1e-5) << i << "," << c;
        }
    // forward adds P[offset : offset + T] (offset 0 is D2L's behaviour).
    Tensor X = zeros({1, 3, 7});
    EXPECT_EQ(vec(pe.forward(X, 4)), std::vector<float>(P.begin() + 4 * 7, P.begin() + 7 * 7));
    EXPECT_NE(error_of([&] { pe.forward(zeros({1, 3, 7}), 48); }).find("exceed max_len 50"), std::string::npos);
    EXPECT_THROW(pe.forward(zeros({1, 3, 8})), Error);
    // Dropout is active in training only: eval is exactly X + P.
    PositionalEncoding pd(7, 0.5, 50);
    pd.eval();
    EXPECT_EQ(vec(pd.forward(X)), std::vector<float>(P.begin(), P.begin() + 21));
    pd.train();
    Tensor big = zeros({4, 50, 7});
    int zeros_seen = 0;
    for (float x : vec(pd.forward(big))) zeros_seen += x == 0.f;
    EXPECT_GT(zeros_seen, 4 * 50 * 7 / 4);  // ~half dropped (plus the exact zeros of sin(0))
}

TEST(AttentionModules, ErrorsNameTheProblem) {
    MultiHeadAttentionConfig bad{10, 3};
    EXPECT_NE(error_of([&] { MultiHeadAttention m(bad); }).find("num_heads (3) must divide num_hiddens (10)"),
              std::string::npos);
    // a negative size is named as such (was: "num_heads (2) must divide num_hiddens (-8)")
    MultiHeadAttentionConfig negative{-8, 2};
    EXPECT_NE(error_of([&] { MultiHeadAttention m(negative); }).find("must be >= 1, got num_hiddens -8 and num_heads 2"),
              std::string::npos);
    MultiHeadAttention mha({8, 2, 0.0, false, 6, 0, 0});
    EXPECT_NE(error_of([&] { mha.forward(zeros({1, 2, 8}), zeros({1, 3, 8}), zeros({1, 3, 8})); })
                  .find("query/key/value sizes 6/8/8"),
              std::string::npos);
    AdditiveAttention add(3, 5, 4, 0.0);
    EXPECT_NE(error_of([&] { add.forward(zeros({1, 2, 3}), zeros({1, 4, 3}), zeros({1, 4, 2})); })
                  .find("query size 5"),
              std::string::npos);
    DotProductAttention dot(0.0);
    EXPECT_THROW(dot.forward(zeros({1, 2, 3}), zeros({1, 4, 3}), zeros({1, 5, 2})), Error);
    EXPECT_THROW(DotProductAttention(1.0), Error);
    AddNorm an({4}, 0.0);
    EXPECT_NE(error_of([&] { an.forward(zeros({2, 4}), zeros({3, 4})); }).find("same shape"), std::string::npos);
}

// ---- the pad-free form (nn/packing.h) ----------------------------------------------------------

namespace {
/// Packed vs padded multi-head attention: the same fp32 sums per kept row, but the projection
/// GEMMs run over fewer rows (M differs, so the K sums may be blocked differently): a few ulp
/// per width-8 dot product through two projections.
constexpr double kTolPackedAtol = 1e-6;
constexpr double kTolPackedRtol = 1e-5;
}  // namespace

TEST(RowPacking, PackUnpackRoundTripAndErrors) {
    const RowPacking p({2, 0, 3}, 3);
    EXPECT_EQ(p.batch(), 3);
    EXPECT_EQ(p.steps(), 3);
    EXPECT_EQ(p.rows(), 5);
    EXPECT_EQ(p.index().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 6, 7, 8}));
    Tensor x = from_vector(random_floats(3 * 3 * 2, 1), {3, 3, 2});
    const Tensor xp = p.pack(x);
    ASSERT_EQ(xp.shape(), (Shape{5, 2}));
    const std::vector<float> xv = vec(x), pv = vec(xp), uv = vec(p.unpack(xp));
    const std::vector<int64_t> kept{0, 1, 6, 7, 8};
    for (size_t i = 0; i < kept.size(); ++i)
        for (int c = 0; c < 2; ++c) EXPECT_EQ(pv[i * 2 + size_t(c)], xv[size_t(kept[i]) * 2 + size_t(c)]);
    for (int64_t r = 0; r < 9; ++r) {  // kept rows back in place, zeros elsewhere
        const bool k = std::find(kept.begin(), kept.end(), r) != kept.end();
        for (int c = 0; c < 2; ++c) EXPECT_EQ(uv[size_t(r * 2 + c)], k ? xv[size_t(r * 2 + c)] : 0.f) << r;
    }
    EXPECT_NE(error_of([] { RowPacking({1, 4}, 3); }).find("lens[1] = 4 is outside [0, 3]"), std::string::npos);
    EXPECT_NE(error_of([&] { p.pack(zeros({3, 4, 2})); }).find("must be (3, 3, C)"), std::string::npos);
    EXPECT_NE(error_of([&] { p.unpack(zeros({4, 2})); }).find("must be (5, C)"), std::string::npos);
}

TEST(AttentionModules, MultiHeadPackedEqualsPaddedRows) {
    Generator g(11);
    MultiHeadAttention mha({8, 2, 0.0});
    mha.eval();
    const int64_t B = 3, Tq = 5, Tk = 4;
    // Random values at the skipped positions too: the padded call must not depend on them.
    const Tensor xq = randn({B, Tq, 8}, &g), xk = randn({B, Tk, 8}, &g);
    const RowPacking qp({5, 2, 3}, Tq), kp({4, 1, 2}, Tk);
    // Causal self-attention on packed rows.
    EXPECT_TRUE(all_close(vec(mha.forward(qp.pack(xq), qp.pack(xq), qp.pack(xq), Tensor(), true, {&qp, &qp})),
                          vec(qp.pack(mha.forward(xq, xq, xq, Tensor(), true))), kTolPackedAtol, kTolPackedRtol));
    // Cross-attention, packed queries and keys; valid_lens within the kept keys (1 <= 1, 9 -> Tk).
    const Tensor vl = from_vector<int64_t>({9, 1, 2}, {B});
    const Tensor want = qp.pack(mha.forward(xq, xk, xk, vl));
    EXPECT_TRUE(all_close(vec(mha.forward(qp.pack(xq), kp.pack(xk), kp.pack(xk), vl, false, {&qp, &kp})), vec(want),
                          kTolPackedAtol, kTolPackedRtol));
    // Only the keys packed: the output stays (B, Tq, C).
    EXPECT_TRUE(all_close(vec(mha.forward(xq, kp.pack(xk), kp.pack(xk), vl, false, {nullptr, &kp})),
                          vec(mha.forward(xq, xk, xk, vl)), kTolPackedAtol, kTolPackedRtol));
    // Only the queries packed: (N_q, C).
    EXPECT_TRUE(all_close(vec(mha.forward(qp.pack(xq), xk, xk, vl, false, {&qp, nullptr})), vec(want),
                          kTolPackedAtol, kTolPackedRtol));
}

TEST(AttentionModules, MultiHeadPackedRefusesKeysAKeptQueryCouldSee) {
    MultiHeadAttention mha({8, 2, 0.0});
    const RowPacking qp({3, 2}, 3), kp({2, 1}, 3);
    const Tensor q = zeros({5, 8}), k = zeros({3, 8});
    EXPECT_NE(error_of([&] { mha.forward(q, k, k, Tensor(), false, {&qp, &kp}); }).find("need valid_lens or a causal mask"),
              std::string::npos);
    EXPECT_NE(error_of([&] { mha.forward(q, k, k, from_vector<int64_t>({2, 2}, {2}), false, {&qp, &kp}); })
                  .find("valid_lens[1] = 2 reaches past the 1 kept keys"),
              std::string::npos);
    EXPECT_NE(error_of([&] { mha.forward(q, k, k, Tensor(), true, {&qp, &kp}); })
                  .find("causal attention of 3 kept queries over 2 kept keys"),
              std::string::npos);
    EXPECT_NE(error_of([&] { mha.forward(zeros({4, 8}), k, k, Tensor(), true, {&qp, &qp}); })
                  .find("the query packing keeps 5 rows"),
              std::string::npos);
    EXPECT_NE(error_of([&] { mha.forward(q, k, k, from_vector<float>({1, 1}, {2}), false, {&qp, &kp}); })
                  .find("valid_lens must be int64 (2)"),
              std::string::npos);
}

// ---- float64 gradchecks of the compositions ----------------------------------------------------

namespace {
Tensor rnd64(const Shape& s) { return randn(s, nullptr, 0.0, 1.0, DType::f64).requires_grad_(); }
}  // namespace

TEST(AttentionModulesGradcheck, AdditiveAttention) {
    AdditiveAttention m(3, 5, 4, 0.0);
    Tensor lens = from_vector<int64_t>({2, 3, 1, 4, 4, 2}, {2, 3});
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
            m.W_q->weight = x[3], m.W_k->weight = x[4], m.w_v->weight = x[5];
            return m.forward(x[0], x[1], x[2], lens);
        },
        {rnd64({2, 3, 5}), rnd64({2, 4, 3}), rnd64({2, 4, 2}), rnd64({4, 5}), rnd64({4, 3}), rnd64({1, 4})});
    EXPECT_TRUE(r.ok) << r.message;
}

TEST(AttentionModulesGradcheck, MultiHeadAttentionWithBiasAndValidLens) {
    MultiHeadAttention m({4, 2, 0.0, true, 3, 5, 2});
    Tensor lens = from_vector<int64_t>({2, 3}, {2});
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
            m.W_q->weight = x[3], m.W_q->bias = x[4], m.W_k->weight = x[5], m.W_v->weight = x[6];
            m.W_o->weight = x[7], m.W_k->bias = x[8], m.W_v->bias = x[8], m.W_o->bias = x[8];
            return m.forward(x[0], x[1], x[2], lens);
        },
        {rnd64({2, 2, 3}), rnd64({2, 3, 5}), rnd64({2, 3, 2}), rnd64({4, 3}), rnd64({4}), rnd64({4, 5}),
         rnd64({4, 2}), rnd64({4, 4}), rnd64({4})});
    EXPECT_TRUE(r.ok) << r.message;
}

TEST(AttentionModulesGradcheck, MultiHeadAttentionPacked) {
    MultiHeadAttention m({4, 2, 0.0});
    const RowPacking qp({2, 1}, 2), kp({1, 3}, 3);
    Tensor lens = from_vector<int64_t>({1, 3}, {2});
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
            m.W_q->weight = x[2], m.W_k->weight = x[3], m.W_v->weight = x[4], m.W_o->weight = x[5];
            return m.forward(x[0], x[1], x[1], lens, false, {&qp, &kp});
        },
        {rnd64({3, 4}), rnd64({4, 4}), rnd64({4, 4}), rnd64({4, 4}), rnd64({4, 4}), rnd64({4, 4})});
    EXPECT_TRUE(r.ok) << r.message;
}

TEST(AttentionModulesGradcheck, FFNAddNormPositionalEncoding) {
    PositionWiseFFN ffn(3, 5, 3);
    AddNorm an({3}, 0.0);
    PositionalEncoding pe(3, 0.0, 8);
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
            ffn.dense1->weight = x[1], ffn.dense1->bias = x[2], ffn.dense2->weight = x[3], ffn.dense2->bias = x[4];
            an.ln->weight = x[5], an.ln->bias = x[6];
            Tensor h = pe.forward(x[0]);
            return an.forward(h, ffn.forward(h));
        },
        {rnd64({2, 4, 3}), rnd64({5, 3}), rnd64({5}), rnd64({3, 5}), rnd64({3}), rnd64({3}), rnd64({3})});
    EXPECT_TRUE(r.ok) << r.message;
}
