// D2L preprocessing/tokenisation (d2l_spec.md §2, the anchor's selftest examples) and Vocab in
// both orderings, with save/load.
#include <gtest/gtest.h>

#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"
#include "qkv/data/vocab.h"
#include "qkv/util/atomic_file.h"
#include "support/test_util.h"

namespace qkv::data {
namespace {

using Toks = std::vector<std::string>;

TEST(Tokenizer, D2lExamples) {
    EXPECT_EQ(preprocess_nmt("Go."), "go .");
    EXPECT_EQ(tokenize_nmt("Go."), (Toks{"go", "."}));
    EXPECT_EQ(tokenize_nmt("Run!"), (Toks{"run", "!"}));
    EXPECT_EQ(tokenize_nmt("Cours\u202f!"), (Toks{"cours", "!"}));  // anchor selftest
    EXPECT_EQ(tokenize_nmt("I'm home."), (Toks{"i'm", "home", "."}));
    EXPECT_EQ(preprocess_nmt("Va !"), "va !");  // already spaced: unchanged
    EXPECT_EQ(preprocess_nmt("Hello, world!"), "hello , world !");
    EXPECT_EQ(preprocess_nmt("Wait..."), "wait . . .");  // each '.' follows a non-space
    EXPECT_EQ(preprocess_nmt("?!"), "? !");              // position 0 has no previous char
    EXPECT_EQ(preprocess_nmt("a\u00a0?"), "a ?");        // NBSP became ' ' before the rule
    EXPECT_EQ(preprocess_nmt("Qui ?"), "qui ?");
    EXPECT_EQ(preprocess_nmt("3.5"), "3 .5");  // D2L splits decimals too
    EXPECT_EQ(preprocess_nmt("J'ai ÉTÉ À L'ÉCOLE."), "j'ai été à l'école .");
    EXPECT_EQ(preprocess_nmt("ÇA M’AGACE; «OUI»"), "ça m’agace; «oui»");  // ; « » ’ untouched
    EXPECT_EQ(preprocess_nmt("\xC4\xB0"), "i\xCC\x87");  // Python: 'İ'.lower() == 'i̇'
    EXPECT_EQ(preprocess_nmt(""), "");
    EXPECT_THROW(preprocess_nmt("bad \xff byte"), Error);
}

TEST(Tokenizer, SplitKeepsOrDropsEmptyTokens) {
    EXPECT_EQ(split_tokens("a  b ", true), (Toks{"a", "b"}));
    EXPECT_EQ(split_tokens("a  b ", false), (Toks{"a", "", "b", ""}));
    EXPECT_EQ(split_tokens("", false), (Toks{""}));  // Python: "".split(" ") == ['']
    EXPECT_TRUE(split_tokens("", true).empty());
    EXPECT_EQ(tokenize_nmt(" Hi .  "), (Toks{"hi", "."}));
}

TEST(Tokenizer, Utf8Validation) {
    EXPECT_TRUE(is_valid_utf8("plain"));
    EXPECT_TRUE(is_valid_utf8("été \xE2\x80\xAF !"));
    EXPECT_FALSE(is_valid_utf8("\xC3"));          // truncated sequence
    EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));      // overlong '/'
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // surrogate U+D800
    EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
    EXPECT_EQ(utf8_length("été"), 3);
    // Where the first ill-formed sequence starts (qkv translate reports it per line).
    EXPECT_EQ(invalid_utf8_offset("été !"), std::string_view::npos);
    EXPECT_EQ(invalid_utf8_offset("ab\xFF"), 2u);
    EXPECT_EQ(invalid_utf8_offset("\xC3\xA9t\xC3"), 3u);       // é, t, then a cut-off sequence
    EXPECT_EQ(invalid_utf8_offset("go \xED\xA0\x80 ."), 3u);  // surrogate
    EXPECT_EQ(invalid_utf8_offset(""), std::string_view::npos);
}

TEST(Vocab, FrequencyOrderTiesByFirstOccurrence) {
    // counts: b 3, a 2, c 2 (c first seen after a), d 1, e 2 (seen last)
    const std::vector<Toks> s = {{"b", "a", "c"}, {"c", "b", "d"}, {"a", "b", "e", "e"}};
    const Vocab v = Vocab::build(s);
    EXPECT_EQ(v.tokens(), (Toks{"<unk>", "<pad>", "<bos>", "<eos>", "b", "a", "c", "e"}));
    EXPECT_EQ(v.token_to_idx("a"), 5);
    EXPECT_EQ(v.token_to_idx("d"), 0);  // below min_freq -> <unk>
    EXPECT_EQ(v.token_to_idx("zzz"), 0);
    EXPECT_EQ(v.unk(), 0);
    EXPECT_EQ(v.pad(), 1);
    EXPECT_EQ(v.bos(), 2);
    EXPECT_EQ(v.eos(), 3);
    EXPECT_EQ(v.encode({"b", "d", "e"}), (std::vector<int64_t>{4, 0, 7}));
    EXPECT_EQ(v.decode({4, 0, 7}), (Toks{"b", "<unk>", "e"}));
    EXPECT_THROW(v.idx_to_token(8), Error);
    EXPECT_THROW(v.idx_to_token(-1), Error);
    VocabOptions all;
    all.min_freq = 1;
    EXPECT_EQ(Vocab::build(s, all).size(), 9);  // d joins
    // A reserved token that also occurs in the text is not added twice.
    EXPECT_EQ(Vocab::build({{"<eos>", "<eos>", "x", "x"}}).tokens(),
              (Toks{"<unk>", "<pad>", "<bos>", "<eos>", "x"}));
}

TEST(Vocab, AlphabeticalOrderAsD2lEn) {
    VocabOptions en;
    en.reserved = {};
    en.order    = VocabOrder::alphabetical;
    const std::vector<Toks> s = {{"go", ".", "<eos>", "<pad>"}, {"va", "!", "<eos>", "<pad>"},
                                 {"go", "!", "<eos>", "<pad>"}, {"été", "été", "zz"}};
    const Vocab v = Vocab::build(s, en);
    // Code-point order: '!' < '.' < '<' < 'g' < 'é'.
    EXPECT_EQ(v.tokens(), (Toks{"!", "<eos>", "<pad>", "<unk>", "go", "été"}));
    EXPECT_EQ(v.unk(), 3);
    EXPECT_EQ(v.token_to_idx("va"), 3);
    EXPECT_THROW(v.bos(), Error);
}

TEST(Vocab, ExplicitListChecks) {
    EXPECT_THROW(Vocab(Toks{"a", "b"}), Error);                 // no <unk>
    EXPECT_THROW(Vocab(Toks{"<unk>", "a", "a"}), Error);        // duplicate
    EXPECT_EQ(Vocab().size(), 1);
    EXPECT_EQ(Vocab(Toks{"x", "<unk>"}).unk(), 1);
}

TEST(Vocab, SaveLoadRoundTripAndAnchorFormat) {
    qkv::test::TempDir dir;
    const Vocab v = Vocab::build({{"été", "été", ".", ".", "j'ai", "j'ai"}});
    v.save(dir / "v.txt");
    EXPECT_EQ(util::read_file(dir / "v.txt"), "<unk>\n<pad>\n<bos>\n<eos>\nété\n.\nj'ai\n");
    EXPECT_EQ(Vocab::load(dir / "v.txt"), v);
    // fra_full_anchor.py --dump-data writes "\n".join(tokens) + "\n": the same format.
    util::write_file_atomic(dir / "a.txt", "<unk>\n<pad>\n<bos>\n<eos>\n.\nje\n");
    EXPECT_EQ(Vocab::load(dir / "a.txt").token_to_idx("je"), 5);
    EXPECT_THROW(Vocab(Toks{"<unk>", "a\nb"}).save(dir / "x.txt"), Error);
}

TEST(Vocab, LoadAcceptsWindowsLineEndings) {
    // A vocabulary saved through an editor or a tool on Windows has "\r\n" line endings: its
    // tokens are the same, and "<unk>\r" used to be reported as a missing "<unk>".
    qkv::test::TempDir dir;
    util::write_file_atomic(dir / "crlf.txt", "<unk>\r\n<pad>\r\n<bos>\r\n<eos>\r\n.\r\nje\r\n");
    EXPECT_EQ(Vocab::load(dir / "crlf.txt"), Vocab(Toks{"<unk>", "<pad>", "<bos>", "<eos>", ".", "je"}));
    // The round trip still holds for a token that ends with '\r' (save writes "\n" only, so such a
    // file is never CRLF throughout).
    const Vocab cr(Toks{"<unk>", "a\r", "b"});
    cr.save(dir / "cr.txt");
    EXPECT_EQ(Vocab::load(dir / "cr.txt"), cr);
    const Vocab all_cr(Toks{"<unk>", "<pad>\r"});
    all_cr.save(dir / "all_cr.txt");
    EXPECT_EQ(Vocab::load(dir / "all_cr.txt"), all_cr);
    // CRLF on some lines only: which line, and why "<unk>" is not found.
    util::write_file_atomic(dir / "mixed.txt", "x\n<unk>\r\ny\n");
    test::expect_error_containing([&] { Vocab::load(dir / "mixed.txt"); },
                                  dir / "mixed.txt" + ":2: line 2 ends with CR (Windows line endings on some "
                                                      "lines only)");
}

TEST(Vocab, LoadErrorsNameTheFileAndLine) {
    // Users meet these through `qkv translate` and friends on a damaged model folder: the file, the
    // line and what is wrong, no internal function name.
    qkv::test::TempDir dir;
    const auto message = [&](const char* name, const std::string& text) {
        util::write_file_atomic(dir / name, text);
        try {
            Vocab::load(dir / name);
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).find("Vocab::"), std::string::npos) << e.what();
            return std::string(e.what());
        }
        ADD_FAILURE() << name << " loaded";
        return std::string();
    };
    EXPECT_EQ(message("dup.txt", "<unk>\nx\ny\nx\n"),
              dir / "dup.txt" + ":4: the token \"x\" is also on line 2 (each token must appear once: the "
                                "vocabulary file is damaged)");
    EXPECT_EQ(message("cut.txt", "<unk>\nx\ny"),
              "the vocabulary file '" + dir / "cut.txt" +
                  "' does not end with a newline: it is truncated (one token per line, each line ending with a "
                  "newline, expected)");
    EXPECT_EQ(message("empty.txt", ""), "the vocabulary file '" + dir / "empty.txt" +
                                            "' is empty (one token per line expected)");
    EXPECT_EQ(message("nounk.txt", "x\ny\n"), "the vocabulary file '" + dir / "nounk.txt" +
                                                   "' has no \"<unk>\" line (every qkv vocabulary has one)");
}

}  // namespace
}  // namespace qkv::data
