// The real-text data pipeline (runtime/translation_data.h DataPipeline::text, issue 45): raw cased
// sentences, a source-disjoint split (no held-out source in training, the other translations of a
// held-out source counted as unused), one SentencePiece model with byte fallback, train pairs over
// the length cap skipped and counted, references as the file has them; the record's counts add
// up and survive config.json; what the front ends read from such a model (words, book pairs).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/data/text.h"
#include "qkv/runtime/run_config.h"
#include "qkv/runtime/translation_data.h"

namespace qkv::runtime {
namespace {

/// 200 distinct cased sources, "Go." three times with three translations, one very long pair.
std::string write_corpus(const test::TempDir& dir) {
    const char* names[] = {"Tom", "Mary", "John", "Alice"};
    const char* objects[][2] = {{"apples", "pommes"}, {"books", "livres"}};
    std::ofstream f(dir / "corpus.tsv");
    for (int i = 1; i <= 50; ++i)
        for (int n = 0; n < 4; ++n)
            f << names[n] << " has " << i << " " << objects[(i + n) % 2][0] << ".\t" << names[n] << " a " << i << " "
              << objects[(i + n) % 2][1] << ".\n";
    f << "Go.\tVa !\nGo.\tBouge !\nGo.\tEn route !\n";
    std::string longer;
    for (int i = 0; i < 40; ++i) longer += "Tom has " + std::to_string(i) + " apples. ";
    f << longer << "\tTom a beaucoup de pommes.\n";
    return dir / "corpus.tsv";
}

DataConfig text_config(const std::string& path) {
    DataConfig dc = preset_config("real").data;
    dc.path = path;
    dc.subword_vocab_size = 400;
    dc.subword_vocab_soft = true;
    dc.num_steps = 40;
    return dc;
}

TEST(TextPipeline, SourceDisjointSplitRawReferencesAndCounts) {
    test::TempDir dir;
    const DataConfig dc = text_config(write_corpus(dir));
    ASSERT_EQ(dc.pipeline, DataPipeline::text);
    const TranslationData d = load_translation_data(dc);
    ASSERT_TRUE(d.subwords.active());
    EXPECT_EQ(d.subwords.src, d.subwords.tgt);  // the real preset shares one vocabulary
    EXPECT_TRUE(d.src_vocab.contains("<0xF0>"));  // byte fallback
    const DataRecord& r = d.record;
    EXPECT_EQ(r.pairs_read, 204);
    // the 40-sentence line is over 40 pieces: skipped from training (counted), kept if held out
    const auto held = [&](const std::vector<std::string>& v) {
        return std::any_of(v.begin(), v.end(), [](const std::string& s) { return s.size() > 300; });
    };
    const bool long_held_out = held(d.valid_src_text) || held(d.test_src_text);
    EXPECT_EQ(r.over_length_cap, long_held_out ? 0 : 1);
    EXPECT_FALSE(held(d.train_src_text));
    // 20 valid + 20 test sources (10 % of a small corpus); train + held out + unused = all
    EXPECT_EQ(d.valid.n, 20);
    EXPECT_EQ(d.test.n, 20);
    EXPECT_EQ(d.train.n + d.valid.n + d.test.n + r.held_out_duplicates + r.over_length_cap, 204);
    EXPECT_EQ(r.pairs_kept, d.train.n + d.valid.n + d.test.n);
    ASSERT_EQ(d.train_src_text.size(), size_t(d.train.n));
    ASSERT_EQ(d.valid_src_text.size(), size_t(d.valid.n));
    ASSERT_EQ(d.test_src_text.size(), size_t(d.test.n));
    // no held-out source occurs in training; references are the raw, cased text
    const std::set<std::string> train(d.train_src_text.begin(), d.train_src_text.end());
    for (const auto& s : d.test_src_text) EXPECT_EQ(train.count(s), 0u) << s;
    for (const auto& s : d.valid_src_text) EXPECT_EQ(train.count(s), 0u) << s;
    for (const auto& ref : d.test_ref_text) {
        EXPECT_TRUE(std::isupper(static_cast<unsigned char>(ref[0]))) << ref;
        EXPECT_EQ(ref.find("\xE2\x96\x81"), std::string::npos) << ref;
    }
    // the front ends' words of a test source are its normalized text split on spaces
    EXPECT_EQ(d.test_src[0], data::raw_words(d.test_src_text[0]));
    // the arrays hold the pieces of the raw text: decoding a train label gives the sentence back
    std::vector<std::string> label;
    for (int64_t j = 0; j + 1 < d.train.tgt_valid_len[0]; ++j)
        label.push_back(d.tgt_vocab.idx_to_token(d.train.label[size_t(j)]));
    EXPECT_EQ(d.subwords.tgt->decode_text(label), d.train_tgt_text[0]);
    // the same data and the given models give the same arrays
    const TranslationData again = load_translation_data(dc, d.subwords);
    EXPECT_EQ(again.train.label, d.train.label);
    EXPECT_EQ(again.test_src_text, d.test_src_text);
    // the record survives config.json
    RunConfig c = preset_config("real");
    c.data = dc;
    c.data.applied = r;
    c.model.src_vocab_size = c.model.tgt_vocab_size = d.src_vocab.size();
    const RunConfig back = run_config_from_json(to_json(c));
    EXPECT_EQ(back.data.pipeline, DataPipeline::text);
    EXPECT_EQ(back.data.applied.over_length_cap, r.over_length_cap);
    EXPECT_EQ(back.data.applied.held_out_duplicates, r.held_out_duplicates);
    EXPECT_EQ(back.train.batch_tokens, c.train.batch_tokens);
    if (!long_held_out)
        EXPECT_NE(r.dropped_text(0, 0, 0, dc.num_steps).find("1 train pair over the length cap of 40 pieces"),
                  std::string::npos)
            << r.dropped_text(0, 0, 0, dc.num_steps);
}

TEST(TextPipeline, RefusesWordsAndD2lTokenFilters) {
    test::TempDir dir;
    DataConfig dc = text_config(write_corpus(dir));
    dc.subword = data::SubwordKind::none;
    EXPECT_THROW(load_translation_data(dc), Error);
    dc = text_config(write_corpus(dir));
    dc.max_src_tokens = 5;
    try {
        load_translation_data(dc);
        FAIL() << "max_src_tokens accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--num-steps"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace qkv::runtime
