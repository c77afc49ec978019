// train::translate_nbest: token batching gives each sentence what it gets alone, in input order;
// n-best lists and a target prefix through the model folder's vocabularies.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "qkv/train/model_dir.h"
#include "qkv/train/trainer.h"
#include "tiny_corpus.h"

namespace qkv::test {
namespace {

train::ModelDir tiny_model_dir() {
    const TinyCorpus c = tiny_corpus();
    manual_seed(2);
    auto model = std::make_shared<models::Transformer>(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 30, o.batch_size = 8, o.lr = 0.005;
    train::TrainRuntime rt;
    rt.progress = false, rt.log = nullptr;
    train::Trainer(*model, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
    train::ModelDir m;
    m.config.data.num_steps = c.arrays.num_steps;
    m.config.model          = tiny_config(c);
    m.src_vocab = c.src_vocab, m.tgt_vocab = c.tgt_vocab;
    m.model = model;
    return m;
}

// Sources of 1 to 3 words, interleaved so that sorting by length really reorders them.
std::vector<std::vector<std::string>> mixed_sources() {
    const TinyCorpus c = tiny_corpus();
    std::vector<std::vector<std::string>> s;
    for (size_t i = 0; i < c.src.size(); ++i) s.push_back(c.src[(i * 3) % c.src.size()]);
    s.push_back({"i", "lost", "calm", "home", "."});  // the longest, in the middle of nowhere
    std::swap(s[1], s.back());
    return s;
}

TEST(TranslateOptions, TokenBatchingKeepsInputOrderAndEachSentencesOutput) {
    train::ModelDir m = tiny_model_dir();
    const auto src = mixed_sources();
    train::TranslateOptions alone;
    alone.max_len = 10, alone.batch_size = 1;
    std::vector<std::vector<std::string>> expect;
    for (const auto& s : src) expect.push_back(train::translate_tokens(m, {s}, alone)[0]);
    std::set<std::vector<std::string>> distinct(expect.begin(), expect.end());
    ASSERT_GE(distinct.size(), 4u) << "translations must differ for the order check to bite";
    for (int64_t tokens : {1, 6, 13, 1000}) {
        train::TranslateOptions t = alone;
        t.batch_tokens = true, t.batch_size = tokens;
        EXPECT_EQ(train::translate_tokens(m, src, t), expect) << "batch of " << tokens << " tokens";
        t.beam = 2;  // the search path too
        train::TranslateOptions a2 = alone;
        a2.beam = 2;
        std::vector<std::vector<std::string>> expect2;
        for (const auto& s : src) expect2.push_back(train::translate_tokens(m, {s}, a2)[0]);
        EXPECT_EQ(train::translate_tokens(m, src, t), expect2) << "beam 2, batch of " << tokens << " tokens";
    }
}

// on_translated (qkv translate's streaming): each row once, batch by batch in length order, with
// what translate_nbest returns for it; with a batch of 2 sentences the first call comes before the
// last batch is decoded (the longest sentence, moved to row 1, is reported last).
TEST(TranslateOptions, OnTranslatedReportsEachRowAsItsBatchFinishes) {
    train::ModelDir m = tiny_model_dir();
    const auto src = mixed_sources();
    for (int64_t beam : {1, 2}) {
        train::TranslateOptions t;
        t.max_len = 10, t.batch_size = 2, t.beam = beam;
        std::vector<int64_t> rows;
        std::vector<std::vector<std::string>> seen(src.size());
        t.on_translated = [&](int64_t row, const std::vector<train::Translation>& nb) {
            rows.push_back(row);
            ASSERT_FALSE(nb.empty());
            seen[size_t(row)] = nb.front().words;
        };
        const auto out = train::translate_nbest(m, src, t);
        ASSERT_EQ(rows.size(), src.size()) << "beam " << beam;
        EXPECT_EQ(std::set<int64_t>(rows.begin(), rows.end()).size(), src.size()) << "each row once";
        EXPECT_EQ(rows.back(), 1) << "the longest sentence (row 1) is in the last batch";
        EXPECT_NE(rows.front(), 1);
        for (size_t r = 0; r < src.size(); ++r) EXPECT_EQ(seen[r], out[r].front().words) << "row " << r;
    }
}

TEST(TranslateOptions, NBestAndPrefix) {
    train::ModelDir m = tiny_model_dir();
    const auto src = mixed_sources();
    train::TranslateOptions t;
    t.max_len = 10, t.beam = 3, t.num_hypotheses = 3;
    const auto nb = train::translate_nbest(m, src, t);
    ASSERT_EQ(nb.size(), src.size());
    const auto best = train::translate_tokens(m, src, t);
    for (size_t i = 0; i < nb.size(); ++i) {
        ASSERT_EQ(nb[i].size(), 3u);
        EXPECT_EQ(nb[i][0].words, best[i]);
        EXPECT_GE(nb[i][0].score, nb[i][1].score);
        EXPECT_GE(nb[i][1].score, nb[i][2].score);
        EXPECT_LT(nb[i][0].log_prob, 0.0);
    }
    t.num_hypotheses = 1;
    t.prefix = {"nous", "avons"};
    for (const auto& h : train::translate_tokens(m, src, t)) {
        ASSERT_GE(h.size(), 2u);
        EXPECT_EQ(h[0], "nous");
        EXPECT_EQ(h[1], "avons");
    }
    t.prefix = {"zzz"};
    try {
        train::translate_tokens(m, src, t);
        ADD_FAILURE() << "a prefix word outside the vocabulary must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'zzz'"), std::string::npos) << e.what();
    }
}

// A forced <unk> (the prefix) is replaced by the source word its cross-attention peaks on, which
// the alignment names; without the option it stays <unk>.
TEST(TranslateOptions, ReplaceUnknownsCopiesTheAlignedSourceWord) {
    train::ModelDir m = tiny_model_dir();
    const auto src = mixed_sources();
    train::TranslateOptions t;
    t.max_len = 10, t.attention = true, t.prefix = {"<unk>"};
    const auto kept = train::translate_nbest(m, src, t);
    t.replace_unknowns = true;
    const auto replaced = train::translate_nbest(m, src, t);
    int64_t n_replaced = 0;
    for (size_t s = 0; s < src.size(); ++s) {
        ASSERT_FALSE(kept[s][0].words.empty());
        EXPECT_EQ(kept[s][0].words[0], "<unk>");
        const std::string& al = replaced[s][0].alignment;
        // the pair of target token 0: "i-0"
        const auto pos = al.find("-0");
        if (pos == std::string::npos || (pos + 2 < al.size() && al[pos + 2] != ' ')) {
            EXPECT_EQ(replaced[s][0].words[0], "<unk>") << "no source word aligned: kept";
            continue;
        }
        const size_t start = al.rfind(' ', pos) == std::string::npos ? 0 : al.rfind(' ', pos) + 1;
        const size_t i = std::stoul(al.substr(start, pos - start));
        ASSERT_LT(i, src[s].size());
        EXPECT_EQ(replaced[s][0].words[0], src[s][i]) << "source " << s << " alignment " << al;
        ++n_replaced;
    }
    EXPECT_GT(n_replaced, 0) << "some <unk> must be aligned to a source word for the test to bite";
}

}  // namespace
}  // namespace qkv::test
