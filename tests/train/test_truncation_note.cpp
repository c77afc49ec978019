// train::truncation_note: the wording of the over-long-sentence warning (qkv translate, heatmap) in
// every case: fits (no text), exactly num_steps units (<eos> alone dropped), longer (some units and
// <eos> dropped; one unit in the singular), pieces of a subword model, and a lower bound; and
// train::pieces_num_steps, the subword length chosen from the train split (99 % whole, capped).
#include <gtest/gtest.h>

#include <vector>

#include "qkv/train/translation_data.h"

namespace qkv::test {
namespace {

using train::truncation_note;

TEST(TruncationNote, FitsWhole) {
    EXPECT_EQ(truncation_note(5, 6, false, 5, false), "");
    EXPECT_EQ(truncation_note(0, 6, false, 0, false), "");
    EXPECT_EQ(truncation_note(12, 13, true, 7, false), "");
}

TEST(TruncationNote, WordsExactlyNumSteps) {
    EXPECT_EQ(truncation_note(6, 6, false, 6, false),
              "has 6 source tokens but the model reads 6 positions (5 tokens + <eos>): all 6 are read, but not "
              "<eos>");
}

TEST(TruncationNote, WordsLonger) {
    EXPECT_EQ(truncation_note(9, 6, false, 9, false),
              "has 9 source tokens but the model reads 6 positions (5 tokens + <eos>): tokens 7-9 are not read, "
              "nor is <eos>");
    EXPECT_EQ(truncation_note(7, 6, false, 7, false),
              "has 7 source tokens but the model reads 6 positions (5 tokens + <eos>): token 7 is not read, nor "
              "is <eos>");
    EXPECT_EQ(truncation_note(3, 2, false, 3, false),
              "has 3 source tokens but the model reads 2 positions (1 token + <eos>): token 3 is not read, nor is "
              "<eos>");
}

TEST(TruncationNote, PiecesExactlyNumSteps) {
    EXPECT_EQ(truncation_note(13, 13, true, 5, false),
              "has 13 source pieces (5 words) but the model reads 13 positions (12 pieces + <eos>): all 13 are "
              "read, but not <eos>");
    EXPECT_EQ(truncation_note(2, 2, true, 1, false),
              "has 2 source pieces (1 word) but the model reads 2 positions (1 piece + <eos>): all 2 are read, but "
              "not <eos>");
}

TEST(TruncationNote, PiecesLonger) {
    EXPECT_EQ(truncation_note(25, 13, true, 20, false),
              "has 25 source pieces (20 words) but the model reads 13 positions (12 pieces + <eos>): pieces 14-25 "
              "are not read, nor is <eos>");
}

TEST(TruncationNote, LowerBound) {
    EXPECT_EQ(truncation_note(210000, 13, true, 210000, true),
              "has at least 210000 source pieces (210000 words) but the model reads 13 positions (12 pieces + "
              "<eos>): pieces 14 and later are not read, nor is <eos>");
    EXPECT_EQ(truncation_note(13, 13, true, 3, true),
              "has at least 13 source pieces (3 words) but the model reads 13 positions (12 pieces + <eos>): "
              "pieces 14 and later, if any, are not read, nor is <eos>");
}

// The smallest T holding 99 % of the sources and 99 % of the targets whole with <eos>.
TEST(PiecesNumSteps, NinetyNinePercentWholeWithEos) {
    std::vector<int64_t> src(100, 4), tgt(100, 6);
    EXPECT_EQ(train::pieces_num_steps(src, tgt, 100), 7);  // 6 pieces + <eos>
    src[0] = 50;                                            // one long source in 100: 1 % may be cut
    EXPECT_EQ(train::pieces_num_steps(src, tgt, 100), 7);
    src[1] = 50;                                            // two: 2 % would be cut
    EXPECT_EQ(train::pieces_num_steps(src, tgt, 100), 51);
    EXPECT_EQ(train::pieces_num_steps(src, tgt, 32), 32);   // capped
    EXPECT_EQ(train::pieces_num_steps({3, 1, 2}, {1}, 100), 4);  // few sentences: the longest fits
    EXPECT_EQ(train::pieces_num_steps({0}, {0}, 100), 2);  // at least 2
}

}  // namespace
}  // namespace qkv::test
