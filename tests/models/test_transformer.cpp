// D2L Transformer: parameter names/count against the PyTorch model, shapes, input checks, and the
// incremental (cached) decoder against the teacher-forced forward pass: step by step, and through
// decode::generate (greedy, beam search with reorders, the attention trace).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/greedy.h"
#include "qkv/models/transformer.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

/// Cached decoding vs the full forward pass: both compute the same sums in fp32 but with other
/// GEMM shapes (M = 1 vs M = T rows) and other softmax row lengths, so rounding differs by a few
/// ulp per dot product, carried through 2 blocks × 3 layer norms into logits of magnitude ~1–5.
/// Measured max |difference| 3.6e-7 on these models; 1e-5 leaves a ~30× margin.
constexpr double kTolCacheAtol = 1e-5;
constexpr double kTolCacheRtol = 1e-5;

models::TransformerConfig book_config() {
    models::TransformerConfig c;
    c.src_vocab_size = 194;
    c.tgt_vocab_size = 214;
    c.num_hiddens = 256, c.num_blks = 2, c.num_heads = 4, c.ffn_num_hiddens = 64, c.dropout = 0.2;
    return c;
}

models::TransformerConfig small_config() {
    models::TransformerConfig c;
    c.src_vocab_size = 11;
    c.tgt_vocab_size = 13;
    c.num_hiddens = 16, c.num_blks = 2, c.num_heads = 4, c.ffn_num_hiddens = 24, c.dropout = 0.1;
    return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
    std::vector<int64_t> v(size_t(B * T));
    uint64_t s = seed * 2654435761ULL + 1;
    for (auto& x : v) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x = int64_t((s >> 33) % uint64_t(V));
    }
    return from_vector(v, {B, T});
}

/// The pad-free path against forward_hidden: the same fp32 sums per row, but GEMMs over fewer
/// rows (M differs, so the library may block the K sums differently) and attention over the
/// same keys; a few ulp per dot product through 2 blocks × 3 layer norms, as for the cache.
constexpr double kTolPackedAtol = kTolCacheAtol;
constexpr double kTolPackedRtol = kTolCacheRtol;

/// Flat rows b·T + t of the positions t < len[b] whose t is not in `skip_t` (any subset).
Tensor rows_of(const std::vector<int64_t>& len, int64_t T, int64_t skip_t = -1) {
    std::vector<int64_t> r;
    for (size_t b = 0; b < len.size(); ++b)
        for (int64_t t = 0; t < len[b]; ++t)
            if (t != skip_t) r.push_back(int64_t(b) * T + t);
    return from_vector(r, {int64_t(r.size())});
}

/// Parameter gradients of sum(h ∘ w) for a fixed weight w, in model order.
std::vector<std::vector<float>> grads_of(models::Transformer& m, const Tensor& h) {
    m.zero_grad();
    const Tensor w = from_vector(random_floats(h.numel(), 7), h.shape());
    sum(mul(h, w)).backward();
    std::vector<std::vector<float>> g;
    for (auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>());
    return g;
}

TEST(Transformer, ForwardHiddenRowsMatchesForwardHiddenRowsAndGradients) {
    manual_seed(4);
    models::Transformer m(small_config());
    m.eval();  // dropout off: both paths are deterministic (gradients still recorded)
    const int64_t B = 5, Ts = 7, Tt = 6;
    const Tensor src = random_ids(B, Ts, 11, 1), dec = random_ids(B, Tt, 13, 2);
    const Tensor vl = from_vector<int64_t>({7, 3, 1, 5, 9}, {B});  // 9 > Ts is clamped
    const std::vector<int64_t> tlen{6, 2, 4, 1, 3};
    for (int64_t skip : {int64_t(-1), int64_t(0)}) {  // prefixes, then rows with t = 0 left out
        const Tensor rows = rows_of(tlen, Tt, skip);
        const Tensor full = m.forward_hidden(src, vl, dec);
        const Tensor want = index_select(full.reshape({B * Tt, -1}), 0, rows);
        const Tensor got = m.forward_hidden_rows(src, vl, dec, rows);
        ASSERT_EQ(got.shape(), want.shape());
        EXPECT_TRUE(all_close(got.to_vector<float>(), want.to_vector<float>(), kTolPackedAtol, kTolPackedRtol)) << skip;
        const auto gw = grads_of(m, want), gg = grads_of(m, got);
        ASSERT_EQ(gw.size(), gg.size());
        for (size_t i = 0; i < gw.size(); ++i)
            EXPECT_TRUE(all_close(gg[i], gw[i], kTolPackedAtol, kTolPackedRtol)) << "param " << i << " skip " << skip;
    }
}

TEST(Transformer, ForwardHiddenRowsFallsBackAndChecksRows) {
    manual_seed(5);
    models::Transformer m(small_config());
    m.eval();
    const int64_t B = 2, T = 4;
    const Tensor src = random_ids(B, T, 11, 3), dec = random_ids(B, T, 13, 4);
    const Tensor rows = rows_of({3, 2}, T);
    // An empty source: D2L's masked softmax then averages all (pad) keys, so the full pass runs.
    const Tensor vl0 = from_vector<int64_t>({0, 4}, {B});
    const Tensor want0 = index_select(m.forward_hidden(src, vl0, dec).reshape({B * T, -1}), 0, rows);
    EXPECT_TRUE(all_close(m.forward_hidden_rows(src, vl0, dec, rows).to_vector<float>(), want0.to_vector<float>(),
                          kTolExact, kTolExact));
    const Tensor vl = from_vector<int64_t>({2, 4}, {B});
    EXPECT_THROW(m.forward_hidden_rows(src, vl, dec, from_vector<int64_t>({2, 1}, {2})), Error);  // not increasing
    EXPECT_THROW(m.forward_hidden_rows(src, vl, dec, from_vector<int64_t>({0, 8}, {2})), Error);  // out of range
    EXPECT_THROW(m.forward_hidden_rows(src, vl, dec, from_vector<double>({0, 1}, {2})), Error);   // not i64
}

TEST(Transformer, BookModelHasD2lParameterCountAndNames) {
    manual_seed(0);
    models::Transformer m(book_config());
    // spec §3: encoder 642,176 + decoder 1,227,606 = 1,869,782 for vocabularies 194/214.
    EXPECT_EQ(m.num_parameters(), 1869782);
    EXPECT_EQ(m.encoder->num_parameters(), 642176);
    EXPECT_EQ(m.decoder->num_parameters(), 1227606);
    auto named = m.named_parameters();
    std::map<std::string, Shape> shapes;
    for (auto& [n, t] : named) shapes[n] = t.shape();
    EXPECT_EQ(named.front().first, "encoder.embedding.weight");
    EXPECT_EQ(named.back().first, "decoder.dense.bias");
    const std::vector<std::pair<std::string, Shape>> want = {
        {"encoder.embedding.weight", {194, 256}},
        {"encoder.blks.0.attention.W_q.weight", {256, 256}},
        {"encoder.blks.0.attention.W_o.weight", {256, 256}},
        {"encoder.blks.0.addnorm1.ln.weight", {256}},
        {"encoder.blks.0.ffn.dense1.weight", {64, 256}},
        {"encoder.blks.0.ffn.dense1.bias", {64}},
        {"encoder.blks.1.ffn.dense2.weight", {256, 64}},
        {"encoder.blks.1.addnorm2.ln.bias", {256}},
        {"decoder.embedding.weight", {214, 256}},
        {"decoder.blks.0.attention1.W_k.weight", {256, 256}},
        {"decoder.blks.1.attention2.W_v.weight", {256, 256}},
        {"decoder.blks.1.addnorm3.ln.weight", {256}},
        {"decoder.dense.weight", {214, 256}},
        {"decoder.dense.bias", {214}}};
    for (auto& [n, s] : want) {
        ASSERT_TRUE(shapes.count(n)) << "missing " << n;
        EXPECT_EQ(shapes[n], s) << n;
    }
    // D2L: no bias in the attention projections.
    EXPECT_FALSE(shapes.count("encoder.blks.0.attention.W_q.bias"));
    // 2 embeddings + dense (2) + per encoder block 4 + 2·2 + 4 = 12, per decoder block 8 + 3·2 + 4 = 18.
    EXPECT_EQ(named.size(), size_t(1 + 2 * 12 + 1 + 2 * 18 + 2));
}

TEST(Transformer, SameSeedSameInit) {
    manual_seed(7);
    models::Transformer a(small_config());
    manual_seed(7);
    models::Transformer b(small_config());
    auto pa = a.parameters(), pb = b.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].to_vector<float>(), pb[i].to_vector<float>());
}

TEST(Transformer, ForwardShapes) {
    manual_seed(1);
    auto cfg = small_config();
    models::Transformer m(cfg);
    const Tensor src = random_ids(3, 5, cfg.src_vocab_size, 1);
    const Tensor vl = from_vector<int64_t>({5, 3, 1}, {3});
    const Tensor dec = random_ids(3, 4, cfg.tgt_vocab_size, 2);
    EXPECT_EQ(m.forward_hidden(src, vl, dec).shape(), (Shape{3, 4, 16}));
    EXPECT_EQ(m.forward(src, vl, dec).shape(), (Shape{3, 4, 13}));
}

// greedy_next (the fused output layer + argmax) equals the default path: the full logits, then
// the first allowed maximum. With random weights the logits are distinct, so the ids must agree.
TEST(Transformer, GreedyNextEqualsArgmaxOfOutputLogits) {
    manual_seed(5);
    auto cfg = small_config();
    models::Transformer m(cfg);
    NoGradGuard ng;
    Generator g(9);
    const Tensor hidden = randn({7, cfg.num_hiddens}, &g);
    const Tensor want = argmax(m.output_logits(hidden), 1);
    EXPECT_EQ(m.greedy_next(hidden, {}).to_vector<int64_t>(), want.to_vector<int64_t>());
    EXPECT_EQ(m.EncoderDecoder::greedy_next(hidden, {}).to_vector<int64_t>(), want.to_vector<int64_t>());
    std::vector<char> banned(size_t(cfg.tgt_vocab_size), 0);
    for (int64_t id : want.to_vector<int64_t>()) banned[size_t(id)] = 1;
    const std::vector<int64_t> fused = m.greedy_next(hidden, banned).to_vector<int64_t>();
    EXPECT_EQ(fused, m.EncoderDecoder::greedy_next(hidden, banned).to_vector<int64_t>());
    for (int64_t id : fused) EXPECT_FALSE(banned[size_t(id)]);
    EXPECT_THROW(m.greedy_next(hidden, std::vector<char>(3, 0)), Error);
    EXPECT_THROW(m.EncoderDecoder::greedy_next(hidden, std::vector<char>(3, 0)), Error);
}

TEST(Transformer, RejectsBadInputs) {
    manual_seed(1);
    auto cfg = small_config();
    models::Transformer m(cfg);
    const Tensor src = random_ids(2, 5, cfg.src_vocab_size, 1);
    const Tensor vl = from_vector<int64_t>({5, 3}, {2});
    const Tensor dec = random_ids(2, 4, cfg.tgt_vocab_size, 2);
    EXPECT_THROW(m.forward(src.to(DType::f32), vl, dec), Error);
    EXPECT_THROW(m.forward(src, from_vector<int64_t>({5, 3, 1}, {3}), dec), Error);
    EXPECT_THROW(m.forward(src, vl, random_ids(3, 4, cfg.tgt_vocab_size, 2)), Error);
    EXPECT_THROW(m.forward(random_ids(2, 5, 100, 3), vl, dec), Error);  // id out of the vocabulary
    auto bad = cfg;
    bad.num_heads = 3;
    EXPECT_THROW(models::Transformer{bad}, Error);
    bad = cfg;
    bad.dropout = 1.0;
    EXPECT_THROW(models::Transformer{bad}, Error);
    auto st = m.init_state(src, vl);
    EXPECT_THROW(m.decode_step(from_vector<int64_t>({1, 2, 3}, {3}), *st), Error);
    EXPECT_THROW(st->reorder(from_vector<int64_t>({0, 2}, {2})), Error);
}

/// Runs the cached decoder over the columns of dec and compares each step's logits with the
/// teacher-forced pass's logits at that position.
void expect_cache_matches_forward(models::Transformer& m, const Tensor& src, const Tensor& vl,
                                  const Tensor& dec) {
    NoGradGuard ng;
    const Tensor full = m.forward(src, vl, dec).contiguous();  // (B, T, V)
    auto st = m.init_state(src, vl);
    const int64_t T = dec.size(1);
    for (int64_t t = 0; t < T; ++t) {
        const Tensor step = m.decode_step(dec.select(1, t).contiguous(), *st);
        EXPECT_EQ(st->steps(), t + 1);
        const auto got = step.to_vector<float>();
        const auto want = full.select(1, t).contiguous().to_vector<float>();
        EXPECT_TRUE(all_close(got, want, kTolCacheAtol, kTolCacheRtol)) << "step " << t;
    }
}

TEST(Transformer, CachedDecodeStepMatchesFullForward) {
    manual_seed(3);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    // 20 steps: crosses the cache's initial capacity (16), so the buffer growth is covered.
    expect_cache_matches_forward(m, random_ids(3, 6, cfg.src_vocab_size, 4),
                                 from_vector<int64_t>({6, 2, 1}, {3}),
                                 random_ids(3, 20, cfg.tgt_vocab_size, 5));
}

TEST(Transformer, ReorderFollowsTheIndex) {
    manual_seed(5);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    NoGradGuard ng;
    const Tensor src = random_ids(3, 5, cfg.src_vocab_size, 6);
    const Tensor vl = from_vector<int64_t>({5, 4, 2}, {3});
    const Tensor tok0 = from_vector<int64_t>({1, 2, 3}, {3});
    auto st = m.init_state(src, vl);
    m.decode_step(tok0, *st);
    st->reorder(from_vector<int64_t>({2, 0, 0, 1}, {4}));
    const Tensor got = m.decode_step(from_vector<int64_t>({4, 5, 6, 7}, {4}), *st);
    // The same rows decoded from scratch.
    const Tensor src2 = index_select(src, 0, from_vector<int64_t>({2, 0, 0, 1}, {4}));
    const Tensor vl2 = from_vector<int64_t>({2, 5, 5, 4}, {4});
    auto st2 = m.init_state(src2, vl2);
    m.decode_step(from_vector<int64_t>({3, 1, 1, 2}, {4}), *st2);
    const Tensor want = m.decode_step(from_vector<int64_t>({4, 5, 6, 7}, {4}), *st2);
    EXPECT_TRUE(all_close(got.to_vector<float>(), want.to_vector<float>(), kTolCacheAtol, kTolCacheRtol));
}

TEST(Transformer, PeQuirkUsesPositionZeroAtEveryStep) {
    manual_seed(9);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    NoGradGuard ng;
    const Tensor src = random_ids(1, 4, cfg.src_vocab_size, 7);
    const Tensor vl = from_vector<int64_t>({4}, {1});
    const Tensor tok = from_vector<int64_t>({2}, {1});
    auto a = m.init_state(src, vl);
    const auto a0 = m.decode_step(tok, *a).to_vector<float>();
    const auto a1 = m.decode_step(tok, *a).to_vector<float>();
    m.set_pe_position_zero_at_inference(true);
    auto b = m.init_state(src, vl);
    const auto b0 = m.decode_step(tok, *b).to_vector<float>();
    const auto b1 = m.decode_step(tok, *b).to_vector<float>();
    EXPECT_EQ(a0, b0);  // step 0 is position 0 either way
    // Step 1 with position 0 and the same token as step 0: query, key and value of both
    // positions coincide, so self-attention returns that value and the logits equal step 0's.
    EXPECT_TRUE(all_close(b1, b0, kTolCacheAtol, kTolCacheRtol));
    EXPECT_FALSE(all_close(a1, a0, kTolCacheAtol, kTolCacheRtol));
}

TEST(Transformer, KeepsAttentionWeightsForHeatmaps) {
    manual_seed(2);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    m.keep_attention_weights(true);
    NoGradGuard ng;
    const Tensor src = random_ids(2, 5, cfg.src_vocab_size, 8);
    const Tensor vl = from_vector<int64_t>({5, 3}, {2});
    auto st = m.init_state(src, vl);
    models::DecoderAttentionTrace trace;
    st->trace = &trace;
    m.decode_step(from_vector<int64_t>({1, 1}, {2}), *st);
    m.decode_step(from_vector<int64_t>({2, 3}, {2}), *st);
    const Tensor w = m.encoder->blks[0]->attention->attention_weights();
    ASSERT_TRUE(w.defined());
    EXPECT_EQ(w.shape(), (Shape{2, 4, 5, 5}));
    const auto v = w.to_vector<float>();
    // Row b = 1 has 3 valid keys: weights at keys 3, 4 are exactly 0; rows sum to 1.
    for (int64_t h = 0; h < 4; ++h)
        for (int64_t q = 0; q < 5; ++q) {
            const float* r = v.data() + ((1 * 4 + h) * 5 + q) * 5;
            EXPECT_EQ(r[3], 0.f);
            EXPECT_EQ(r[4], 0.f);
            EXPECT_NEAR(r[0] + r[1] + r[2], 1.0, 1e-6);
        }
    ASSERT_EQ(trace.self.size(), 2u);
    ASSERT_EQ(trace.self[1].size(), 2u);
    EXPECT_EQ(trace.self[1][0].shape(), (Shape{2, 4, 1, 2}));
    EXPECT_EQ(trace.cross[1][1].shape(), (Shape{2, 4, 1, 5}));
}

/// The search over the KV cache and over the teacher-forced forward recomputed at every step
/// (models::TeacherForcedDecoding) give the same hypotheses, log-probabilities to float rounding:
/// greedy (fused and with scores) and beam search, whose reorders move the caches' rows. An
/// untrained model rarely emits <eos>, so hypotheses grow past the cache's first capacity (16).
TEST(Transformer, GenerateOverTheCacheEqualsTeacherForcedDecoding) {
    manual_seed(11);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    const Tensor src = random_ids(3, 6, cfg.src_vocab_size, 12);
    const Tensor vl  = from_vector<int64_t>({6, 3, 1}, {3});
    models::TeacherForcedDecoding full(m);
    for (int64_t K : {1, 3}) {
        SCOPED_TRACE(K);
        decode::DecodeOptions o;
        o.bos = 1, o.eos = 2, o.max_len = 20, o.beam_size = K, o.num_hypotheses = K;
        const auto a = decode::generate(m, src, vl, o);
        const auto b = decode::generate(full, src, vl, o);
        ASSERT_EQ(a.size(), b.size());
        size_t longest = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            ASSERT_EQ(a[i].size(), b[i].size()) << i;
            for (size_t j = 0; j < a[i].size(); ++j) {
                EXPECT_EQ(a[i][j].tokens, b[i][j].tokens) << i << " " << j;
                EXPECT_EQ(a[i][j].finished, b[i][j].finished);
                EXPECT_NEAR(a[i][j].log_prob, b[i][j].log_prob, 1e-4);
                longest = std::max(longest, a[i][j].tokens.size());
            }
        }
        EXPECT_GT(longest, 16u);
        if (K == 1) {
            decode::GreedyOptions g;
            g.bos = 1, g.eos = 2, g.max_len = 20;
            const auto fused = decode::greedy_decode(m, src, vl, g);
            for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(fused[i], a[i][0].tokens) << i;
        }
    }
}

/// The trace greedy decoding records (heatmaps) holds, per step and block, the cross-attention
/// weights the teacher-forced pass over the decoded sequence has at that position.
TEST(Transformer, GreedyTraceEqualsTheTeacherForcedWeights) {
    manual_seed(13);
    auto cfg = small_config();
    models::Transformer m(cfg);
    m.eval();
    const Tensor src = random_ids(1, 5, cfg.src_vocab_size, 14);
    const Tensor vl  = from_vector<int64_t>({4}, {1});
    models::DecoderAttentionTrace trace;
    decode::GreedyOptions g;
    g.bos = 1, g.eos = 2, g.max_len = 7, g.trace = &trace;
    const auto out = decode::greedy_decode(m, src, vl, g);
    const int64_t steps = int64_t(trace.cross.size());
    ASSERT_EQ(steps, int64_t(out[0].size()) + (int64_t(out[0].size()) < g.max_len ? 1 : 0));
    std::vector<int64_t> dec = {1};
    dec.insert(dec.end(), out[0].begin(), out[0].end());
    dec.resize(size_t(steps));
    m.keep_attention_weights(true);
    NoGradGuard ng;
    m.forward(src, vl, from_vector(dec, {1, steps}));
    m.keep_attention_weights(false);
    for (size_t blk = 0; blk < m.decoder->blks.size(); ++blk) {
        const Tensor want = m.decoder->blks[blk]->attention2->attention_weights();  // (1, H, steps, 5)
        const Tensor self = m.decoder->blks[blk]->attention1->attention_weights();  // (1, H, steps, steps)
        for (int64_t t = 0; t < steps; ++t) {
            const Tensor got = trace.cross[size_t(t)][blk];  // (1, H, 1, 4): the source cut to its valid length
            ASSERT_EQ(got.shape(), (Shape{1, cfg.num_heads, 1, 4}));
            EXPECT_TRUE(all_close(got.contiguous().to_vector<float>(),
                                  want.slice(2, t, t + 1).slice(3, 0, 4).contiguous().to_vector<float>(), 1e-5, 1e-5))
                << "block " << blk << " step " << t;
            const Tensor got_self = trace.self[size_t(t)][blk];  // (1, H, 1, t + 1)
            ASSERT_EQ(got_self.shape(), (Shape{1, cfg.num_heads, 1, t + 1}));
            EXPECT_TRUE(all_close(got_self.contiguous().to_vector<float>(),
                                  self.slice(2, t, t + 1).slice(3, 0, t + 1).contiguous().to_vector<float>(), 1e-5,
                                  1e-5))
                << "block " << blk << " step " << t;
        }
    }
}

}  // namespace
}  // namespace qkv::test
