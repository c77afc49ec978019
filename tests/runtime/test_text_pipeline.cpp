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
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/run_config.h"
#include "qkv/runtime/text.h"
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
    dc.concat_fraction = 0;  // ConcatenatedPairs turns it on
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
    if (!long_held_out) {
        EXPECT_NE(r.dropped_text(0, 0, 0, dc.num_steps).find("1 train pair over the length cap of 40 pieces"),
                  std::string::npos)
            << r.dropped_text(0, 0, 0, dc.num_steps);
    }
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

TEST(TextPipeline, ConcatenatedPairs) {
    test::TempDir dir;
    DataConfig dc = text_config(write_corpus(dir));
    const TranslationData plain = load_translation_data(dc);
    dc.concat_fraction = 0.5;
    const TranslationData d = load_translation_data(dc, plain.subwords);
    const int64_t originals = plain.train.n, want = (originals + 1) / 2;
    const int64_t added = d.record.concatenated;
    // 2-8 pairs of ~6 pieces do not always fit 40: some tries are rejected, most fit in 4 x want
    EXPECT_GE(added, want / 2);
    EXPECT_LE(added, want);
    EXPECT_EQ(d.train.n, originals + added);
    EXPECT_EQ(d.record.train, d.train.n);
    ASSERT_EQ(d.train_src_text.size(), size_t(d.train.n));
    ASSERT_EQ(d.train_tgt_text.size(), size_t(d.train.n));
    // the originals first, as before; the held-out sets are untouched
    for (int64_t i = 0; i < originals; ++i) ASSERT_EQ(d.train_src_text[size_t(i)], plain.train_src_text[size_t(i)]);
    EXPECT_EQ(d.test_src_text, plain.test_src_text);
    EXPECT_EQ(d.valid.label, plain.valid.label);
    // each added pair is 2-8 train pairs, the sources and the targets joined by a space in the
    // same order, within the cap; its arrays hold its pieces
    std::set<std::pair<std::string, std::string>> pairs;
    for (int64_t i = 0; i < originals; ++i)
        pairs.insert({plain.train_src_text[size_t(i)], plain.train_tgt_text[size_t(i)]});
    int64_t longest = 0;
    for (int64_t i = originals; i < d.train.n; ++i) {
        const data::SentenceSplit s = data::split_sentences(d.train_src_text[size_t(i)]);
        const data::SentenceSplit t = data::split_sentences(d.train_tgt_text[size_t(i)]);
        ASSERT_GE(s.sentences.size(), 2u) << d.train_src_text[size_t(i)];
        ASSERT_LE(s.sentences.size(), 8u) << d.train_src_text[size_t(i)];
        ASSERT_EQ(s.sentences.size(), t.sentences.size()) << d.train_tgt_text[size_t(i)];
        for (size_t k = 0; k < s.sentences.size(); ++k) {
            EXPECT_EQ(s.sentences[k].space_after, k + 1 < s.sentences.size() ? " " : "");
            EXPECT_EQ(pairs.count({s.sentences[k].text, t.sentences[k].text}), 1u)
                << s.sentences[k].text << " / " << t.sentences[k].text;
        }
        EXPECT_LT(d.train.src_valid_len[size_t(i)], dc.num_steps + 1);
        EXPECT_LE(d.train.tgt_valid_len[size_t(i)], dc.num_steps);
        longest = std::max(longest, d.train.tgt_valid_len[size_t(i)]);
        std::vector<std::string> label;
        for (int64_t j = 0; j + 1 < d.train.tgt_valid_len[size_t(i)]; ++j)
            label.push_back(d.tgt_vocab.idx_to_token(d.train.label[size_t(i * d.train.num_steps + j)]));
        EXPECT_EQ(d.subwords.tgt->decode_text(label), d.train_tgt_text[size_t(i)]);
    }
    // longer than any original pair of this corpus (the one long pair is over the cap)
    int64_t longest_original = 0;
    for (int64_t i = 0; i < originals; ++i) longest_original = std::max(longest_original, plain.train.tgt_valid_len[size_t(i)]);
    EXPECT_GT(longest, longest_original);
    // seeded: the same again
    EXPECT_EQ(load_translation_data(dc, plain.subwords).train.label, d.train.label);
    // recorded in config.json; out of range refused
    RunConfig c = preset_config("real");
    c.data = dc;
    c.data.applied = d.record;
    c.model.src_vocab_size = c.model.tgt_vocab_size = d.src_vocab.size();
    const RunConfig back = run_config_from_json(to_json(c));
    EXPECT_EQ(back.data.concat_fraction, 0.5);
    EXPECT_EQ(back.data.applied.concatenated, added);
    EXPECT_NE(d.summary.find(std::to_string(added) + " concatenated train pairs"), std::string::npos) << d.summary;
    dc.concat_fraction = 1.5;
    EXPECT_THROW(load_translation_data(dc, plain.subwords), Error);
    c.data.concat_fraction = -0.1;
    EXPECT_THROW(run_config_from_json(to_json(c)), Error);
}

/// The pieces of `text` as the model reads them.
int64_t pieces(const ModelDir& m, const std::string& text) {
    return int64_t(m.subwords.src->encode(data::raw_words(text)).size());
}

TEST(TextPipeline, SplitTextCutsOverLongSentencesBetweenWords) {
    test::TempDir dir;
    const DataConfig dc = text_config(write_corpus(dir));
    const TranslationData d = load_translation_data(dc);
    ModelDir m;
    m.config = preset_config("real");
    m.config.data = dc;
    m.config.data.num_steps = 12;  // parts of at most 11 pieces
    m.subwords = d.subwords;
    m.src_vocab = d.src_vocab, m.tgt_vocab = d.tgt_vocab;
    const std::string clauses = "Tom has 1 apples, Mary has 2 books, John has 3 apples, Alice has 4 books, Tom has 5 apples.";
    ASSERT_GT(pieces(m, clauses), 22);  // at least three parts
    const std::string text = "  Go. " + clauses + "\nMary has 7 books.  ";
    const data::SentenceSplit s = split_text(m, text);
    std::vector<std::string> parts;
    for (const auto& x : s.sentences) parts.push_back(x.text);
    // the layout is the text again, and no part is over the limit
    EXPECT_EQ(data::join_sentences(s, parts), text);
    ASSERT_GE(parts.size(), 5u);
    EXPECT_EQ(parts.front(), "Go.");
    EXPECT_EQ(parts.back(), "Mary has 7 books.");
    const int64_t expect_parts = (pieces(m, clauses) + 10) / 11;
    EXPECT_EQ(int64_t(parts.size()), 2 + expect_parts);
    for (size_t i = 1; i + 1 < parts.size(); ++i) {
        EXPECT_LE(pieces(m, parts[i]), 11) << parts[i];
        // cut after a clause: every part of the long sentence but its last ends with a comma
        if (i + 2 < parts.size()) {
            EXPECT_EQ(parts[i].back(), ',') << parts[i];
        }
    }
    // a sentence within the limit and a text of short sentences are as split_sentences cuts them
    const std::string shorter = "Tom has 1 apples. Mary has 2 books.";
    EXPECT_EQ(split_text(m, shorter).sentences.size(), data::split_sentences(shorter).sentences.size());
    // without a clause near the middle: cut between words, each part within the limit
    const std::string plain = "Tom Mary John Alice Tom Mary John Alice Tom Mary John Alice Tom Mary John Alice";
    const data::SentenceSplit p = split_text(m, plain);
    ASSERT_GE(p.sentences.size(), 2u);
    std::vector<std::string> pp;
    for (const auto& x : p.sentences) {
        pp.push_back(x.text);
        EXPECT_LE(pieces(m, x.text), 11) << x.text;
    }
    EXPECT_EQ(data::join_sentences(p, pp), plain);
    // one word over the limit stays whole (source_units reads its first pieces)
    const std::string word(200, 'x');
    EXPECT_EQ(split_text(m, word).sentences.size(), 1u);
    // a word model's sentences are never cut
    m.config.data.pipeline = DataPipeline::anchor;
    EXPECT_EQ(split_text(m, clauses).sentences.size(), 1u);
}

}  // namespace
}  // namespace qkv::runtime

// The one wording of a translation cut at its length limit (qkv translate, qkv heatmap, Python's
// translate_batch): raise the setting, unless it is at its most or the source-tied limit cut it.
TEST(TextPipeline, LengthLimitNoteAdvisesOnlyWhatHelps) {
    using qkv::runtime::length_limit_note;
    EXPECT_EQ(length_limit_note("2 lines (3, 7)", "--max-len", 20, false),
              "2 lines (3, 7) reached the length limit of 20 tokens (--max-len) before the end of the sentence: the "
              "translation is cut there; raise --max-len");
    EXPECT_EQ(length_limit_note("the translation", "--max-len", 1, false),
              "the translation reached the length limit of 1 token (--max-len) before the end of the sentence: the "
              "translation is cut there; raise --max-len");
    EXPECT_EQ(length_limit_note("sentences[4]", "max_len", qkv::runtime::kMaxLenMost, false),
              "sentences[4] reached the length limit of 1000 tokens (max_len) before the end of the sentence: the "
              "translation is cut there; 1000 is the most max_len allows: the model does not end this sentence");
    const std::string tied = length_limit_note("1 line (2)", "--max-len", 96, true);
    EXPECT_NE(tied.find("twice the source's tokens + 10"), std::string::npos) << tied;
    EXPECT_NE(tied.find("--max-len does not raise this limit"), std::string::npos) << tied;
    EXPECT_EQ(tied.find("raise --max-len"), std::string::npos) << tied;
}
