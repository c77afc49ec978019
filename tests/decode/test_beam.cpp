// Beam search: K = 1 is greedy; with a beam wide enough to keep every prefix it finds the exact
// best sequence (checked by enumeration); n-best lists are sorted; option checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/decode/beam_search.h"
#include "qkv/decode/greedy.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/trainer.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

/// log P(tokens, then <eos> if finished) under the model, by teacher forcing.
double sequence_log_prob(models::Transformer& m, const Tensor& src, const Tensor& vl, int64_t bos,
                         int64_t eos, const std::vector<int64_t>& toks, bool finished) {
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

TEST(BeamSearch, BeamOfOneIsGreedy) {
    const TinyCorpus c = tiny_corpus();
    for (uint64_t seed : {0, 1}) {
        manual_seed(seed);
        models::Transformer m(tiny_config(c));
        m.eval();
        const Tensor src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
        const Tensor vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
        decode::GreedyOptions g;
        g.bos = c.tgt_vocab.bos(), g.eos = c.tgt_vocab.eos(), g.max_len = 10;
        decode::BeamOptions b;
        b.beam_size = 1, b.bos = g.bos, b.eos = g.eos, b.max_len = 10;
        EXPECT_EQ(decode::beam_decode(m, src, vl, b), decode::greedy_decode(m, src, vl, g)) << seed;
        g.banned = b.banned = {c.tgt_vocab.unk()};
        EXPECT_EQ(decode::beam_decode(m, src, vl, b), decode::greedy_decode(m, src, vl, g)) << seed;
        g.banned.clear();
        b.banned.clear();
    }
}

TEST(BeamSearch, WideBeamFindsTheExactBestSequence) {
    // Tiny target vocabulary (5 tokens incl. <bos>/<eos>) and max_len 3: at most 4³ live prefixes,
    // so a beam of 64 never prunes and must return the best of all sequences (α = 0).
    manual_seed(3);
    models::TransformerConfig cfg;
    cfg.src_vocab_size = 6, cfg.tgt_vocab_size = 5;
    cfg.num_hiddens = 16, cfg.num_blks = 1, cfg.num_heads = 2, cfg.ffn_num_hiddens = 16, cfg.dropout = 0;
    models::Transformer m(cfg);
    m.eval();
    const int64_t bos = 0, eos = 1, L = 3;
    for (int64_t row = 0; row < 3; ++row) {
        const Tensor src = from_vector<int64_t>({2 + row, 3, 4, eos}, {1, 4});
        const Tensor vl = from_vector<int64_t>({4}, {1});
        // Enumerate: sequences of k < L non-<eos> tokens then <eos>, or L tokens without <eos>.
        double best = -1e300;
        std::vector<int64_t> best_seq;
        std::function<void(std::vector<int64_t>&)> rec = [&](std::vector<int64_t>& p) {
            const double fin = sequence_log_prob(m, src, vl, bos, eos, p, true);
            if (fin > best) best = fin, best_seq = p;
            if (int64_t(p.size()) + 1 == L) {  // the next token is the last one allowed
                for (int64_t v = 0; v < 5; ++v) {
                    if (v == eos) continue;
                    p.push_back(v);
                    const double cut = sequence_log_prob(m, src, vl, bos, eos, p, false);
                    if (cut > best) best = cut, best_seq = p;
                    p.pop_back();
                }
                return;
            }
            for (int64_t v = 0; v < 5; ++v) {
                if (v == eos) continue;
                p.push_back(v);
                rec(p);
                p.pop_back();
            }
        };
        std::vector<int64_t> p;
        rec(p);
        decode::BeamOptions b;
        b.beam_size = 64, b.bos = bos, b.eos = eos, b.max_len = L, b.length_penalty = 0;
        auto hyps = decode::beam_search(m, src, vl, b);
        ASSERT_EQ(hyps[0].size(), 1u);
        EXPECT_EQ(hyps[0][0].tokens, best_seq) << "row " << row;
        EXPECT_NEAR(hyps[0][0].log_prob, best, 1e-4) << "row " << row;
    }
}

TEST(BeamSearch, NBestIsSortedAndScoresAreConsistent) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(5);
    models::Transformer m(tiny_config(c));
    m.eval();
    const Tensor src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
    const Tensor vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
    decode::BeamOptions b;
    b.beam_size = 4, b.num_return = 4, b.bos = c.tgt_vocab.bos(), b.eos = c.tgt_vocab.eos();
    b.max_len = 6, b.length_penalty = 0.6;
    auto hyps = decode::beam_search(m, src, vl, b);
    ASSERT_EQ(int64_t(hyps.size()), c.arrays.n);
    for (int64_t i = 0; i < c.arrays.n; ++i) {
        ASSERT_FALSE(hyps[size_t(i)].empty());
        for (size_t k = 0; k < hyps[size_t(i)].size(); ++k) {
            const auto& h = hyps[size_t(i)][k];
            if (k > 0) {
                EXPECT_GE(hyps[size_t(i)][k - 1].score, h.score);
            }
            const int64_t n = int64_t(h.tokens.size()) + (h.finished ? 1 : 0);
            EXPECT_NEAR(h.score, h.log_prob / std::pow((5.0 + double(n)) / 6.0, 0.6), 1e-9);
            // log_prob is the model's probability of exactly these tokens.
            const Tensor s1 = src.slice(0, i, i + 1), v1 = vl.slice(0, i, i + 1);
            EXPECT_NEAR(h.log_prob, sequence_log_prob(m, s1, v1, b.bos, b.eos, h.tokens, h.finished), 1e-3);
        }
    }
}

// Sources that finish at different steps leave the decoder batch (with their cache rows) as
// they finish: the batched search must give each source exactly what it gets alone.
TEST(BeamSearch, BatchedEqualsOneSourceAtATimeWhenSourcesFinishApart) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(2);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 30, o.batch_size = 8, o.lr = 0.005;
    train::TrainRuntime rt;
    rt.progress = false, rt.log = nullptr;
    train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
    m.eval();
    const Tensor src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
    const Tensor vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
    decode::BeamOptions b;
    b.beam_size = 3, b.num_return = 3, b.bos = c.tgt_vocab.bos(), b.eos = c.tgt_vocab.eos();
    b.max_len = 10, b.length_penalty = 0.6;
    const auto batched = decode::beam_search(m, src, vl, b);
    ASSERT_EQ(int64_t(batched.size()), c.arrays.n);
    std::set<size_t> best_lengths;
    for (int64_t i = 0; i < c.arrays.n; ++i) {
        const auto alone = decode::beam_search(m, src.slice(0, i, i + 1), vl.slice(0, i, i + 1), b);
        ASSERT_EQ(alone[0].size(), batched[size_t(i)].size()) << "source " << i;
        for (size_t k = 0; k < alone[0].size(); ++k) {
            EXPECT_EQ(alone[0][k].tokens, batched[size_t(i)][k].tokens) << "source " << i << " hyp " << k;
            EXPECT_EQ(alone[0][k].finished, batched[size_t(i)][k].finished);
            EXPECT_NEAR(alone[0][k].log_prob, batched[size_t(i)][k].log_prob, 1e-4);
        }
        if (!batched[size_t(i)].empty()) best_lengths.insert(batched[size_t(i)][0].tokens.size());
    }
    // The trained model translates the pairs: outputs of 2 to 4 tokens, so sources do finish
    // at different steps and the batch really shrinks.
    EXPECT_GE(best_lengths.size(), 2u);
}

TEST(BeamSearch, RejectsBadOptions) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    const Tensor src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
    const Tensor vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
    decode::BeamOptions b;
    b.bos = c.tgt_vocab.bos(), b.eos = c.tgt_vocab.eos();
    b.beam_size = 0;
    EXPECT_THROW(decode::beam_search(m, src, vl, b), Error);
    b.beam_size = 2, b.num_return = 3;
    EXPECT_THROW(decode::beam_search(m, src, vl, b), Error);
    b.num_return = 1, b.eos = -1;
    EXPECT_THROW(decode::beam_search(m, src, vl, b), Error);
}

}  // namespace
}  // namespace qkv::test
