// Greedy decoding: the cached decoder gives the same tokens as full recomputation, on a trained
// and on a random model; outputs hold no <eos>; option checks.
#include <gtest/gtest.h>

#include <set>

#include "qkv/core/generator.h"
#include "qkv/decode/greedy.h"
#include "qkv/train/trainer.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

struct Fixture {
    TinyCorpus c = tiny_corpus();
    Tensor src, vl;
    decode::GreedyOptions opt;
    Fixture() {
        src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
        vl = from_vector(c.arrays.src_valid_len, {c.arrays.n});
        opt.bos = c.tgt_vocab.bos();
        opt.eos = c.tgt_vocab.eos();
        opt.max_len = 12;
    }
};

void train_briefly(models::Transformer& m, const TinyCorpus& c, int64_t epochs) {
    train::TrainOptions o;
    o.epochs = epochs;
    o.batch_size = 8;
    o.lr = 0.005;
    train::TrainRuntime rt;
    rt.progress = false;
    rt.log = nullptr;
    train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
}

TEST(Greedy, CacheEqualsRecomputationOnATrainedModel) {
    Fixture f;
    manual_seed(0);
    models::Transformer m(tiny_config(f.c));
    train_briefly(m, f.c, 40);  // partly trained: a mix of right and wrong tokens
    auto cached = decode::greedy_decode(m, f.src, f.vl, f.opt);
    f.opt.use_cache = false;
    auto full = decode::greedy_decode(m, f.src, f.vl, f.opt);
    EXPECT_EQ(cached, full);
    // The rows end at different steps, so the cached path dropped finished rows from its batch
    // (DecoderState::reorder) part-way: that compaction is covered by the equality above.
    std::set<size_t> lengths;
    for (auto& r : cached) lengths.insert(r.size());
    EXPECT_GE(lengths.size(), 2u);
}

TEST(Greedy, CacheEqualsRecomputationOnARandomModel) {
    // An untrained model often misses <eos>, so some rows run to max_len (past the cache's
    // initial capacity of 16 positions).
    Fixture f;
    size_t longest = 0;
    for (uint64_t seed : {1, 2, 3}) {
        manual_seed(seed);
        models::Transformer m(tiny_config(f.c, 0.1));
        m.eval();
        f.opt.max_len = 24;
        f.opt.use_cache = true;
        auto cached = decode::greedy_decode(m, f.src, f.vl, f.opt);
        f.opt.use_cache = false;
        auto full = decode::greedy_decode(m, f.src, f.vl, f.opt);
        EXPECT_EQ(cached, full) << "seed " << seed;
        for (auto& r : cached) longest = std::max(longest, r.size());
    }
    EXPECT_GT(longest, 16u);
}

TEST(Greedy, OutputsHoldNoEos) {
    Fixture f;
    manual_seed(0);
    models::Transformer m(tiny_config(f.c));
    train_briefly(m, f.c, 40);
    for (auto& row : decode::greedy_decode(m, f.src, f.vl, f.opt))
        for (int64_t t : row) EXPECT_NE(t, f.opt.eos);
}

TEST(Greedy, RespectsMaxLen) {
    Fixture f;
    manual_seed(2);
    models::Transformer m(tiny_config(f.c));
    m.eval();
    f.opt.max_len = 3;
    for (auto& row : decode::greedy_decode(m, f.src, f.vl, f.opt)) EXPECT_LE(row.size(), 3u);
}

TEST(Greedy, BannedIdsAreNeverEmittedAndOnlyThoseRowsChange) {
    Fixture f;
    manual_seed(0);
    models::Transformer m(tiny_config(f.c));
    train_briefly(m, f.c, 40);
    const auto plain = decode::greedy_decode(m, f.src, f.vl, f.opt);
    const int64_t ban = plain[1].at(0);  // a token the model does emit
    f.opt.banned = {ban};
    const auto out = decode::greedy_decode(m, f.src, f.vl, f.opt);
    for (size_t i = 0; i < out.size(); ++i) {
        bool had = false;
        for (int64_t t : plain[i]) had = had || t == ban;
        for (int64_t t : out[i]) EXPECT_NE(t, ban);
        if (!had) {
            EXPECT_EQ(out[i], plain[i]) << i;  // rows that never chose it are unchanged
        }
    }
    EXPECT_NE(out[1], plain[1]);
    f.opt.use_cache = false;
    EXPECT_EQ(decode::greedy_decode(m, f.src, f.vl, f.opt), out);
    f.opt.banned = {f.opt.eos};
    EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, f.opt), Error);
}

TEST(Greedy, RejectsBadOptions) {
    Fixture f;
    manual_seed(0);
    models::Transformer m(tiny_config(f.c));
    auto o = f.opt;
    o.bos = -1;
    EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, o), Error);
    o = f.opt;
    o.eos = f.c.tgt_vocab.size();
    EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, o), Error);
    o = f.opt;
    o.max_len = 0;
    EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, o), Error);
}

}  // namespace
}  // namespace qkv::test
