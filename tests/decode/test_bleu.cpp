// BLEU: D2L sentence BLEU against the book's published scores and the spec's hand examples
// (d2l_spec.md §6), corpus BLEU-4 against hand counts and fra_full_anchor.py's corpus_bleu.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/decode/bleu.h"

namespace qkv::decode {
namespace {

// The book prints 3 decimals: a reproduction must land within half a unit of the last digit.
constexpr double kTolPrinted = 5e-4;
// Closed forms vs the same formula in double: only rounding of a few pow/exp calls.
constexpr double kTolFormula = 1e-12;

std::vector<std::string> toks(const char* s) {
    std::vector<std::string> out;
    std::string cur;
    for (const char* p = s; *p; ++p) {
        if (*p == ' ') {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += *p;
        }
    }
    out.push_back(cur);
    return out;
}

TEST(D2lBleu, BookScores) {
    EXPECT_NEAR(d2l_bleu("je perdu .", "j'ai perdu .", 2), 0.687, kTolPrinted);
    EXPECT_NEAR(d2l_bleu("il est mouillé .", "il est calme .", 2), 0.658, kTolPrinted);
    EXPECT_NEAR(d2l_bleu("je suis en retard ?", "je suis chez moi .", 2), 0.447, kTolPrinted);
    EXPECT_EQ(d2l_bleu("il court .", "il est calme .", 2), 0.0);
    EXPECT_EQ(d2l_bleu("va !", "va !", 2), 1.0);
    EXPECT_EQ(d2l_bleu("je suis chez moi .", "je suis chez moi .", 2), 1.0);
    // Exact closed forms of the same four.
    EXPECT_NEAR(d2l_bleu("je perdu .", "j'ai perdu .", 2),
                std::sqrt(2.0 / 3) * std::pow(0.5, 0.25), kTolFormula);
    EXPECT_NEAR(d2l_bleu("je suis en retard ?", "je suis chez moi .", 2),
                std::sqrt(2.0 / 5) * std::pow(0.25, 0.25), kTolFormula);
}

TEST(D2lBleu, SpecPrecisionExample_ABCDEF_vs_ABBCD) {
    // p1 = 4/5, p2 = 3/4, p3 = 1/3, p4 = 0; BP = exp(1 - 6/5).
    const double bp = std::exp(1.0 - 6.0 / 5.0);
    const char* pred  = "A B B C D";
    const char* label = "A B C D E F";
    EXPECT_NEAR(d2l_bleu(pred, label, 1), bp * std::pow(4.0 / 5, 0.5), kTolFormula);
    EXPECT_NEAR(d2l_bleu(pred, label, 2), bp * std::pow(4.0 / 5, 0.5) * std::pow(3.0 / 4, 0.25),
                kTolFormula);
    EXPECT_NEAR(d2l_bleu(pred, label, 3),
                bp * std::pow(4.0 / 5, 0.5) * std::pow(3.0 / 4, 0.25) * std::pow(1.0 / 3, 0.125),
                kTolFormula);
    EXPECT_EQ(d2l_bleu(pred, label, 4), 0.0);
}

TEST(D2lBleu, BrevityAndShortPredictions) {
    EXPECT_NEAR(d2l_bleu("A B", "A B C D E F", 2), std::exp(1.0 - 3.0), kTolFormula);  // ~0.14
    EXPECT_NEAR(d2l_bleu("A B", "A B C D E F", 2), 0.14, 5e-3);
    // EN's min(k, len_pred): a 1-token prediction only uses p1 (ZH would divide by zero).
    EXPECT_NEAR(d2l_bleu("va", "va !", 2), std::exp(-1.0), kTolFormula);
    // "" splits into one empty token, which matches nothing.
    EXPECT_EQ(d2l_bleu("", "a b", 2), 0.0);
    // A longer prediction has no brevity penalty.
    EXPECT_NEAR(d2l_bleu("a b c d", "a b c", 1), std::sqrt(3.0 / 4), kTolFormula);
    // Clipping: repeated tokens match only as often as the label has them.
    EXPECT_NEAR(d2l_bleu("a a a", "a b c", 1), std::sqrt(1.0 / 3), kTolFormula);
    EXPECT_THROW(d2l_bleu("a", "a", 0), Error);
    EXPECT_EQ(d2l_bleu(toks("je perdu ."), toks("j'ai perdu ."), 2),
              d2l_bleu("je perdu .", "j'ai perdu .", 2));
}

TEST(CorpusBleu, HandComputedSelftestOfTheAnchor) {
    // fra_full_anchor.py selftest: p = 8/9, 5/7, 3/5, 1/3; c = 9, r = 10.
    const auto r = corpus_bleu({toks("the cat sat on the mat"), toks("a b c")},
                               {toks("the cat sat on a mat today"), toks("a b c")});
    EXPECT_EQ(r.matches, (std::array<int64_t, 4>{8, 5, 3, 1}));
    EXPECT_EQ(r.totals, (std::array<int64_t, 4>{9, 7, 5, 3}));
    EXPECT_EQ(r.hyp_len, 9);
    EXPECT_EQ(r.ref_len, 10);
    EXPECT_NEAR(r.bp, std::exp(1.0 - 10.0 / 9.0), kTolFormula);
    const double want = std::exp(1.0 - 10.0 / 9.0) * std::pow(8.0 / 9 * 5.0 / 7 * 3.0 / 5 / 3, 0.25);
    EXPECT_NEAR(r.bleu, want, kTolFormula);
}

TEST(CorpusBleu, MatchesAnchorScript) {
    // Values printed by tools/bleu_reference.py (the anchor script's corpus_bleu on this corpus).
    const std::vector<std::vector<std::string>> hyps = {
        toks("la tapis . le"), toks("chien la ."), toks("noir noir"),
        toks("chat une la noir est"), toks("un . une tapis"),
        toks("chien la noir est une tapis sur un")};
    const std::vector<std::vector<std::string>> refs = {
        toks("chat tapis . le la"), toks("chien la une"), toks("noir noir tapis"),
        toks("chat une la noir est une"), toks("un . une tapis"),
        toks("chien la noir est une un sur un")};
    const auto r = corpus_bleu(hyps, refs);
    EXPECT_NEAR(r.bleu, 0.6385303735817209, kTolFormula);
    EXPECT_NEAR(r.precisions[0], 0.9230769230769231, kTolFormula);
    EXPECT_NEAR(r.precisions[1], 0.8, kTolFormula);
    EXPECT_NEAR(r.precisions[2], 0.6428571428571429, kTolFormula);
    EXPECT_NEAR(r.precisions[3], 0.5555555555555556, kTolFormula);
    EXPECT_NEAR(r.bp, 0.8910233766955563, kTolFormula);
    EXPECT_EQ(r.hyp_len, 26);
    EXPECT_EQ(r.ref_len, 29);
}

TEST(CorpusBleu, EdgeCases) {
    // No 4-gram anywhere: p4 = 0 -> BLEU 0 (no smoothing).
    const auto a = corpus_bleu({toks("a b c")}, {toks("a b c")});
    EXPECT_EQ(a.totals[3], 0);
    EXPECT_EQ(a.bleu, 0.0);
    // Perfect and long enough: 1.
    const auto b = corpus_bleu({toks("a b c d e")}, {toks("a b c d e")});
    EXPECT_EQ(b.bleu, 1.0);
    EXPECT_EQ(b.bp, 1.0);
    // Longer hypothesis than reference: BP = 1.
    const auto c = corpus_bleu({toks("a b c d e f")}, {toks("a b c d e")});
    EXPECT_EQ(c.bp, 1.0);
    EXPECT_NEAR(c.bleu, std::pow(5.0 / 6 * 4.0 / 5 * 3.0 / 4 * 2.0 / 3, 0.25), kTolFormula);
    // Empty corpus / empty hypotheses.
    const auto d = corpus_bleu({}, {});
    EXPECT_EQ(d.bleu, 0.0);
    const auto e = corpus_bleu({{}}, {toks("a b")});
    EXPECT_EQ(e.bp, 0.0);
    EXPECT_EQ(e.bleu, 0.0);
    EXPECT_THROW(corpus_bleu({{}}, {}), Error);
    // <unk> in a hypothesis is just a token that never matches the reference.
    const auto f = corpus_bleu({toks("<unk> b c d e")}, {toks("a b c d e")});
    EXPECT_EQ(f.matches, (std::array<int64_t, 4>{4, 3, 2, 1}));
}

}  // namespace
}  // namespace qkv::decode
