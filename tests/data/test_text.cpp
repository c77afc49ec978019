// Raw-text helpers (data/text.h): nmt_nfkc against SentencePiece's own spm_normalize output
// (tests/fixtures/nmt_nfkc, recorded by record.py there), sentence splitting's documented rule,
// and the parallel line files' errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/data/text.h"

namespace qkv::data {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(TextNormalize, MatchesSpmNormalize) {
    const auto rows = nlohmann::json::parse(read_file(std::string(QKV_FIXTURE_DIR) + "/nmt_nfkc/spm_nmt_nfkc.json"));
    ASSERT_GE(rows.size(), 30u);
    // SentencePiece's NFKC is a leftmost-longest character map, not full NFKC (its builder.h): for
    // a + U+0301 + U+0328 it composes á first and leaves the ogonek, where NFKC reorders the marks
    // by combining class (ogonek 202 < acute 230) and gives ą + U+0301. qkv gives NFKC's answer,
    // as Python's unicodedata.normalize('NFKC', ...) does (3.11).
    const std::string differs = "a\u0301\u0328 a\u0328\u0301", nfkc = "\u0105\u0301 \u0105\u0301";
    int checked = 0;
    for (const auto& r : rows) {
        const std::string in = r["input"].get<std::string>();
        if (in == differs) {
            EXPECT_NE(r["output"].get<std::string>(), nfkc);  // the recorded difference is real
            EXPECT_EQ(normalize_nmt_nfkc(in), nfkc);
            continue;
        }
        EXPECT_EQ(normalize_nmt_nfkc(in), r["output"].get<std::string>()) << "input: " << r["input"].dump();
        EXPECT_EQ(normalize_nmt_nfkc(in, false), r["output_keep_spaces"].get<std::string>())
            << "input: " << r["input"].dump();
        ++checked;
    }
    EXPECT_EQ(checked, int(rows.size()) - 1);
}

// The rules spm_normalize cannot show (it reads lines), and the error.
TEST(TextNormalize, LineBreaksAndErrors) {
    EXPECT_EQ(normalize_nmt_nfkc("a\nb\r\nc"), "a b c");
    EXPECT_EQ(normalize_nmt_nfkc("a\r\n", false), "a  ");
    EXPECT_EQ(normalize_nmt_nfkc("ﬁ～ﬁ"), "fi～fi");  // U+FF5E kept, NFKC on both sides
    try {
        normalize_nmt_nfkc("ok \xc3(");
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("invalid UTF-8 at byte 3"), std::string::npos) << e.what();
    }
}

std::vector<std::string> texts(const SentenceSplit& s) {
    std::vector<std::string> out;
    for (const auto& x : s.sentences) out.push_back(x.text);
    return out;
}

using V = std::vector<std::string>;

TEST(SentenceSplit, DocumentedRule) {
    EXPECT_EQ(texts(split_sentences("She is very tired. Where is the train station?")),
              (V{"She is very tired.", "Where is the train station?"}));
    EXPECT_EQ(texts(split_sentences("Really?! Yes... I think so. 3 cats came. \"Hi,\" she said.")),
              (V{"Really?!", "Yes...", "I think so.", "3 cats came.", "\"Hi,\" she said."}));
    EXPECT_EQ(texts(split_sentences("He said \"Stop.\" Then he left. (It was late.) Fine.")),
              (V{"He said \"Stop.\"", "Then he left.", "(It was late.)", "Fine."}));
    EXPECT_EQ(texts(split_sentences("Wait… Où? ¿Qué? Ça va. Élan.")),
              (V{"Wait…", "Où?", "¿Qué?", "Ça va.", "Élan."}));
    // No split: abbreviations, initials, numbers, lower case after the period, no space.
    EXPECT_EQ(texts(split_sentences("Mr. Smith met Dr. Jones and Mrs. Brown at St. Paul's.")),
              (V{"Mr. Smith met Dr. Jones and Mrs. Brown at St. Paul's."}));
    EXPECT_EQ(texts(split_sentences("Fruit, e.g. Apples, i.e. Red ones, etc. Are fine in the U.S. Today.")),
              (V{"Fruit, e.g. Apples, i.e. Red ones, etc. Are fine in the U.S. Today."}));
    EXPECT_EQ(texts(split_sentences("J. R. R. Tolkien wrote it. It costs 3.5 euros. Pi is 3.14.")),
              (V{"J. R. R. Tolkien wrote it.", "It costs 3.5 euros.", "Pi is 3.14."}));
    EXPECT_EQ(texts(split_sentences("see fig 3. then stop.Next one")), (V{"see fig 3. then stop.Next one"}));
    EXPECT_EQ(texts(split_sentences("See fig. 3 here.")), (V{"See fig.", "3 here."}));  // not in the list
    EXPECT_EQ(texts(split_sentences("I'm a Dr. I'm a Mr.")), (V{"I'm a Dr. I'm a Mr."}));  // documented limit
    EXPECT_EQ(texts(split_sentences("(Mr. X left.) Then")), (V{"(Mr. X left.)", "Then"}));
    // A line break always ends a sentence.
    EXPECT_EQ(texts(split_sentences("no period\nnext line\r\n\r\nlast")), (V{"no period", "next line", "last"}));
    EXPECT_EQ(texts(split_sentences("Mr.\nSmith")), (V{"Mr.", "Smith"}));
}

TEST(SentenceSplit, KeepsLayout) {
    for (const std::string in : {"", "   ", "One.", "  One.  Two!\tThree?  ", "A. B\n\nC.\u00a0D. ", "x\u2028Y"}) {
        const SentenceSplit s = split_sentences(in);
        std::string back = s.leading;
        for (const auto& x : s.sentences) {
            EXPECT_FALSE(x.text.empty()) << in;
            back += x.text + x.space_after;
        }
        EXPECT_EQ(back, in);
        V same = texts(s);
        EXPECT_EQ(join_sentences(s, same), in);
    }
    const SentenceSplit s = split_sentences("  One.  Two!\tThree?  ");
    EXPECT_EQ(s.leading, "  ");
    ASSERT_EQ(s.sentences.size(), 3u);
    EXPECT_EQ(s.sentences[0].space_after, "  ");
    EXPECT_EQ(s.sentences[1].space_after, "\t");
    EXPECT_EQ(s.sentences[2].space_after, "  ");
    EXPECT_EQ(join_sentences(s, {"Un.", "Deux !", "Trois ?"}), "  Un.  Deux !\tTrois ?  ");
    EXPECT_EQ(split_sentences("Go.\u00a0Now.").sentences.size(), 2u);  // U+00A0 is whitespace
    EXPECT_TRUE(split_sentences(" \t").sentences.empty());
    EXPECT_THROW(join_sentences(s, {"Un."}), Error);
    EXPECT_THROW(split_sentences("a\xff"), Error);
}

struct TempDir {
    std::filesystem::path p;
    TempDir() {
        p = std::filesystem::temp_directory_path() / ("qkv_text_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                                      "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
        std::filesystem::create_directories(p);
    }
    ~TempDir() { std::filesystem::remove_all(p); }
    std::string write(const std::string& name, const std::string& s) const {
        std::ofstream(p / name, std::ios::binary) << s;
        return (p / name).string();
    }
};

TEST(RawWords, NormalizeThenSplitOnSpaces) {
    EXPECT_EQ(raw_words("  She is  very tired.\u00a0Where? "),
              (std::vector<std::string>{"She", "is", "very", "tired.", "Where?"}));
    EXPECT_EQ(raw_words("Il est là !"), (std::vector<std::string>{"Il", "est", "là", "!"}));
    EXPECT_TRUE(raw_words(" \t ").empty());
    EXPECT_THROW(raw_words("bad \xff"), Error);
}

TEST(ParallelLines, ReadsAndNamesMismatch) {
    TempDir d;
    const std::string src = d.write("a.en", "Hello.\r\nGood night.\n"), ref = d.write("a.fr", "Bonjour.\nBonne nuit.");
    const ParallelLines pl = read_parallel_lines(src, ref);
    EXPECT_EQ(pl.source, (V{"Hello.", "Good night."}));
    EXPECT_EQ(pl.reference, (V{"Bonjour.", "Bonne nuit."}));
    EXPECT_EQ(read_text_lines(d.write("e", ""), "--x"), V{});
    EXPECT_EQ(read_text_lines(d.write("b", "\n\n"), "--x"), (V{"", ""}));
    const std::string short_ref = d.write("b.fr", "Bonjour.\n");
    try {
        read_parallel_lines(src, short_ref);
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "--src-file '" + src + "' has 2 lines but --ref-file '" + short_ref + "' has 1");
    }
    try {
        read_parallel_lines(src, (d.p / "missing.fr").string());
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--ref-file '"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
    }
    EXPECT_THROW(read_text_lines(d.p.string(), "--src-file"), Error);
}

}  // namespace
}  // namespace qkv::data
