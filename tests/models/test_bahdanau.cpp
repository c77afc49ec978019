// D2L's Bahdanau seq2seq: forward, attention weights and every gradient against PyTorch classes
// written from the spec (tools/gen_gru_fixtures.py), with D2L's encoder and with the
// bidirectional ("brnn") one; incremental decoding equals teacher forcing; beam reordering; the
// book model's parameter count, names and init; a tiny model memorises 8 pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/beam_search.h"
#include "qkv/decode/greedy.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/bahdanau.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/trainer.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

using namespace qkv;
using models::Bahdanau;
using models::BahdanauConfig;

namespace {

std::vector<float> vec(const Tensor& t) { return t.contiguous().to_vector<float>(); }

BahdanauConfig fixture_config(nn::GRUImpl impl) {
    BahdanauConfig c;
    c.src_vocab_size = 11;
    c.tgt_vocab_size = 13;
    c.embed_size = 8;
    c.num_hiddens = 16;
    c.num_layers = 2;
    c.dropout = 0.0;
    c.gru_impl = impl;
    return c;
}

void load_fixture_weights(Bahdanau& m, const std::map<std::string, Tensor>& f) {
    std::map<std::string, Tensor> sd;
    for (const auto& [name, t] : m.named_parameters()) sd[name] = f.at("p." + name);
    m.load_state_dict(sd);
}

// (GRU recurrence, fold the embedding projection into a table): every path computes D2L's function.
/// The model's logits, per-step attention weights, loss and every parameter gradient against a
/// fixture of D2L's classes with the same weights (loaded into m); n_params: how many
/// parameters the model has (each one's gradient is compared).
void expect_matches_fixture(Bahdanau& m, const std::map<std::string, Tensor>& f, int64_t n_params) {
    const Tensor logits = m.forward(f.at("src"), f.at("valid_lens"), f.at("dec_X"));
    const double atol = test::kTolGoldenAtol, rtol = test::kTolGoldenRtol;
    ASSERT_EQ(logits.shape(), Shape({4, 6, 13}));
    EXPECT_TRUE(test::all_close(vec(logits), vec(f.at("logits")), atol, rtol));
    ASSERT_EQ(m.attention_weights().size(), 6u);
    std::vector<Tensor> steps;
    for (const Tensor& w : m.attention_weights()) steps.push_back(w.unsqueeze(1));
    EXPECT_TRUE(test::all_close(vec(concat(steps, 1)), vec(f.at("attention_weights")), atol, rtol));
    const Tensor loss = cross_entropy(logits, f.at("Y"));
    EXPECT_NEAR(loss.item(), f.at("loss").item(), atol + rtol * std::abs(f.at("loss").item()));
    loss.backward();
    int64_t checked = 0;
    for (const auto& [name, p] : m.named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << name;
        EXPECT_TRUE(test::all_close(vec(p.grad()), vec(f.at("grad." + name)), atol, rtol)) << name;
        ++checked;
    }
    EXPECT_EQ(checked, n_params);
}

class BahdanauParity : public ::testing::TestWithParam<std::tuple<nn::GRUImpl, bool>> {};

TEST_P(BahdanauParity, MatchesD2LForwardAttentionAndGradients) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_bahdanau.safetensors");
    BahdanauConfig c = fixture_config(std::get<0>(GetParam()));
    c.fold_embedding_projection = std::get<1>(GetParam());
    Bahdanau m(c);
    load_fixture_weights(m, f);
    expect_matches_fixture(m, f, 23);  // 1 + 8 encoder, 3 + 1 + 8 + 2 decoder
}

INSTANTIATE_TEST_SUITE_P(Paths, BahdanauParity,
                         ::testing::Combine(::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                                              nn::GRUImpl::composite),
                                            ::testing::Bool()),
                         [](const auto& tp) {
                             const nn::GRUImpl i = std::get<0>(tp.param);
                             return std::string(i == nn::GRUImpl::sequence ? "sequence"
                                                : i == nn::GRUImpl::cell   ? "cell"
                                                                           : "composite") +
                                    (std::get<1>(tp.param) ? "_folded" : "_unfolded");
                         });

// decode_step over the teacher tokens reproduces forward()'s logits step by step (eval mode).
TEST(Bahdanau, IncrementalDecodingEqualsTeacherForcing) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_bahdanau.safetensors");
    Bahdanau m(fixture_config(nn::GRUImpl::sequence));
    load_fixture_weights(m, f);
    m.eval();
    const Tensor dec_X = f.at("dec_X");
    auto state = m.init_state(f.at("src"), f.at("valid_lens"));
    models::DecoderAttentionTrace trace;
    state->trace = &trace;
    const auto want = f.at("logits");
    for (int64_t t = 0; t < 6; ++t) {
        const Tensor logits = m.decode_step(dec_X.select(1, t).contiguous(), *state);
        EXPECT_FALSE(logits.requires_grad());
        EXPECT_TRUE(test::all_close(vec(logits), vec(want.select(1, t)), test::kTolGoldenAtol,
                                    test::kTolGoldenRtol)) << "step " << t;
        EXPECT_EQ(state->steps(), t + 1);
        ASSERT_EQ(trace.cross.size(), size_t(t + 1));
        ASSERT_EQ(trace.cross[size_t(t)].size(), 1u);
        EXPECT_EQ(trace.cross[size_t(t)][0].shape(), Shape({4, 1, 1, 7}));
        EXPECT_TRUE(test::all_close(vec(trace.cross[size_t(t)][0]),
                                    vec(f.at("attention_weights").select(1, t)), test::kTolGoldenAtol,
                                    test::kTolGoldenRtol));
    }
}

// reorder() gathers every cached tensor, so a permuted (and duplicated) batch decodes the same.
TEST(Bahdanau, ReorderGathersTheBatch) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/gru_bahdanau.safetensors");
    Bahdanau m(fixture_config(nn::GRUImpl::sequence));
    load_fixture_weights(m, f);
    m.eval();
    const Tensor dec_X = f.at("dec_X");
    auto a = m.init_state(f.at("src"), f.at("valid_lens"));
    const Tensor first = m.decode_step(dec_X.select(1, 0).contiguous(), *a);
    const Tensor idx = from_vector<int64_t>({2, 0, 2}, {3});
    a->reorder(idx);
    EXPECT_EQ(a->batch_size(), 3);
    const Tensor tok = index_select(dec_X.select(1, 1).contiguous(), 0, idx);
    const Tensor got = m.decode_step(tok, *a);
    const Tensor want = index_select(f.at("logits").select(1, 1).contiguous(), 0, idx);
    EXPECT_TRUE(test::all_close(vec(got), vec(want), test::kTolGoldenAtol, test::kTolGoldenRtol));
    (void)first;
}

TEST(Bahdanau, BookModelParameterCountNamesAndInit) {
    BahdanauConfig c;
    c.src_vocab_size = 194;  // D2L EN vocabularies (spec §3)
    c.tgt_vocab_size = 214;
    Bahdanau m(c);
    EXPECT_EQ(m.num_parameters(), 2066390);
    std::vector<std::string> names;
    for (const auto& [n, t] : m.named_parameters()) names.push_back(n);
    const std::vector<std::string> want = {
        "encoder.embedding.weight", "encoder.rnn.weight_ih_l0", "encoder.rnn.weight_hh_l0",
        "encoder.rnn.bias_ih_l0", "encoder.rnn.bias_hh_l0", "encoder.rnn.weight_ih_l1",
        "encoder.rnn.weight_hh_l1", "encoder.rnn.bias_ih_l1", "encoder.rnn.bias_hh_l1",
        "decoder.attention.W_k.weight", "decoder.attention.W_q.weight", "decoder.attention.w_v.weight",
        "decoder.embedding.weight", "decoder.rnn.weight_ih_l0", "decoder.rnn.weight_hh_l0",
        "decoder.rnn.bias_ih_l0", "decoder.rnn.bias_hh_l0", "decoder.rnn.weight_ih_l1",
        "decoder.rnn.weight_hh_l1", "decoder.rnn.bias_ih_l1", "decoder.rnn.bias_hh_l1",
        "decoder.dense.weight", "decoder.dense.bias"};
    EXPECT_EQ(names, want);
    const auto sd = m.state_dict();
    EXPECT_EQ(sd.at("decoder.rnn.weight_ih_l0").shape(), Shape({768, 512}));  // input [context, emb]
    // EN init: GRU weights Xavier (√(6/(512+768)) ≈ 0.0685 for decoder layer 0, √(6/(256+768))
    // ≈ 0.0765 elsewhere); GRU biases, attention and dense keep U(±1/√256) = U(±0.0625).
    auto max_abs = [&](const std::string& n) {
        double mx = 0;
        for (float v : vec(sd.at(n))) mx = std::max(mx, std::abs(double(v)));
        return mx;
    };
    const double x0 = std::sqrt(6.0 / (512 + 768)), x1 = std::sqrt(6.0 / (256 + 768));
    EXPECT_LE(max_abs("decoder.rnn.weight_ih_l0"), x0);
    EXPECT_GT(max_abs("decoder.rnn.weight_ih_l0"), 0.95 * x0);
    EXPECT_LE(max_abs("encoder.rnn.weight_hh_l1"), x1);
    EXPECT_GT(max_abs("encoder.rnn.weight_hh_l1"), 0.0625);  // beyond the default bound: Xavier ran
    for (const char* n : {"encoder.rnn.bias_ih_l0", "decoder.attention.W_q.weight", "decoder.dense.weight"}) {
        EXPECT_LE(max_abs(n), 0.0625) << n;
        EXPECT_GT(max_abs(n), 0.9 * 0.0625) << n;
    }
}

TEST(Bahdanau, RejectsBadInputs) {
    Bahdanau m(fixture_config(nn::GRUImpl::sequence));
    const Tensor src = zeros({4, 7}, DType::i64), vl = full({4}, 3, DType::i64);
    EXPECT_THROW(m.forward(zeros({4, 7}), vl, zeros({4, 6}, DType::i64)), Error);      // float src
    EXPECT_THROW(m.forward(src, full({3}, 3, DType::i64), zeros({4, 6}, DType::i64)), Error);  // lens
    EXPECT_THROW(m.forward(src, vl, zeros({5, 6}, DType::i64)), Error);               // batch differs
    EXPECT_THROW(m.forward(full({4, 7}, 11, DType::i64), vl, zeros({4, 6}, DType::i64)), Error);  // id
    auto st = m.init_state(src, vl);
    EXPECT_THROW(m.decode_step(zeros({3}, DType::i64), *st), Error);
    BahdanauConfig bad = fixture_config(nn::GRUImpl::sequence);
    bad.dropout = 1.0;
    EXPECT_THROW(Bahdanau{bad}, Error);
}

// ---- bidirectional encoder (BahdanauConfig::bidirectional; gru_bidirectional.safetensors) -----

std::map<std::string, Tensor> bidirectional_fixture() {
    std::map<std::string, Tensor> out;
    for (const auto& [k, v] : io::load_safetensors(QKV_FIXTURE_DIR "/gru_bidirectional.safetensors"))
        if (k.rfind("bahdanau.", 0) == 0) out[k.substr(9)] = v;
    return out;
}

class BahdanauBidirectionalParity : public ::testing::TestWithParam<std::tuple<nn::GRUImpl, bool>> {};

TEST_P(BahdanauBidirectionalParity, MatchesTorchForwardAttentionAndGradients) {
    const auto f = bidirectional_fixture();
    BahdanauConfig c = fixture_config(std::get<0>(GetParam()));
    c.fold_embedding_projection = std::get<1>(GetParam());
    c.bidirectional = true;
    Bahdanau m(c);
    load_fixture_weights(m, f);
    expect_matches_fixture(m, f, 31);  // 1 + 16 encoder (both directions), 3 + 1 + 8 + 2 decoder
}

INSTANTIATE_TEST_SUITE_P(Paths, BahdanauBidirectionalParity,
                         ::testing::Combine(::testing::Values(nn::GRUImpl::sequence, nn::GRUImpl::cell,
                                                              nn::GRUImpl::composite),
                                            ::testing::Bool()),
                         [](const auto& tp) {
                             const nn::GRUImpl i = std::get<0>(tp.param);
                             return std::string(i == nn::GRUImpl::sequence ? "sequence"
                                                : i == nn::GRUImpl::cell   ? "cell"
                                                                           : "composite") +
                                    (std::get<1>(tp.param) ? "_folded" : "_unfolded");
                         });

// The encoder's state for the decoder: layer l = [forward final of layer l | reverse final of
// layer l], each H/2 wide; the top layer's halves are the outputs at Ts−1 (forward) and 0 (reverse).
TEST(BahdanauBidirectional, EncoderStateConcatenatesBothDirectionsPerLayer) {
    const auto f = bidirectional_fixture();
    BahdanauConfig c = fixture_config(nn::GRUImpl::sequence);
    c.bidirectional = true;
    c.fold_embedding_projection = false;  // the same arithmetic as the GRU call below: exact
    Bahdanau m(c);
    load_fixture_weights(m, f);
    EXPECT_EQ(m.encoder->rnn->hidden_size, 8);
    auto [out, st] = m.encoder->forward(f.at("src"));
    ASSERT_EQ(out.shape(), Shape({7, 4, 16}));
    ASSERT_EQ(st.shape(), Shape({2, 4, 16}));
    EXPECT_EQ(vec(st.select(0, 1).slice(1, 0, 8)), vec(out.select(0, 6).slice(1, 0, 8)));
    EXPECT_EQ(vec(st.select(0, 1).slice(1, 8, 16)), vec(out.select(0, 0).slice(1, 8, 16)));
    // layer 0 from the GRU's own (2L, B, H/2) state: rows 0 (l0 forward) and 1 (l0 reverse)
    auto [gout, gst] = m.encoder->rnn->forward(m.encoder->embedding->forward(f.at("src").transpose(0, 1)));
    EXPECT_EQ(vec(st.select(0, 0)), vec(concat({gst.select(0, 0), gst.select(0, 1)}, 1)));
    EXPECT_EQ(vec(st.select(0, 1)), vec(concat({gst.select(0, 2), gst.select(0, 3)}, 1)));
}

TEST(BahdanauBidirectional, IncrementalDecodingEqualsTeacherForcing) {
    const auto f = bidirectional_fixture();
    BahdanauConfig c = fixture_config(nn::GRUImpl::sequence);
    c.bidirectional = true;
    Bahdanau m(c);
    load_fixture_weights(m, f);
    m.eval();
    auto state = m.init_state(f.at("src"), f.at("valid_lens"));
    for (int64_t t = 0; t < 6; ++t) {
        const Tensor logits = m.decode_step(f.at("dec_X").select(1, t).contiguous(), *state);
        EXPECT_TRUE(test::all_close(vec(logits), vec(f.at("logits").select(1, t)), test::kTolGoldenAtol,
                                    test::kTolGoldenRtol)) << "step " << t;
    }
}

// Names follow PyTorch (encoder.rnn.*_reverse); the D2L inits draw the reverse weights from
// Xavier too (bound √(6/(8+24)) ≈ 0.433 for weight_hh (24, 8), beyond GRU's U(±1/√8) ≈ 0.354).
TEST(BahdanauBidirectional, NamesAndXavierInitCoverTheReverseDirection) {
    BahdanauConfig c = fixture_config(nn::GRUImpl::sequence);
    c.bidirectional = true;
    manual_seed(5);
    Bahdanau m(c);
    const auto sd = m.state_dict();
    EXPECT_EQ(sd.at("encoder.rnn.weight_ih_l0_reverse").shape(), Shape({24, 8}));
    EXPECT_EQ(sd.at("encoder.rnn.weight_ih_l1_reverse").shape(), Shape({24, 16}));
    EXPECT_EQ(sd.at("decoder.rnn.weight_ih_l0").shape(), Shape({48, 24}));  // decoder unchanged: H 16
    EXPECT_EQ(sd.count("decoder.rnn.weight_ih_l0_reverse"), 0u);
    auto max_abs = [](const Tensor& t) {
        double mx = 0;
        for (float v : vec(t)) mx = std::max(mx, std::abs(double(v)));
        return mx;
    };
    const double gru_bound = 1.0 / std::sqrt(8.0);
    for (const char* n : {"encoder.rnn.weight_hh_l0_reverse", "encoder.rnn.weight_hh_l1_reverse",
                          "encoder.rnn.weight_ih_l1_reverse"}) {
        EXPECT_GT(max_abs(sd.at(n)), gru_bound) << n;  // Xavier ran
        EXPECT_LE(max_abs(sd.at(n)), std::sqrt(6.0 / (24 + sd.at(n).size(1)))) << n;
    }
    c.init = models::BahdanauInit::pytorch;
    Bahdanau p(c);
    EXPECT_LE(max_abs(p.state_dict().at("encoder.rnn.weight_hh_l0_reverse")), gru_bound);
}

TEST(BahdanauBidirectional, OddNumHiddensIsRefusedNamingIt) {
    BahdanauConfig c = fixture_config(nn::GRUImpl::sequence);
    c.bidirectional = true;
    c.num_hiddens = 15;
    try {
        Bahdanau m(c);
        FAIL() << "odd num_hiddens accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("num_hiddens 15"), std::string::npos) << e.what();
    }
    c.bidirectional = false;
    EXPECT_NO_THROW(Bahdanau{c});  // D2L's encoder has no such constraint
}

// Decoding through the shared decoders (decode/): the cached greedy path (decode_step) gives the
// same tokens as recomputing forward() over the prefix (which takes the folded-embedding path),
// and beam search with K = 1 is greedy, on a briefly trained model.
TEST(Bahdanau, GreedyCacheEqualsRecomputationAndBeam1EqualsGreedy) {
    const test::TinyCorpus c = test::tiny_corpus();
    manual_seed(0);
    BahdanauConfig cfg;
    cfg.src_vocab_size = c.src_vocab.size();
    cfg.tgt_vocab_size = c.tgt_vocab.size();
    cfg.embed_size = 16, cfg.num_hiddens = 32, cfg.num_layers = 2, cfg.dropout = 0.1;
    Bahdanau m(cfg);
    train::TrainOptions o;
    o.epochs = 15, o.batch_size = 8, o.lr = 0.005;
    train::TrainRuntime rt;
    rt.progress = false, rt.log = nullptr;
    train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
    const Tensor src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
    const Tensor vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
    decode::GreedyOptions g;
    g.bos = c.tgt_vocab.bos(), g.eos = c.tgt_vocab.eos(), g.max_len = 12;
    const auto cached = decode::greedy_decode(m, src, vl, g);
    g.use_cache = false;
    EXPECT_EQ(cached, decode::greedy_decode(m, src, vl, g));
    decode::BeamOptions b;
    b.beam_size = 1, b.bos = g.bos, b.eos = g.eos, b.max_len = 12;
    EXPECT_EQ(cached, decode::beam_decode(m, src, vl, b));
    b.beam_size = 4;
    const auto beam4 = decode::beam_decode(m, src, vl, b);
    ASSERT_EQ(beam4.size(), cached.size());
    size_t nonempty = 0;
    for (const auto& row : cached) nonempty += !row.empty();
    EXPECT_GT(nonempty, cached.size() / 2);  // the model did learn to emit tokens
}

// greedy_next (fused output layer + argmax) equals the default: logits, then first allowed maximum.
TEST(Bahdanau, GreedyNextEqualsArgmaxOfOutputLogits) {
    manual_seed(2);
    BahdanauConfig cfg;
    cfg.src_vocab_size = 11, cfg.tgt_vocab_size = 23;
    cfg.embed_size = 8, cfg.num_hiddens = 16, cfg.num_layers = 1;
    Bahdanau m(cfg);
    NoGradGuard ng;
    Generator g(4);
    const Tensor hidden = randn({6, 16}, &g);
    const std::vector<int64_t> want = argmax(m.output_logits(hidden), 1).to_vector<int64_t>();
    EXPECT_EQ(m.greedy_next(hidden, {}).to_vector<int64_t>(), want);
    std::vector<char> banned(23, 0);
    for (int64_t id : want) banned[size_t(id)] = 1;
    EXPECT_EQ(m.greedy_next(hidden, banned).to_vector<int64_t>(),
              m.EncoderDecoder::greedy_next(hidden, banned).to_vector<int64_t>());
}

// A tiny model learns 8 short pairs by heart: greedy decoding then reproduces every target.
TEST(Bahdanau, MemorisesEightPairs) {
    manual_seed(0);
    const int64_t B = 8, Ts = 5, Tt = 6, bos = 1, eos = 2, pad = 0;
    // Sources and targets over small vocabularies (ids >= 3), each ending in <eos>, padded.
    const std::vector<std::vector<int64_t>> srcs = {{3, 4, 2}, {5, 2}, {6, 7, 8, 2}, {9, 3, 2},
                                                    {4, 4, 5, 2}, {10, 2}, {7, 6, 2}, {8, 9, 10, 3, 2}};
    const std::vector<std::vector<int64_t>> tgts = {{3, 2}, {4, 5, 2}, {6, 7, 2}, {8, 9, 3, 2},
                                                    {10, 2}, {11, 12, 4, 2}, {5, 6, 7, 8, 2}, {9, 2}};
    std::vector<int64_t> src(B * Ts, pad), vl(B), dec(B * Tt, pad), lab(B * Tt, pad);
    for (int64_t b = 0; b < B; ++b) {
        const auto& s = srcs[size_t(b)];
        const auto& t = tgts[size_t(b)];
        for (size_t i = 0; i < s.size(); ++i) src[size_t(b * Ts) + i] = s[i];
        vl[size_t(b)] = int64_t(s.size());
        dec[size_t(b * Tt)] = bos;
        for (size_t i = 0; i < t.size(); ++i) {
            lab[size_t(b * Tt) + i] = t[i];
            if (i + 1 < size_t(Tt)) dec[size_t(b * Tt) + i + 1] = t[i];
        }
    }
    const Tensor S = from_vector(src, {B, Ts}), VL = from_vector(vl, {B}), D = from_vector(dec, {B, Tt}),
                 L = from_vector(lab, {B, Tt});
    BahdanauConfig c;
    c.src_vocab_size = 11;
    c.tgt_vocab_size = 13;
    c.embed_size = 16;
    c.num_hiddens = 32;
    c.num_layers = 2;
    c.dropout = 0.0;
    Bahdanau m(c);
    optim::Adam opt(m.parameters(), 0.01);
    CrossEntropyOptions ce;
    ce.ignore_index = pad;
    double loss_v = 0;
    for (int step = 0; step < 150; ++step) {
        opt.zero_grad();
        Tensor loss = cross_entropy(m.forward(S, VL, D), L, Tensor(), ce);
        loss.backward();
        opt.step();
        loss_v = loss.item();
    }
    EXPECT_LT(loss_v, 0.05);
    m.eval();
    auto st = m.init_state(S, VL);
    Tensor tok = full({B}, double(bos), DType::i64);
    std::vector<std::vector<int64_t>> out(B);
    std::vector<bool> done(B, false);
    for (int64_t t = 0; t < Tt + 2; ++t) {
        tok = argmax(m.decode_step(tok, *st), 1);
        const auto ids = tok.to_vector<int64_t>();
        for (int64_t b = 0; b < B; ++b) {
            if (done[size_t(b)]) continue;
            out[size_t(b)].push_back(ids[size_t(b)]);
            done[size_t(b)] = ids[size_t(b)] == eos;
        }
    }
    for (int64_t b = 0; b < B; ++b) EXPECT_EQ(out[size_t(b)], tgts[size_t(b)]) << "pair " << b;
}

}  // namespace
