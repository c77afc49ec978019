// PyRandom and the splits: bit-exact with CPython's random (values printed by CPython 3.11) and
// the quality anchor's published split checksums (quality_anchor.md §2.1 step 4; needs no data:
// the split depends only on the pair count 167,130).
#include <gtest/gtest.h>

#include "data/sha256.h"
#include "qkv/core/error.h"
#include "qkv/data/split.h"

namespace qkv::data {
namespace {

using qkv::test::sha256_hex;
using qkv::test::sha256_lines;

TEST(Sha256, FipsVectors) {
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// python3 -c "import random; r=random.Random(0); print([r.getrandbits(32) for _ in range(3)])"
TEST(PyRandom, MatchesCPython) {
    PyRandom r0(0);
    EXPECT_EQ(r0.next_u32(), 3626764237u);
    EXPECT_EQ(r0.next_u32(), 1654615998u);
    EXPECT_EQ(r0.next_u32(), 3255389356u);
    // r = random.Random(2**40 + 5): getrandbits(32) x2, getrandbits(64), getrandbits(33),
    // getrandbits(1), random()
    PyRandom r(uint64_t(1) << 40 | 5);
    EXPECT_EQ(r.getrandbits(32), 2166296868u);
    EXPECT_EQ(r.getrandbits(32), 2220160828u);
    EXPECT_EQ(r.getrandbits(64), 12244916861145399977ull);
    EXPECT_EQ(r.getrandbits(33), 3976222944ull);
    EXPECT_EQ(r.getrandbits(1), 1u);
    EXPECT_EQ(r.random(), 0.7584412456897223);
    // r = random.Random(0); [r._randbelow(1000003) for _ in range(3)]
    PyRandom rb(0);
    EXPECT_EQ(rb.randbelow(1000003), 885440u);
    EXPECT_EQ(rb.randbelow(1000003), 403958u);
    EXPECT_EQ(rb.randbelow(1000003), 794772u);
}

TEST(PyRandom, ShuffleMatchesCPython) {
    // x = list(range(10)); random.Random(7).shuffle(x)
    std::vector<int> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    PyRandom(7).shuffle(x);
    EXPECT_EQ(x, (std::vector<int>{8, 3, 1, 4, 7, 0, 9, 6, 2, 5}));
    // x = list(range(20)); random.Random(0).shuffle(x)
    EXPECT_EQ(shuffled_indices(20, 0), (std::vector<int64_t>{10, 18, 16, 14, 0, 17, 11, 2, 3, 9,
                                                             5, 7, 4, 19, 6, 15, 8, 1, 13, 12}));
    // epoch 2 of seed 3: random.Random(3 + (2 << 64)).shuffle(list(range(10)))
    EXPECT_EQ(shuffled_indices(10, 3, 2), (std::vector<int64_t>{7, 0, 6, 4, 3, 9, 2, 8, 5, 1}));
    EXPECT_TRUE(shuffled_indices(0, 0).empty());
    EXPECT_EQ(shuffled_indices(1, 0), (std::vector<int64_t>{0}));
}

TEST(Split, AnchorSplitOfTheFullFileMatchesPublishedChecksums) {
    const SplitIndices s = anchor_split(167130);
    ASSERT_EQ(s.train.size(), 160130u);
    ASSERT_EQ(s.valid.size(), 2000u);
    ASSERT_EQ(s.test.size(), 5000u);
    EXPECT_EQ(std::vector<int64_t>(s.train.begin(), s.train.begin() + 3),
              (std::vector<int64_t>{76767, 37589, 156047}));
    EXPECT_EQ(std::vector<int64_t>(s.valid.begin(), s.valid.begin() + 3),
              (std::vector<int64_t>{27045, 146721, 20748}));
    EXPECT_EQ(std::vector<int64_t>(s.test.begin(), s.test.begin() + 3),
              (std::vector<int64_t>{7488, 148788, 81859}));
    EXPECT_EQ(sha256_lines(s.train), "95f84e77401f3239cea4ea549e18de99b0dd4021250911af651a66c38919a7bd");
    EXPECT_EQ(sha256_lines(s.valid), "cecc9b73cc72774b9177d94c85248e571b7d36a7a2109477739e5dcd02dd39a4");
    EXPECT_EQ(sha256_lines(s.test), "3671aeda3f2c6f708c12119804fc84e66ab4f22bce4aaae1334d74f3b68abc70");
}

TEST(Split, GeneralSplitPartitionsAndChecks) {
    const SplitIndices s = shuffled_split(50, 5, 10, 42);
    EXPECT_EQ(s.train.size(), 35u);
    EXPECT_EQ(s.valid.size(), 5u);
    EXPECT_EQ(s.test.size(), 10u);
    std::vector<int> seen(50, 0);
    for (const auto* part : {&s.train, &s.valid, &s.test})
        for (int64_t i : *part) ++seen[size_t(i)];
    EXPECT_EQ(seen, std::vector<int>(50, 1));
    // Same as cutting shuffled_indices.
    const auto idx = shuffled_indices(50, 42);
    EXPECT_EQ(s.test, std::vector<int64_t>(idx.end() - 10, idx.end()));
    EXPECT_THROW(shuffled_split(10, 5, 6, 0), Error);
    EXPECT_THROW(shuffled_split(10, -1, 0, 0), Error);
    EXPECT_THROW(anchor_split(6999), Error);
}

}  // namespace
}  // namespace qkv::data
