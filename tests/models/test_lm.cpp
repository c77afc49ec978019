// The decoder-only language model (models/lm.h, train/lm.h, runtime/generate.h): cached decoding equals the full
// causal forward (RoPE and sinusoidal positions, GQA, a window), also through decode::generate
// (prompts, greedy and beam search), generation with the cache equals recomputing the prefix,
// training lowers the loss on a repetitive text, D2L's preprocessing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/generate.h"
#include "qkv/models/lm.h"
#include "qkv/ops/ops.h"
#include "qkv/runtime/generate.h"
#include "qkv/train/lm.h"
#include "qkv/train/run.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

// Float32 hidden states (layer-normed, O(1)) from the same sums in two orders: a few ulps.
constexpr double kF32Tol = 1e-5;

double max_abs_diff(const Tensor& a, const Tensor& b) {
    const auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
    EXPECT_EQ(x.size(), y.size());
    double m = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
    return m;
}

TEST(TransformerLM, CachedDecodingEqualsTheFullForward) {
    std::vector<models::TransformerLMConfig> cfgs(3);
    for (auto& c : cfgs) c.vocab_size = 11, c.num_hiddens = 16, c.num_heads = 4, c.num_blks = 2, c.ffn_num_hiddens = 32;
    cfgs[1].rope = false, cfgs[1].max_len = 64;
    cfgs[2].num_kv_heads = 2, cfgs[2].window = 3;
    for (size_t n = 0; n < cfgs.size(); ++n) {
        SCOPED_TRACE(n);
        manual_seed(40 + n);
        models::TransformerLM m(cfgs[n]);
        m.eval();
        const Tensor tokens = from_vector<int64_t>({1, 4, 2, 9, 9, 3, 0, 7, 5, 2, 8, 1, 6, 6, 10, 2}, {2, 8});
        NoGradGuard ng;
        const Tensor full = m.hidden(tokens);
        models::LMState st;
        st.batch = 2, st.caches.resize(2);
        std::vector<Tensor> parts = {m.hidden_cached(tokens.slice(1, 0, 3), st)};
        for (int64_t t = 3; t < 8; ++t)
            parts.push_back(m.decode_step_hidden(tokens.slice(1, t, t + 1).reshape({2}), st).reshape({2, 1, 16}));
        EXPECT_EQ(st.steps(), 8);
        EXPECT_LE(max_abs_diff(concat(parts, 1), full), kF32Tol);
    }
    models::TransformerLMConfig bad = cfgs[0];
    bad.window = 0;
    EXPECT_NE(error_of([&] { models::TransformerLM m(bad); }).find("window must be >= 1"), std::string::npos);
}

/// decode::generate on the LM (the search the translators use): each hypothesis's log-probability
/// is the teacher-forced sum over prompt + hypothesis (the full causal forward), greedy picks the
/// full forward's argmax at every step, and the fused greedy path gives the same tokens.
TEST(TransformerLM, GenerateEqualsTheFullForward) {
    std::vector<models::TransformerLMConfig> cfgs(2);
    for (auto& c : cfgs) c.vocab_size = 11, c.num_hiddens = 16, c.num_heads = 4, c.num_blks = 2, c.ffn_num_hiddens = 32;
    cfgs[1].rope = false, cfgs[1].max_len = 64, cfgs[1].num_kv_heads = 2;
    for (size_t n = 0; n < cfgs.size(); ++n) {
        SCOPED_TRACE(n);
        manual_seed(50 + n);
        models::TransformerLM m(cfgs[n]);
        m.eval();
        const std::vector<int64_t> prompt_ids = {1, 4, 2, 9, 3, 0};
        const Tensor prompts = from_vector(prompt_ids, {2, 3}), lens = from_vector<int64_t>({3, 3}, {2});
        for (int64_t K : {1, 3}) {
            SCOPED_TRACE(K);
            decode::DecodeOptions o;
            o.bos = 0, o.eos = 10, o.max_len = 20, o.beam_size = K, o.num_hypotheses = K;
            const auto hyps = decode::generate(m, prompts, lens, o);
            ASSERT_EQ(hyps.size(), 2u);
            NoGradGuard ng;
            for (int64_t b = 0; b < 2; ++b) {
                ASSERT_EQ(int64_t(hyps[size_t(b)].size()), K);
                for (const auto& h : hyps[size_t(b)]) {
                    std::vector<int64_t> seq(prompt_ids.begin() + b * 3, prompt_ids.begin() + b * 3 + 3);
                    seq.insert(seq.end(), h.tokens.begin(), h.tokens.end());
                    if (h.finished) seq.push_back(o.eos);
                    const int64_t T = int64_t(seq.size());
                    const auto lp = log_softmax(m.logits(from_vector(seq, {1, T})), -1).contiguous().to_vector<float>();
                    double sum = 0;
                    for (int64_t t = 3; t < T; ++t) {
                        const float* row = lp.data() + (t - 1) * 11;
                        sum += row[seq[size_t(t)]];
                        if (K == 1) {  // greedy: the full forward's first maximum
                            EXPECT_EQ(int64_t(std::max_element(row, row + 11) - row), seq[size_t(t)]) << "step " << t;
                        }
                    }
                    EXPECT_NEAR(h.log_prob, sum, 1e-4);
                }
            }
            if (K == 1) {
                o.scores = false;
                const auto fused = decode::generate(m, prompts, lens, o);
                for (size_t b = 0; b < 2; ++b) EXPECT_EQ(fused[b][0].tokens, hyps[b][0].tokens);
            }
        }
        EXPECT_THROW(m.init_state(prompts, from_vector<int64_t>({3, 2}, {2})), Error);  // no padding
    }
}

/// What `qkv generate` asks of decode::generate: on_token streams exactly the returned tokens;
/// recompute_prefix (--no-cache) gives the cached search's tokens; sampling with keyed_by_source
/// false draws from Generator(seed) itself (the reference: the full forward's log-softmax row,
/// sampling_distribution, sample_from on that stream).
TEST(TransformerLM, GenerateStreamsRecomputesAndSamplesFromTheSeed) {
    models::TransformerLMConfig c;
    c.vocab_size = 11, c.num_hiddens = 16, c.num_heads = 4, c.num_blks = 2, c.ffn_num_hiddens = 32;
    manual_seed(60);
    models::TransformerLM m(c);
    m.eval();
    const std::vector<int64_t> prompt = {1, 4, 2, 9};
    const Tensor src = from_vector(prompt, {1, 4}), len = from_vector<int64_t>({4}, {1});
    decode::DecodeOptions o;
    o.bos = o.eos = 10, o.max_len = o.min_len = 12, o.banned = {0}, o.scores = false;
    for (bool sampling : {false, true}) {
        SCOPED_TRACE(sampling);
        o.sampling.enabled = sampling, o.sampling.temperature = 1.5, o.sampling.top_k = 6, o.sampling.seed = 9;
        o.sampling.keyed_by_source = false;
        std::vector<int64_t> streamed;
        o.on_token = [&](int64_t b, int64_t id) {
            EXPECT_EQ(b, 0);
            streamed.push_back(id);
        };
        const auto cached = decode::generate(m, src, len, o)[0][0].tokens;
        EXPECT_EQ(streamed, cached);
        ASSERT_EQ(cached.size(), 12u);  // <eos> (10) held back by min_len
        m.set_recompute_prefix(true);
        o.on_token = nullptr;
        EXPECT_EQ(decode::generate(m, src, len, o)[0][0].tokens, cached);
        m.set_recompute_prefix(false);
        // the reference loop over the full forward
        NoGradGuard ng;
        Generator gen(9);
        std::vector<int64_t> seq = prompt, ref;
        for (int n = 0; n < 12; ++n) {
            const int64_t T = int64_t(seq.size());
            const auto lp = log_softmax(m.logits(from_vector(seq, {1, T})), -1).contiguous().to_vector<float>();
            std::vector<double> row(lp.end() - 11, lp.end());
            row[0] = row[10] = -INFINITY;
            const int64_t next = sampling ? decode::sample_from(decode::sampling_distribution(row, o.sampling), gen)
                                          : int64_t(std::max_element(row.begin(), row.end()) - row.begin());
            ref.push_back(next), seq.push_back(next);
        }
        EXPECT_EQ(cached, ref);
    }
    o.beam_size = 2;
    o.sampling.enabled = false;
    o.on_token = [](int64_t, int64_t) {};
    EXPECT_NE(error_of([&] { decode::generate(m, src, len, o); }).find("beam_size must be 1"), std::string::npos);
}

TEST(TransformerLM, PreprocessingIsD2ls) {
    EXPECT_EQ(runtime::preprocess_lm_text("The Time-Traveller (for so it will\n be convenient) 1895!"),
              "the time traveller for so it will be convenient");
    EXPECT_EQ(runtime::preprocess_lm_text("  ...  "), "");
}

/// A text of a few repeated sentences in `dir`/text.txt.
std::string write_text(const TempDir& dir) {
    std::ofstream f(dir / "text.txt");
    for (int i = 0; i < 200; ++i) f << "the time traveller smiled. we sat and looked at him!\n";
    return dir / "text.txt";
}

TEST(TransformerLM, TrainsGeneratesAndTheCacheChangesNothing) {
    TempDir dir;
    train::RunConfig cfg = train::preset_config("lm-tiny", train::ModelKind::lm);
    cfg.data.path = write_text(dir);
    cfg.train.max_steps = 150, cfg.train.time_budget_s = 0, cfg.train.lr = 1e-2;
    train::RunOptions ro;
    ro.out_dir = dir / "run", ro.progress = false, ro.log = nullptr;
    const train::RunResult r = train::run(cfg, ro);
    ASSERT_FALSE(r.train.epochs.empty());
    // ln 16 ≈ 2.77 is uniform over this text's 16 characters; the model must learn far below it.
    EXPECT_LT(r.train.epochs.back().val_loss, 1.0);
    const runtime::ModelDir m = runtime::load_model_dir(dir / "run", /*language_model=*/true);
    EXPECT_EQ(m.config.architecture, train::ModelKind::lm);
    EXPECT_EQ(m.tgt_vocab.size(), m.config.lm.vocab_size);
    runtime::GenerateOptions g;
    g.max_new_tokens = 30;
    std::string streamed;
    const std::string cached = runtime::generate_text(m, "the time", g, [&](const std::string& p) { streamed += p; });
    EXPECT_EQ(streamed, cached);
    EXPECT_EQ(cached.size(), 30u);
    g.use_cache = false;
    EXPECT_EQ(runtime::generate_text(m, "the time", g), cached);
    EXPECT_NE(cached.find("traveller"), std::string::npos) << cached;  // learned the repeated text
    g.use_cache = true, g.temperature = 1.0, g.seed = 4;
    const std::string s1 = runtime::generate_text(m, "we", g), s2 = runtime::generate_text(m, "we", g);
    EXPECT_EQ(s1, s2);
    EXPECT_NE(error_of([&] { runtime::generate_text(m, "the 7 quixotic", g); }).find("never saw: 'cqux'"), std::string::npos);
}

}  // namespace
}  // namespace qkv::test
