// The source-disjoint held-out split (data/dedup_split.h): on a synthetic corpus with repeated
// sources (invariants, determinism, normalization of the grouping key, errors) and, when the data
// is present, the numbers docs/metrics.md gives for fra.txt (cross-checked with Python's random).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "qkv/core/error.h"
#include "qkv/data/dedup_split.h"
#include "qkv/data/fra_eng.h"
#include "qkv/data/split.h"
#include "qkv/data/text.h"

namespace qkv::data {
namespace {

/// 40 sources; source k appears (k % 4) + 1 times, interleaved, with spelling variants that
/// normalize alike (a trailing space, U+00A0 for a space) on some repeats.
std::vector<std::string> synthetic_sources() {
    std::vector<std::string> out;
    for (int rep = 0; rep < 4; ++rep)
        for (int k = 0; k < 40; ++k)
            if (rep <= k % 4) {
                std::string s = "Sentence number " + std::to_string(k) + ".";
                if (rep == 1) s += " ";
                if (rep == 2) s = "Sentence\u00a0number " + std::to_string(k) + ".";
                out.push_back(s);
            }
    return out;
}

TEST(SourceDisjointSplit, NoHeldOutSourceInTraining) {
    const auto src = synthetic_sources();
    ASSERT_EQ(src.size(), 100u);  // 10 sources each appear 1, 2, 3 and 4 times
    const SourceDisjointSplit s = source_disjoint_split(src, 5, 8, 3);
    EXPECT_EQ(s.distinct_sources, 40);
    EXPECT_EQ(s.valid.size(), 5u);
    EXPECT_EQ(s.test.size(), 8u);
    const auto key = [&](int64_t i) { return normalize_nmt_nfkc(src[size_t(i)]); };
    std::set<std::string> train_keys, valid_keys, test_keys;
    for (int64_t i : s.train) train_keys.insert(key(i));
    for (int64_t i : s.valid) valid_keys.insert(key(i));
    for (int64_t i : s.test) test_keys.insert(key(i));
    EXPECT_EQ(valid_keys.size(), 5u);  // one pair per source
    EXPECT_EQ(test_keys.size(), 8u);
    for (const auto& k : test_keys) EXPECT_FALSE(train_keys.count(k) || valid_keys.count(k)) << k;
    for (const auto& k : valid_keys) EXPECT_FALSE(train_keys.count(k)) << k;
    EXPECT_EQ(train_keys.size(), 40u - 13u);
    // Every pair is in one place; the unused ones are the held-out sources' other pairs.
    std::vector<int64_t> all = s.train;
    all.insert(all.end(), s.valid.begin(), s.valid.end());
    all.insert(all.end(), s.test.begin(), s.test.end());
    std::sort(all.begin(), all.end());
    EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end());
    int64_t held_pairs = 0;
    for (size_t i = 0; i < src.size(); ++i)
        held_pairs += valid_keys.count(key(int64_t(i))) + test_keys.count(key(int64_t(i)));
    EXPECT_EQ(s.unused, held_pairs - 13);
    EXPECT_EQ(int64_t(all.size()) + s.unused, 100);
    EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
    // A held-out source is represented by its first pair in file order.
    for (int64_t i : s.test)
        for (int64_t j = 0; j < i; ++j) EXPECT_NE(key(j), key(i));
}

TEST(SourceDisjointSplit, GroupOrderIsPythonsShuffle) {
    // Groups are numbered by first occurrence, so for distinct sources group g is pair g and the
    // held-out pairs are shuffled_split's: test = idx[-n_test:], valid = the n_valid before.
    std::vector<std::string> src;
    for (int k = 0; k < 50; ++k) src.push_back("s" + std::to_string(k));
    const SourceDisjointSplit s = source_disjoint_split(src, 4, 6, 7);
    const SplitIndices p = shuffled_split(50, 4, 6, 7);
    EXPECT_EQ(s.test, p.test);
    EXPECT_EQ(s.valid, p.valid);
    std::vector<int64_t> train = p.train;
    std::sort(train.begin(), train.end());
    EXPECT_EQ(s.train, train);
    EXPECT_EQ(s.unused, 0);
    // Deterministic, and another seed draws other sources.
    EXPECT_EQ(source_disjoint_split(src, 4, 6, 7).test, s.test);
    EXPECT_NE(source_disjoint_split(src, 4, 6, 8).test, s.test);
}

TEST(SourceDisjointSplit, Errors) {
    const std::vector<std::string> src = {"a", "b", "a", "c", "b"};  // 3 distinct sources
    EXPECT_NO_THROW(source_disjoint_split(src, 1, 1));
    try {
        source_disjoint_split(src, 1, 2);
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("3 distinct sources in 5 pairs"), std::string::npos) << e.what();
    }
    EXPECT_THROW(source_disjoint_split(src, -1, 1), Error);
    // A source that is not UTF-8 is grouped by its bytes, not refused.
    const SourceDisjointSplit s = source_disjoint_split({"\xff", "\xff", "ok", "x"}, 1, 1);
    EXPECT_EQ(s.distinct_sources, 3);
}

// fra.txt: the numbers of docs/metrics.md ("A held-out split without source overlap"). Python,
// from the raw sources (equal under nmt_nfkc here): idx = list(range(116830));
// random.Random(0).shuffle(idx); the groups of idx[-5000:] and idx[-7000:-5000] are held out.
TEST(SourceDisjointSplit, RealCorpusNumbers) {
    const std::string p = std::string(QKV_SOURCE_DIR) + "/../shared/data/fra-eng.zip";
    if (!std::filesystem::exists(p)) GTEST_SKIP() << "fra-eng data not found at " << p;
    const ParallelCorpus c = load_fra_eng(p);
    ASSERT_EQ(c.size(), 167130);
    const SourceDisjointSplit s = source_disjoint_split(c.src, 2000, 5000, 0);
    EXPECT_EQ(s.distinct_sources, 116830);
    EXPECT_EQ(s.test.size(), 5000u);
    EXPECT_EQ(s.valid.size(), 2000u);
    EXPECT_EQ(s.train.size(), 157108u);
    EXPECT_EQ(s.unused, 3022);
    EXPECT_EQ(c.src[size_t(s.test[0])], "Is there a lot left to do?");
    EXPECT_EQ(c.src[size_t(s.test[1])], "It is not easy to solve the problem.");
    EXPECT_EQ(c.src[size_t(s.test[2])], "Everybody left.");
    // The quality anchor's split of pairs, for comparison: half its test pairs have a source
    // that is also a training source.
    const SplitIndices a = anchor_split(c.size(), 0);
    std::set<std::string> train_src;
    for (int64_t i : a.train) train_src.insert(c.src[size_t(i)]);
    int64_t seen = 0;
    for (int64_t i : a.test) seen += train_src.count(c.src[size_t(i)]);
    EXPECT_EQ(seen, 2499);
}

}  // namespace
}  // namespace qkv::data
