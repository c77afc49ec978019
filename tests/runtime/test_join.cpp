// Joining a text's sentence translations (runtime/translate.h join_translations,
// join_sentence_nbest): the one join that qkv translate, qkv serve and Python use.
#include <gtest/gtest.h>

#include "qkv/core/error.h"
#include "qkv/data/text.h"
#include "qkv/runtime/translate.h"

namespace qkv::runtime {
namespace {

TEST(JoinTranslations, KeepsTheLayoutDropsTheTextsOwnEdges) {
    const data::SentenceSplit s = data::split_sentences("  Go.  Run!\nStop. ");
    ASSERT_EQ(s.sentences.size(), 3u);
    EXPECT_EQ(join_translations(s, {"Va !", "Cours !", "Arrête."}), "Va !  Cours !\nArrête.");
    // a blank first sentence's translation leaves no leading space
    EXPECT_EQ(join_translations(s, {"", "Cours !", ""}), "Cours !");
    EXPECT_EQ(join_translations(s, {"", "", ""}), "");
    EXPECT_THROW(join_translations(s, {"Va !"}), Error);
}

TextHypothesis hyp(const std::string& text, double log_prob, double score, bool finished,
                   std::vector<std::string> units) {
    return {text, log_prob, score, finished, std::move(units)};
}

TEST(JoinSentenceNbest, KthJoinsEachSentencesKthSumsScores) {
    const data::SentenceSplit s = data::split_sentences("Go. Run! Stop.");
    ASSERT_EQ(s.sentences.size(), 3u);
    const std::vector<std::vector<TextHypothesis>> lists = {
        {hyp("Va !", -1, -0.5, true, {"▁Va", "▁!"}), hyp("Bouge !", -2, -1, true, {"▁Bouge", "▁!"})},
        {hyp("Cours !", -0.25, -0.125, false, {"▁Cours", "▁!"})},  // one hypothesis only
        {}};                                                         // a blank sentence: none
    const std::vector<TextHypothesis> j = join_sentence_nbest(lists, s);
    ASSERT_EQ(j.size(), 2u);  // the longest list
    EXPECT_EQ(j[0].text, "Va ! Cours !");
    EXPECT_EQ(j[1].text, "Bouge ! Cours !");  // the shorter list repeats its last
    EXPECT_DOUBLE_EQ(j[0].log_prob, -1.25);
    EXPECT_DOUBLE_EQ(j[1].score, -1.125);
    EXPECT_FALSE(j[0].finished);  // one sentence was cut
    EXPECT_EQ(j[0].units, (std::vector<std::string>{"▁Va", "▁!", "▁Cours", "▁!"}));
    EXPECT_TRUE(join_sentence_nbest(std::vector<std::vector<TextHypothesis>>(3), s).empty());
    EXPECT_THROW(join_sentence_nbest(std::vector<std::vector<TextHypothesis>>(2), s), Error);
    // from translate_nbest's lists: the words joined by spaces; an empty list is refused
    Translation t;
    t.words = {"Va", "!"}, t.log_prob = -1, t.score = -0.5, t.units = {"▁Va", "▁!"};
    const std::vector<std::vector<Translation>> tl = {{t}, {t}, {t}};
    EXPECT_EQ(join_sentence_nbest(tl, s).front().text, "Va ! Va ! Va !");
    EXPECT_DOUBLE_EQ(join_sentence_nbest(tl, s).front().log_prob, -3);
    EXPECT_THROW(join_sentence_nbest(std::vector<std::vector<Translation>>{{t}, {t}, {}}, s), Error);
}

}  // namespace
}  // namespace qkv::runtime
