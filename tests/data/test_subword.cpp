// SentencePiece subword models (data/subword.h): deterministic training, reserved ids, the
// word -> piece -> word round trip, unknown characters, save/load, and SentencePiece's refusals
// turned into qkv::Error.
#include <gtest/gtest.h>

#include <algorithm>

#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/data/subword.h"
#include "qkv/data/tokenizer.h"
#include "qkv/util/atomic_file.h"

namespace qkv::data {
namespace {

using Toks = std::vector<std::string>;

/// Sixteen D2L-tokenised sentences, English and French, as SentencePiece training lines.
std::vector<std::string> tiny_lines() {
    const char* raw[] = {"Go.", "Va !", "I lost.", "J'ai perdu.", "He's calm.", "Il est calme.", "I'm home.",
                         "Je suis chez moi.", "We won.", "Nous avons gagné.", "Run!", "Cours !",
                         "Hello!", "Bonjour !", "Thank you.", "Merci."};
    std::vector<std::string> lines;
    for (const char* r : raw) lines.push_back(preprocess_nmt(r));
    return lines;
}

SubwordOptions opts(SubwordKind k, int64_t v) {
    SubwordOptions o;
    o.kind = k;
    o.vocab_size = v;
    return o;
}

TEST(Subword, KindNames) {
    for (auto k : {SubwordKind::none, SubwordKind::bpe, SubwordKind::unigram})
        EXPECT_EQ(parse_subword_kind(subword_kind_name(k)), k);
    EXPECT_THROW(parse_subword_kind("wordpiece"), Error);
}

TEST(Subword, TrainingIsDeterministic) {
    const auto lines = tiny_lines();
    // (the unigram trainer allows at most 48 pieces on this text)
    for (auto k : {SubwordKind::bpe, SubwordKind::unigram}) {
        const SubwordModel a = SubwordModel::train(lines, opts(k, 45));
        const SubwordModel b = SubwordModel::train(lines, opts(k, 45));
        EXPECT_EQ(a.size(), 45) << subword_kind_name(k);
        EXPECT_EQ(a.vocab().tokens(), b.vocab().tokens()) << subword_kind_name(k);
        EXPECT_TRUE(a == b) << subword_kind_name(k) << ": the model bytes differ";
    }
    // BPE and unigram learn different piece sets from the same text
    EXPECT_NE(SubwordModel::train(lines, opts(SubwordKind::bpe, 45)).vocab().tokens(),
              SubwordModel::train(lines, opts(SubwordKind::unigram, 45)).vocab().tokens());
}

TEST(Subword, ReservedIdsMatchTheAnchorVocabularyOrder) {
    const Vocab v = SubwordModel::train(tiny_lines(), opts(SubwordKind::bpe, 50)).vocab();
    ASSERT_EQ(v.size(), 50);
    EXPECT_EQ(v.unk(), 0);
    EXPECT_EQ(v.pad(), 1);
    EXPECT_EQ(v.bos(), 2);
    EXPECT_EQ(v.eos(), 3);
}

TEST(Subword, EncodeDecodeRestoresTheWords) {
    const auto lines = tiny_lines();
    for (auto k : {SubwordKind::bpe, SubwordKind::unigram}) {
        const SubwordModel m = SubwordModel::train(lines, opts(k, 45));
        for (const auto& l : lines) {
            const Toks words = split_tokens(l);
            const Toks pieces = m.encode(words);
            EXPECT_FALSE(pieces.empty());
            EXPECT_EQ(m.decode(pieces), words) << subword_kind_name(k) << ": " << l;
            for (const auto& p : pieces) EXPECT_NE(m.vocab().token_to_idx(p), 0) << p;  // no <unk>
        }
        // a new sentence of seen characters, and the empty sentence
        const Toks fresh = {"je", "suis", "calme", "!"};
        EXPECT_EQ(m.decode(m.encode(fresh)), fresh) << subword_kind_name(k);
        EXPECT_TRUE(m.encode(Toks{}).empty());
        EXPECT_TRUE(m.decode(Toks{}).empty());
    }
    // frequent words become single pieces; a word-initial piece carries U+2581
    const SubwordModel m = SubwordModel::train(lines, opts(SubwordKind::bpe, 60));
    EXPECT_EQ(m.encode(Toks{"."}), (Toks{"\xE2\x96\x81."}));
}

TEST(Subword, UnseenCharactersBecomeUnk) {
    const SubwordModel m = SubwordModel::train(tiny_lines(), opts(SubwordKind::bpe, 60));
    const Toks pieces = m.encode(Toks{"go", "\xC3\xB8", "."});  // 'ø' never seen
    EXPECT_NE(std::find(pieces.begin(), pieces.end(), "<unk>"), pieces.end());
    const Toks words = m.decode(pieces);
    EXPECT_EQ(words.front(), "go");
    EXPECT_EQ(words.back(), ".");
    EXPECT_NE(std::find(words.begin(), words.end(), "<unk>"), words.end());
    // reserved pieces other than <unk> decode to nothing
    Toks framed = {"<bos>"};
    for (const auto& p : m.encode(Toks{"il", "est"})) framed.push_back(p);
    framed.push_back("<eos>");
    framed.push_back("<pad>");
    EXPECT_EQ(m.decode(framed), (Toks{"il", "est"}));
}

// Raw text (the real-text pipeline): cased sentences in, the same text out; a character never seen
// is spelled in byte pieces and decodes back to itself (no <unk>); nmt_nfkc applies (U+00A0 and
// runs of spaces become one space, "ﬁ" becomes "fi").
TEST(Subword, RawTextRoundTripsWithByteFallback) {
    const std::vector<std::string> raw = {"Go.", "Va !", "I lost.", "J'ai perdu.", "He's calm.", "Il est calme.",
                                          "I'm home.", "Je suis chez moi.", "We won.", "Nous avons gagné.",
                                          "Run!", "Cours !", "Hello!", "Bonjour !", "Thank you.", "Merci."};
    SubwordOptions o = opts(SubwordKind::bpe, 330);  // 4 reserved + 256 bytes + characters + merges
    o.raw_text = true;
    const SubwordModel m = SubwordModel::train(raw, o);
    EXPECT_TRUE(m.vocab().contains("<0xC3>"));  // byte pieces exist
    for (const std::string& s : {std::string("J'ai perdu."), std::string("Il est très calme !"),
                                 std::string("Øre 🍎 ✓ Ωmega.")}) {
        const Toks pieces = m.encode_text(s);
        EXPECT_EQ(std::find(pieces.begin(), pieces.end(), "<unk>"), pieces.end()) << s;
        EXPECT_EQ(m.decode_text(pieces), s);
    }
    EXPECT_EQ(m.decode_text(m.encode_text("  Il\u00a0est   \xef\xac\x81ni. ")), "Il est fini.");
    // the word interface on raw words: the same pieces as the text
    EXPECT_EQ(m.encode(Toks{"J'ai", "perdu."}), m.encode_text("J'ai perdu."));
    // D2L-token models keep identity normalization and no byte pieces
    const SubwordModel d2l = SubwordModel::train(tiny_lines(), opts(SubwordKind::bpe, 60));
    EXPECT_FALSE(d2l.vocab().contains("<0x41>"));
}

TEST(Subword, APrefixOfWordsEncodesToAPrefixOfThePieces) {
    // train::source_units encodes only a long sentence's first words: that is exact because the
    // first k words give the first pieces of the whole sentence, at least one per word, also
    // around unseen characters (which become <unk>) and words split into several pieces.
    const Toks words = {"je", "suis", "\xC3\xB8", "calme", "goûter", "\xC3\xB8\xC3\xB8", "ø!", "va", "!",
                        "thank", "youyou", "merci", ".", "h", "\xC3\xB8x\xC3\xB8"};
    for (auto k : {SubwordKind::bpe, SubwordKind::unigram}) {
        const SubwordModel m = SubwordModel::train(tiny_lines(), opts(k, 45));
        const Toks all = m.encode(words);
        for (size_t n = 0; n <= words.size(); ++n) {
            const Toks head = m.encode(Toks(words.begin(), words.begin() + std::ptrdiff_t(n)));
            EXPECT_GE(head.size(), n) << subword_kind_name(k);
            ASSERT_LE(head.size(), all.size()) << subword_kind_name(k);
            EXPECT_TRUE(std::equal(head.begin(), head.end(), all.begin())) << subword_kind_name(k) << ", " << n;
        }
    }
}

TEST(Subword, SaveLoadRoundTrip) {
    test::TempDir dir;
    const SubwordModel m = SubwordModel::train(tiny_lines(), opts(SubwordKind::unigram, 40));
    m.save(dir / "spm.model");
    const SubwordModel l = SubwordModel::load(dir / "spm.model");
    EXPECT_TRUE(l == m);
    EXPECT_EQ(l.vocab(), m.vocab());
    const Toks w = {"il", "est", "chez", "moi", "."};
    EXPECT_EQ(l.encode(w), m.encode(w));
    EXPECT_THROW(SubwordModel::load(dir / "missing.model"), Error);
    util::write_file_atomic(dir / "bad.model", std::string_view("not a sentencepiece model"));
    EXPECT_THROW(SubwordModel::load(dir / "bad.model"), Error);
}

TEST(Subword, EveryTruncationIsRefused) {
    // A file cut between two protobuf fields parses (with fewer pieces); from_bytes must refuse
    // every proper prefix, and load() call them "corrupt or truncated", naming the file.
    const std::string bytes = SubwordModel::train(tiny_lines(), opts(SubwordKind::bpe, 45)).bytes();
    ASSERT_GT(bytes.size(), 100u);
    for (size_t n = 0; n < bytes.size(); ++n)
        EXPECT_THROW(SubwordModel::from_bytes(bytes.substr(0, n)), Error) << "a prefix of " << n << " bytes accepted";
    test::TempDir dir;
    const std::string path = dir / "spm.model";
    int sentencepiece_said = 0, cut_between_fields = 0;
    for (size_t n = 0; n < bytes.size(); n += 7) {
        util::write_file_atomic(path, std::string_view(bytes).substr(0, n));
        try {
            SubwordModel::load(path);
            ADD_FAILURE() << n << " bytes loaded";
        } catch (const Error& e) {
            const std::string w = e.what();
            EXPECT_EQ(w.rfind(path + " is corrupt or truncated (", 0), 0u) << n << " bytes: " << w;
            sentencepiece_said += w.find("(SentencePiece: ") != std::string::npos;
            cut_between_fields += w.find("(the file ends after ") != std::string::npos;
        }
    }
    EXPECT_GT(sentencepiece_said, 0);  // both kinds of damage were met
    EXPECT_GT(cut_between_fields, 0);
    util::write_file_atomic(path, std::string_view(bytes));
    EXPECT_EQ(SubwordModel::load(path).bytes(), bytes);
}

TEST(Subword, RefusalsAreErrors) {
    const auto lines = tiny_lines();
    // fewer pieces than characters + reserved tokens
    try {
        SubwordModel::train(lines, opts(SubwordKind::bpe, 10));
        FAIL() << "vocab_size 10 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("vocab_size 10"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("smaller than required_chars"), std::string::npos) << e.what();
    }
    // more pieces than the text allows
    try {
        SubwordModel::train(lines, opts(SubwordKind::bpe, 5000));
        FAIL() << "vocab_size 5000 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("too high"), std::string::npos) << e.what();
    }
    EXPECT_THROW(SubwordModel::train(lines, opts(SubwordKind::none, 60)), Error);
    EXPECT_THROW(SubwordModel::train(lines, opts(SubwordKind::bpe, 4)), Error);
    EXPECT_THROW(SubwordModel::train({}, opts(SubwordKind::bpe, 60)), Error);
    EXPECT_THROW(SubwordModel::from_bytes("not a model"), Error);
}

// Found by tests/fuzz/fuzz_subword: a model with an empty piece made SentencePiece's trie builder
// (Darts) throw through a function that cannot pass exceptions on: std::terminate, not an error.
TEST(Subword, EmptyOrNulPiecesAreRefusedNotFatal) {
    auto what = [](const std::string& bytes) -> std::string {
        try {
            SubwordModel::from_bytes(bytes);
        } catch (const Error& e) {
            return e.what();
        }
        return "(accepted)";
    };
    // The fuzzer's input, as it found it: its second piece starts with a NUL byte, which Darts
    // reads as an empty key.
    const unsigned char found[] = {
        0x0a, 0x0e, 0x0a, 0x05, 0x3c, 0x75, 0x8e, 0x6b, 0x3e, 0x15, 0x00, 0x00, 0x00, 0x00, 0x18, 0x02, 0x0a, 0x0e,
        0x0a, 0x08, 0x00, 0x18, 0x02, 0x0a, 0x0e, 0x0a, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08,
        0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0xfa, 0xff, 0xff, 0xff, 0x08, 0x08, 0x08, 0x08,
        0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08,
        0x08, 0x08, 0x08, 0x08};
    const std::string e = what(std::string(reinterpret_cast<const char*>(found), sizeof found));
    EXPECT_NE(e.find("not a (complete) SentencePiece model (piece 1 contains a NUL byte)"), std::string::npos) << e;
    // A whole trained model with an empty piece or a NUL byte in a piece added at its end.
    const std::string good = SubwordModel::train(tiny_lines(), opts(SubwordKind::bpe, 40)).bytes();
    EXPECT_NE(what(good + std::string("\x0a\x02\x0a\x00", 4)).find("is empty"), std::string::npos);
    EXPECT_NE(what(good + std::string("\x0a\x05\x0a\x03" "a\0b", 7)).find("contains a NUL byte"), std::string::npos);
    EXPECT_EQ(what(good), "(accepted)");
}

// Found by tests/fuzz/fuzz_subword's 10-minute run: a field of wire type 6 (an unknown field that
// protobuf skips but the piece scanner could not walk) hid an empty piece behind it, and Darts'
// "zero-length key" ended the process again. Wire types SentencePiece never writes are refused.
TEST(Subword, UnwalkableFieldsAreRefusedNotFatal) {
    const unsigned char found[] = {
        0x0a, 0x0e, 0x0a, 0x05, 0x3c, 0x75, 0x6e, 0x6b, 0x3e, 0x15, 0x00, 0x00, 0x00, 0x00, 0x18, 0x02, 0x0a, 0x0e,
        0x0a, 0x05, 0x3c, 0x70, 0x61, 0x64, 0x3e, 0x15, 0x00, 0x00, 0x00, 0x00, 0x18, 0x03, 0x15, 0x00, 0x00, 0x00,
        0x00, 0x18, 0x03, 0x0a, 0x0b, 0x0a, 0x04, 0xe2, 0x96, 0x81, 0x21, 0x15, 0x00, 0x00, 0x00, 0x80, 0x0a, 0x0b,
        0x0a, 0x04, 0xe2, 0x96, 0x81, 0x2e, 0x15, 0x00, 0x00, 0x80, 0xbf, 0x0a, 0x09, 0x0a, 0x02, 0x65, 0x7a, 0x15,
        0x00, 0x00, 0x00, 0x73, 0x15, 0x00, 0x00, 0x34, 0x00, 0x73, 0x15, 0x00, 0x00, 0xcb, 0x30, 0xc1, 0x0a, 0x00,
        0x80, 0xc1, 0x0a, 0x08, 0x0a, 0x01, 0x3f, 0x58, 0x00, 0x80, 0x01, 0x3e, 0x1a, 0x0c, 0x0a, 0x08, 0x69, 0x64,
        0xc1, 0x0a, 0x0b, 0x0a, 0x04, 0xe2, 0x96, 0x81, 0x74, 0x15, 0x00, 0x00, 0x40, 0xc1, 0x0a, 0x0a, 0x0a, 0x03,
        0xe2, 0x96, 0x81, 0x15, 0x00, 0x00, 0x50, 0xc1, 0x0a, 0x08, 0x0a, 0x01, 0x00, 0x65, 0x10, 0x00, 0x15, 0x40,
        0x11, 0x00, 0xc0, 0x60, 0x00, 0x00, 0x54, 0xc2, 0x0a, 0x0a, 0x09, 0x0a, 0x02, 0xc3, 0xae, 0x15, 0x00, 0x00,
        0x5c, 0x3e, 0xfa, 0x02, 0x05, 0x3c, 0x65, 0x6f, 0x77, 0x3e, 0x82, 0x03, 0x05, 0x3c, 0x70, 0x61, 0x64, 0x3e,
        0x1a, 0x0c, 0x0a, 0x08, 0x6b, 0x64, 0x65, 0x6e, 0x74, 0x69, 0x74, 0x79, 0x12, 0x00};
    std::string e = "(accepted)";
    try {
        SubwordModel::from_bytes(std::string(reinterpret_cast<const char*>(found), sizeof found));
    } catch (const Error& err) {
        e = err.what();
    }
    EXPECT_NE(e.find("not a (complete) SentencePiece model"), std::string::npos) << e;
    EXPECT_NE(e.find("wire type"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv::data
