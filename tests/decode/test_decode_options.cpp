// decode::DecodeOptions: n-best scores against teacher forcing, the per-row rules (repetition
// penalty, min length, no-repeat-n-gram, target prefix) on hand-made rows and in the search,
// batch bookkeeping with the rules on, and sampling (seeded, top-k = 1 is greedy, distributions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/greedy.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/trainer.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Teacher forcing runs the full decoder in f32 while the search sums cached-step f32
// log-probabilities in f64: a few ulps of f32 per token over <= 10 tokens.
constexpr double kLogProbTol = 1e-3;

double sequence_log_prob(models::Transformer& m, const Tensor& src, const Tensor& vl, int64_t bos, int64_t eos,
                         const std::vector<int64_t>& toks, bool finished) {
    NoGradGuard ng;
    std::vector<int64_t> in = {bos};
    in.insert(in.end(), toks.begin(), toks.end());
    std::vector<int64_t> out = toks;
    if (finished) out.push_back(eos);
    else in.pop_back();
    const int64_t T = int64_t(in.size());
    const Tensor lp = log_softmax(m.forward(src, vl, from_vector(in, {1, T})), -1).contiguous();
    const auto v = lp.to_vector<float>();
    const int64_t V = lp.size(2);
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += v[size_t(t * V + out[size_t(t)])];
    return s;
}

struct Fixture {
    TinyCorpus c = tiny_corpus();
    std::unique_ptr<models::Transformer> m;
    Tensor src, vl;
    explicit Fixture(uint64_t seed, int64_t epochs = 0) {
        manual_seed(seed);
        m = std::make_unique<models::Transformer>(tiny_config(c));
        if (epochs > 0) {
            train::TrainOptions o;
            o.epochs = epochs, o.batch_size = 8, o.lr = 0.005;
            train::TrainRuntime rt;
            rt.progress = false, rt.log = nullptr;
            train::Trainer(*m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
        }
        m->eval();
        src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
        vl  = from_vector(c.arrays.src_valid_len, {c.arrays.n});
    }
    decode::DecodeOptions options() const {
        decode::DecodeOptions d;
        d.bos = c.tgt_vocab.bos(), d.eos = c.tgt_vocab.eos();
        return d;
    }
};

bool has_repeated_ngram(const std::vector<int64_t>& t, size_t n) {
    std::set<std::vector<int64_t>> seen;
    for (size_t i = 0; i + n <= t.size(); ++i)
        if (!seen.insert(std::vector<int64_t>(t.begin() + std::ptrdiff_t(i), t.begin() + std::ptrdiff_t(i + n))).second)
            return true;
    return false;
}

TEST(DecodeOptions, NBestScoresEqualTeacherForcedLogProbs) {
    Fixture f(5);
    auto d = f.options();
    d.beam_size = 4, d.num_hypotheses = 4, d.max_len = 8, d.length_penalty = 0.6;
    d.min_len = 2, d.no_repeat_ngram_size = 2;
    d.prefix = {4};  // a word id of the tiny target vocabulary
    const auto hyps = decode::generate(*f.m, f.src, f.vl, d);
    ASSERT_EQ(int64_t(hyps.size()), f.c.arrays.n);
    for (int64_t i = 0; i < f.c.arrays.n; ++i) {
        ASSERT_EQ(hyps[size_t(i)].size(), 4u) << "source " << i;
        for (size_t k = 0; k < 4; ++k) {
            const auto& h = hyps[size_t(i)][k];
            if (k > 0) {
                EXPECT_GE(hyps[size_t(i)][k - 1].score, h.score);
            }
            const int64_t n = int64_t(h.tokens.size()) + (h.finished ? 1 : 0);
            EXPECT_NEAR(h.score, h.log_prob / std::pow((5.0 + double(n)) / 6.0, 0.6), 1e-9);
            const Tensor s1 = f.src.slice(0, i, i + 1), v1 = f.vl.slice(0, i, i + 1);
            EXPECT_NEAR(h.log_prob, sequence_log_prob(*f.m, s1, v1, d.bos, d.eos, h.tokens, h.finished), kLogProbTol)
                << "source " << i << " hyp " << k;
            ASSERT_FALSE(h.tokens.empty());
            EXPECT_EQ(h.tokens[0], 4) << "the forced prefix";
            if (h.finished) {
                EXPECT_GE(h.tokens.size(), 2u) << "min_len";
            }
            EXPECT_FALSE(has_repeated_ngram(h.tokens, 2)) << "no_repeat_ngram_size 2";
        }
    }
}

// Rows of one batch that finish at different steps, with the rules path (logits per row) on.
TEST(DecodeOptions, BatchedEqualsAloneWithRulesAndEarlyEnds) {
    Fixture f(2, 30);
    auto d = f.options();
    d.beam_size = 3, d.num_hypotheses = 3, d.max_len = 10, d.no_repeat_ngram_size = 3;
    const auto batched = decode::generate(*f.m, f.src, f.vl, d);
    std::set<size_t> lengths;
    for (int64_t i = 0; i < f.c.arrays.n; ++i) {
        const auto alone = decode::generate(*f.m, f.src.slice(0, i, i + 1), f.vl.slice(0, i, i + 1), d);
        ASSERT_EQ(alone[0].size(), batched[size_t(i)].size()) << "source " << i;
        for (size_t k = 0; k < alone[0].size(); ++k) {
            EXPECT_EQ(alone[0][k].tokens, batched[size_t(i)][k].tokens) << "source " << i << " hyp " << k;
            EXPECT_NEAR(alone[0][k].log_prob, batched[size_t(i)][k].log_prob, 1e-4);
        }
        lengths.insert(batched[size_t(i)][0].tokens.size());
    }
    EXPECT_GE(lengths.size(), 2u) << "sources must finish at different steps for this test to bite";
}

TEST(DecodeOptions, MinLenAndNoRepeatChangeTheSearchAsDocumented) {
    Fixture f(7);  // untrained: most sources end at once with <eos>
    auto d = f.options();
    d.max_len = 12;
    bool any_short = false;
    for (const auto& h : decode::generate(*f.m, f.src, f.vl, d))
        any_short = any_short || (h[0].finished && h[0].tokens.size() < 6);
    ASSERT_TRUE(any_short) << "some output must be shorter than min_len for the test to bite";
    d.min_len = 6;
    const auto with_min = decode::generate(*f.m, f.src, f.vl, d);
    bool any_repeat = false;
    for (const auto& h : with_min) {
        if (h[0].finished) {
            EXPECT_GE(h[0].tokens.size(), 6u);
        }
        any_repeat = any_repeat || has_repeated_ngram(h[0].tokens, 1);
    }
    ASSERT_TRUE(any_repeat) << "some output must repeat a token for the no-repeat check to bite";
    d.no_repeat_ngram_size = 1;
    for (const auto& h : decode::generate(*f.m, f.src, f.vl, d)) {
        EXPECT_FALSE(has_repeated_ngram(h[0].tokens, 1));
        if (h[0].finished) {
            EXPECT_GE(h[0].tokens.size(), 6u);
        }
    }
}

// With a repetition penalty the ranking sums the penalised log-probabilities, while log_prob stays
// the model's own (teacher-forced) sum.
TEST(DecodeOptions, RepetitionPenaltyChangesTheRankingNotTheLogProb) {
    Fixture f(7);
    auto d = f.options();
    d.max_len = 10, d.min_len = 6, d.beam_size = 2, d.num_hypotheses = 2;
    const auto plain = decode::generate(*f.m, f.src, f.vl, d);
    d.repetition_penalty = 3;
    const auto pen = decode::generate(*f.m, f.src, f.vl, d);
    bool differs = false, score_differs = false;
    for (int64_t i = 0; i < f.c.arrays.n; ++i) {
        differs = differs || pen[size_t(i)][0].tokens != plain[size_t(i)][0].tokens;
        for (const auto& h : pen[size_t(i)]) {
            const Tensor s1 = f.src.slice(0, i, i + 1), v1 = f.vl.slice(0, i, i + 1);
            EXPECT_NEAR(h.log_prob, sequence_log_prob(*f.m, s1, v1, d.bos, d.eos, h.tokens, h.finished), kLogProbTol);
            const int64_t n = int64_t(h.tokens.size()) + (h.finished ? 1 : 0);
            score_differs = score_differs ||
                            std::abs(h.score - h.log_prob / std::pow((5.0 + double(n)) / 6.0, 0.6)) > 1e-3;
        }
    }
    EXPECT_TRUE(differs) << "a penalty of 3 must change some output";
    EXPECT_TRUE(score_differs) << "the score must be the penalised sum's";
}

// The attention returned for each n-best hypothesis (beam 3, sources finishing apart) equals a
// teacher-forced pass over that hypothesis: the history followed the beam back-pointers.
TEST(DecodeOptions, BeamAttentionEqualsTeacherForcedAttention) {
    Fixture f(2, 30);
    auto d = f.options();
    d.beam_size = 3, d.num_hypotheses = 3, d.max_len = 10, d.return_attention = true;
    const auto hyps = decode::generate(*f.m, f.src, f.vl, d);
    f.m->keep_attention_weights(true);
    const int64_t Ts = f.src.size(1);
    int64_t rows_checked = 0;
    for (int64_t i = 0; i < f.c.arrays.n; ++i)
        for (const auto& h : hyps[size_t(i)]) {
            std::vector<int64_t> in = {d.bos};
            in.insert(in.end(), h.tokens.begin(), h.tokens.end());
            if (!h.finished) in.pop_back();
            const int64_t T = int64_t(in.size());
            ASSERT_EQ(int64_t(h.attention.size()), T);
            NoGradGuard ng;
            f.m->forward(f.src.slice(0, i, i + 1), f.vl.slice(0, i, i + 1), from_vector(in, {1, T}));
            const Tensor w = f.m->decoder->blks.back()->attention2->attention_weights().contiguous();  // (1, H, T, Tk)
            const int64_t H = w.size(1), Tk = w.size(3);
            const auto wv = w.to_vector<float>();
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < Ts; ++j) {
                    double mean = 0;
                    if (j < Tk)
                        for (int64_t hh = 0; hh < H; ++hh) mean += wv[size_t(((hh * T) + t) * Tk + j)] / double(H);
                    // f32 softmax weights from two evaluation orders (cached step vs full pass).
                    EXPECT_NEAR(h.attention[size_t(t)][size_t(j)], mean, 1e-5) << "source " << i << " t " << t;
                    ++rows_checked;
                }
        }
    f.m->keep_attention_weights(false);
    EXPECT_GT(rows_checked, 0);
}

TEST(DecodeOptions, CoveragePenaltyOnAHandMadeMatrix) {
    // Two output tokens over three source positions: coverage 1.0, 0.7, 0.
    const std::vector<std::vector<float>> a = {{0.5f, 0.5f, 0.f}, {0.5f, 0.2f, 0.f}};
    EXPECT_NEAR(decode::coverage_penalty(a, 2, 0.4), 0.4 * (std::log(1.0) + std::log(0.7)), 1e-7);
    EXPECT_EQ(decode::coverage_penalty(a, 3, 0.4), kNegInf);  // a position never attended to
    EXPECT_EQ(decode::coverage_penalty(a, 3, 0.0), 0.0);
    EXPECT_EQ(decode::coverage_penalty({}, 0, 1.0), 0.0);
}

// score = log P / lp(n) + β·Σ log min(coverage, 1) from the returned attention, the n-best sorted
// by it, and where β changes a source's best translation the new one covers the source better.
// An untrained model and max_len 4 (outputs shorter than the sources' attention mass needs):
// there the penalty is nonzero and changes 2 of 8 best translations at β = 1 (seen while writing
// this test: 0 of 8 at max_len 10, where every source position reaches coverage 1).
TEST(DecodeOptions, CoveragePenaltyEntersTheScoreAndTheRanking) {
    Fixture f(2);
    auto d = f.options();
    d.beam_size = 4, d.num_hypotheses = 4, d.max_len = 4, d.return_attention = true;
    const auto plain = decode::generate(*f.m, f.src, f.vl, d);
    constexpr double beta = 1.0;
    d.coverage_penalty = beta;
    const auto cov = decode::generate(*f.m, f.src, f.vl, d);
    const auto vls = f.vl.to_vector<int64_t>();
    int64_t changed = 0;
    for (int64_t i = 0; i < f.c.arrays.n; ++i) {
        ASSERT_FALSE(cov[size_t(i)].empty());
        const int64_t len = vls[size_t(i)];
        for (size_t r = 0; r < cov[size_t(i)].size(); ++r) {
            const auto& h = cov[size_t(i)][r];
            const int64_t n = int64_t(h.tokens.size()) + (h.finished ? 1 : 0);
            const double cp = decode::coverage_penalty(h.attention, len, beta);
            EXPECT_LE(cp, 0.0);
            EXPECT_NEAR(h.score, h.log_prob / std::pow((5.0 + double(n)) / 6.0, 0.6) + cp, 1e-9)
                << "source " << i << " hypothesis " << r;
            if (r > 0) {
                EXPECT_GE(cov[size_t(i)][r - 1].score, h.score);
            }
        }
        const auto& best = cov[size_t(i)][0];
        const auto& was  = plain[size_t(i)][0];
        if (best.tokens == was.tokens) continue;
        ++changed;
        EXPECT_GT(decode::coverage_penalty(best.attention, len, beta), decode::coverage_penalty(was.attention, len, beta))
            << "source " << i << ": the penalty chose a translation that covers the source less";
    }
    EXPECT_GT(changed, 0) << "beta = 1 must change some source's best translation";
    d.coverage_penalty = -1;
    EXPECT_THROW(decode::generate(*f.m, f.src, f.vl, d), Error);
}

TEST(DecodeOptions, AlignmentPairsOnAHandMadeMatrix) {
    // 3 target tokens over 4 source positions (3 words + <eos>): token 2 looks at <eos>, dropped.
    const std::vector<std::vector<float>> a = {{0.1f, 0.7f, 0.1f, 0.1f}, {0.6f, 0.2f, 0.1f, 0.1f},
                                               {0.1f, 0.1f, 0.1f, 0.7f}};
    EXPECT_EQ(decode::alignment_pairs(a, 3), "1-0 0-1");
    EXPECT_EQ(decode::alignment_pairs(a, 4), "1-0 0-1 3-2");
    EXPECT_EQ(decode::alignment_pairs({}, 3), "");
}

TEST(DecodeOptions, ProcessRowRulesOnAHandMadeRow) {
    // V = 6, eos = 1, logits l.
    const std::vector<float> l = {0.f, 1.f, 2.f, -1.f, 0.5f, 3.f};
    decode::DecodeOptions d;
    d.bos = 0, d.eos = 1;
    std::vector<double> out;
    auto lse = [](std::vector<double> x) {
        double mx = -1e300, s = 0;
        for (double v : x) mx = std::max(mx, v);
        for (double v : x) s += std::exp(v - mx);
        return mx + std::log(s);
    };
    // No rule: log_softmax.
    decode::process_row(l.data(), 6, {}, d, {}, out);
    const double z = lse({0, 1, 2, -1, 0.5, 3});
    for (int v = 0; v < 6; ++v) EXPECT_NEAR(out[size_t(v)], double(l[size_t(v)]) - z, 1e-12);
    // Repetition penalty 2 on history {2, 3, 2}: 2 -> 2/2 = 1 (positive: divided), 3 -> -1*2 = -2
    // (negative: multiplied), once each.
    d.repetition_penalty = 2;
    decode::process_row(l.data(), 6, {2, 3, 2}, d, {}, out);
    const double z2 = lse({0, 1, 1, -2, 0.5, 3});
    EXPECT_NEAR(out[2], 1 - z2, 1e-12);
    EXPECT_NEAR(out[3], -2 - z2, 1e-12);
    EXPECT_NEAR(out[5], 3 - z2, 1e-12);
    d.repetition_penalty = 1;
    // min_len 3: <eos> masked at history length 2, allowed at 3.
    d.min_len = 3;
    decode::process_row(l.data(), 6, {2, 3}, d, {}, out);
    EXPECT_EQ(out[1], kNegInf);
    decode::process_row(l.data(), 6, {2, 3, 4}, d, {}, out);
    EXPECT_NEAR(out[1], 1 - z, 1e-12);
    d.min_len = 0;
    // no_repeat_ngram_size 2, history 5 2 4 5: the bigram (5, 2) exists, so 2 is masked after 5.
    d.no_repeat_ngram_size = 2;
    decode::process_row(l.data(), 6, {5, 2, 4, 5}, d, {}, out);
    EXPECT_EQ(out[2], kNegInf);
    for (int v : {0, 1, 3, 4, 5}) EXPECT_NEAR(out[size_t(v)], double(l[size_t(v)]) - z, 1e-12) << v;
    d.no_repeat_ngram_size = 0;
    // prefix {4, 3}: at step 1 only id 3 remains, with its model log-probability.
    d.prefix = {4, 3};
    decode::process_row(l.data(), 6, {4}, d, {}, out);
    for (int v = 0; v < 6; ++v)
        if (v != 3) {
            EXPECT_EQ(out[size_t(v)], kNegInf);
        }
    EXPECT_NEAR(out[3], -1 - z, 1e-12);
    decode::process_row(l.data(), 6, {4, 3}, d, {}, out);  // past the prefix: free
    EXPECT_NEAR(out[5], 3 - z, 1e-12);
    // A prefix that repeats a token under no_repeat_ngram_size 1 is still forced, with its
    // log-probability (was -inf: the whole row -inf, so no hypothesis at all).
    d.prefix = {4, 4, 3};
    d.no_repeat_ngram_size = 1;
    decode::process_row(l.data(), 6, {4}, d, {}, out);
    EXPECT_NEAR(out[4], 0.5 - z, 1e-12);
    for (int v : {0, 1, 2, 3, 5}) EXPECT_EQ(out[size_t(v)], kNegInf) << v;
    decode::process_row(l.data(), 6, {4, 4, 3}, d, {}, out);  // after it the rule holds again
    EXPECT_EQ(out[4], kNegInf);
    EXPECT_EQ(out[3], kNegInf);
    EXPECT_NEAR(out[5], 3 - z, 1e-12);
}

TEST(DecodeOptions, RejectsBadOptionsNamingTheField) {
    decode::DecodeOptions d;
    d.bos = 0, d.eos = 1;
    auto msg = [&](const decode::DecodeOptions& o) {
        try {
            o.validate(10);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(msg(d), "");
    auto o = d;
    o.num_hypotheses = 2;
    EXPECT_NE(msg(o).find("num_hypotheses"), std::string::npos);
    o = d, o.repetition_penalty = 0;
    EXPECT_NE(msg(o).find("repetition_penalty"), std::string::npos);
    o = d, o.max_len = 5, o.min_len = 6;  // no output could end
    EXPECT_NE(msg(o).find("min_len must be in [0, max_len = 5], got 6"), std::string::npos);
    o.min_len = 5;
    EXPECT_EQ(msg(o), "");
    o = d, o.prefix = {1};
    EXPECT_NE(msg(o).find("prefix"), std::string::npos);
    o = d, o.sampling.enabled = true, o.sampling.top_p = 0;
    EXPECT_NE(msg(o).find("top_p"), std::string::npos);
    o = d, o.sampling.enabled = true, o.beam_size = 2;
    EXPECT_NE(msg(o).find("sampling"), std::string::npos);
    o = d, o.sampling.enabled = true, o.sampling.temperature = 0;
    EXPECT_NE(msg(o).find("temperature"), std::string::npos);
}

// ---- sampling -------------------------------------------------------------------------------

TEST(Sampling, DistributionOnAHandMadeRow) {
    const std::vector<double> lp = {std::log(0.5), std::log(0.2), std::log(0.3), kNegInf};
    decode::SamplingOptions s;
    auto p = decode::sampling_distribution(lp, s);
    EXPECT_NEAR(p[0], 0.5, 1e-12);
    EXPECT_NEAR(p[1], 0.2, 1e-12);
    EXPECT_NEAR(p[2], 0.3, 1e-12);
    EXPECT_EQ(p[3], 0.0);
    s.top_k = 2;  // {0, 2}, renormalised
    p = decode::sampling_distribution(lp, s);
    EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-12);
    EXPECT_EQ(p[1], 0.0);
    EXPECT_NEAR(p[2], 0.3 / 0.8, 1e-12);
    s.top_k = 0, s.top_p = 0.75;  // 0.5 < 0.75 <= 0.8: {0, 2}
    p = decode::sampling_distribution(lp, s);
    EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-12);
    EXPECT_EQ(p[1], 0.0);
    s.top_p = 0.5;  // the most probable alone reaches 0.5
    p = decode::sampling_distribution(lp, s);
    EXPECT_NEAR(p[0], 1.0, 1e-12);
    s.top_p = 1, s.temperature = 0.5;  // p ∝ q^2: 0.25, 0.04, 0.09
    p = decode::sampling_distribution(lp, s);
    EXPECT_NEAR(p[0], 0.25 / 0.38, 1e-12);
    EXPECT_NEAR(p[1], 0.04 / 0.38, 1e-12);
    EXPECT_THROW(decode::sampling_distribution({kNegInf, kNegInf}, s), Error);
}

/// The message of the qkv::Error that f throws ("" when none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Sampling, PublicHelpersRefuseWhatIsNotTheirInputNamingTheArgument) {
    // Called directly (not through DecodeOptions::validate): temperature 0 gave a NaN row and
    // sample_from then drew the last id.
    const std::vector<double> lp = {std::log(0.5), std::log(0.2), std::log(0.3)};
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    auto dist = [&](auto change, const std::vector<double>& row) {
        decode::SamplingOptions s;
        change(s);
        return error_of([&] { decode::sampling_distribution(row, s); });
    };
    const auto same = [](decode::SamplingOptions&) {};
    for (double t : {0.0, -1.0, nan, inf})
        EXPECT_NE(dist([t](decode::SamplingOptions& s) { s.temperature = t; }, lp)
                      .find("sampling_distribution: temperature must be a finite number > 0, got "),
                  std::string::npos) << t;
    EXPECT_EQ(dist([](decode::SamplingOptions& s) { s.top_k = -1; }, lp),
              "sampling_distribution: top_k must be >= 0 (0: all), got -1");
    for (double p : {0.0, 1.5, nan})
        EXPECT_NE(dist([p](decode::SamplingOptions& s) { s.top_p = p; }, lp).find("sampling_distribution: top_p must be in (0, 1]"),
                  std::string::npos) << p;
    EXPECT_EQ(dist(same, {}), "sampling_distribution: logp is empty (one log-probability per target id is needed)");
    EXPECT_EQ(dist(same, {0.0, nan}), "sampling_distribution: logp[1] is nan (log-probabilities are finite or -inf)");
    EXPECT_EQ(dist(same, {inf, 0.0}), "sampling_distribution: logp[0] is inf (log-probabilities are finite or -inf)");
    // What the options allow still works: a very low temperature is (nearly) the argmax.
    decode::SamplingOptions cold;
    cold.temperature = 1e-3;
    EXPECT_NEAR(decode::sampling_distribution(lp, cold)[0], 1.0, 1e-12);

    Generator g(7);
    auto draw = [&](const std::vector<double>& p) { return error_of([&] { decode::sample_from(p, g); }); };
    EXPECT_EQ(draw({}), "sample_from: p is empty (one probability per target id is needed)");
    EXPECT_EQ(draw({0.5, nan, 0.5}), "sample_from: p[1] is nan (probabilities are finite and >= 0)");
    EXPECT_EQ(draw({1.5, -0.5}), "sample_from: p[1] is -0.5 (probabilities are finite and >= 0)");
    EXPECT_EQ(draw({0.0, 0.0}), "sample_from: p sums to 0, not 1: not a probability distribution");
    EXPECT_EQ(draw({0.2, 0.2}), "sample_from: p sums to 0.4, not 1: not a probability distribution");
    EXPECT_EQ(draw({0.0, 1.0}), "");
    // A sum off by rounding only is a distribution.
    EXPECT_EQ(draw({0.1, 0.2, 0.7 - 1e-12}), "");
}

TEST(Sampling, DrawFrequenciesMatchTheDistribution) {
    const std::vector<double> p = {0.5, 0.0, 0.2, 0.3};
    Generator g(123);
    std::vector<int64_t> count(4, 0);
    const int64_t N = 20000;
    for (int64_t i = 0; i < N; ++i) ++count[size_t(decode::sample_from(p, g))];
    EXPECT_EQ(count[1], 0);
    // Binomial standard deviation sqrt(N p (1-p)) <= 71 at N = 20000; 5 sigma.
    for (size_t i : {0u, 2u, 3u}) EXPECT_NEAR(double(count[i]), double(N) * p[i], 5 * 71.0) << i;
}

TEST(Sampling, ANaNModelIsAnErrorNotACrash) {
    // sampling_distribution refuses a NaN row; the search calls it inside its parallel region,
    // which must carry the error out (a throw leaving an OpenMP region ends the program).
    Fixture f(11);
    for (auto& [name, p] : f.m->named_parameters())
        if (p.dtype() == DType::f32) p.data<float>()[0] = std::nanf("");
    auto d = f.options();
    d.max_len = 4, d.sampling.enabled = true;
    const std::string m = error_of([&] { decode::generate(*f.m, f.src, f.vl, d); });
    EXPECT_NE(m.find("sampling_distribution: logp["), std::string::npos) << m;
}

TEST(Sampling, SeededIsReproducibleAndIndependentOfBatchMates) {
    Fixture f(11);
    auto d = f.options();
    d.max_len = 8, d.sampling.enabled = true, d.sampling.seed = 42;
    const auto a = decode::generate(*f.m, f.src, f.vl, d);
    const auto b = decode::generate(*f.m, f.src, f.vl, d);
    std::set<std::vector<int64_t>> outs;
    for (int64_t i = 0; i < f.c.arrays.n; ++i) {
        EXPECT_EQ(a[size_t(i)][0].tokens, b[size_t(i)][0].tokens);
        const auto alone = decode::generate(*f.m, f.src.slice(0, i, i + 1), f.vl.slice(0, i, i + 1), d);
        EXPECT_EQ(alone[0][0].tokens, a[size_t(i)][0].tokens) << "source " << i;
        const Tensor s1 = f.src.slice(0, i, i + 1), v1 = f.vl.slice(0, i, i + 1);
        EXPECT_NEAR(a[size_t(i)][0].log_prob,
                    sequence_log_prob(*f.m, s1, v1, d.bos, d.eos, a[size_t(i)][0].tokens, a[size_t(i)][0].finished),
                    kLogProbTol);
    }
    // Another seed gives other draws somewhere (an untrained model's rows are near uniform).
    d.sampling.seed = 43;
    const auto c = decode::generate(*f.m, f.src, f.vl, d);
    bool differs = false;
    for (size_t i = 0; i < a.size(); ++i) differs = differs || c[i][0].tokens != a[i][0].tokens;
    EXPECT_TRUE(differs);
}

TEST(Sampling, TopKOneIsGreedy) {
    Fixture f(3);
    auto d = f.options();
    d.max_len = 10, d.sampling.enabled = true, d.sampling.top_k = 1, d.sampling.temperature = 1.7;
    decode::GreedyOptions g;
    g.bos = d.bos, g.eos = d.eos, g.max_len = 10;
    const auto greedy = decode::greedy_decode(*f.m, f.src, f.vl, g);
    const auto sampled = decode::generate(*f.m, f.src, f.vl, d);
    for (size_t i = 0; i < greedy.size(); ++i) EXPECT_EQ(sampled[i][0].tokens, greedy[i]) << i;
}

}  // namespace
}  // namespace qkv::test
