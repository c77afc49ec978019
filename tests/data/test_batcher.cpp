// Batcher: every row once per epoch, last partial batch kept, per-epoch permutations that match
// CPython's random.Random(seed + (epoch << 64)).shuffle, batch contents equal the dataset rows.
#include <gtest/gtest.h>

#include <numeric>

#include "qkv/core/error.h"
#include "qkv/data/batcher.h"

namespace qkv::data {
namespace {

using Ids = std::vector<int64_t>;

// Row r has src ids (100r, 100r+1, 100r+2), src_valid_len r, and so on: contents identify rows.
NmtArrays numbered(int64_t n, int64_t T = 3) {
    NmtArrays a;
    a.n         = n;
    a.num_steps = T;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t t = 0; t < T; ++t) {
            a.src.push_back(100 * r + t);
            a.dec_input.push_back(-100 * r - t);
            a.label.push_back(1000 * r + t);
        }
        a.src_valid_len.push_back(r);
        a.tgt_valid_len.push_back(2 * r);
    }
    return a;
}

TEST(Batcher, CoversEveryRowOnceAndKeepsLastPartialBatch) {
    const NmtArrays data = numbered(10);
    Batcher b(data, {.batch_size = 4, .shuffle = true, .drop_last = false, .seed = 5});
    EXPECT_EQ(b.num_batches(), 3);
    Batch x;
    std::vector<int64_t> sizes, seen;
    while (b.next(x)) {
        sizes.push_back(x.size);
        seen.insert(seen.end(), x.rows.begin(), x.rows.end());
        for (int64_t i = 0; i < x.size; ++i) {
            const int64_t r = x.rows[size_t(i)];
            EXPECT_EQ(x.src[size_t(i * 3 + 2)], 100 * r + 2);
            EXPECT_EQ(x.dec_input[size_t(i * 3)], -100 * r);
            EXPECT_EQ(x.label[size_t(i * 3 + 1)], 1000 * r + 1);
            EXPECT_EQ(x.src_valid_len[size_t(i)], r);
            EXPECT_EQ(x.tgt_valid_len[size_t(i)], 2 * r);
        }
        EXPECT_EQ(x.num_steps, 3);
        EXPECT_EQ(x.src.size(), size_t(x.size * 3));
    }
    EXPECT_EQ(sizes, (Ids{4, 4, 2}));
    EXPECT_EQ(b.epoch(), 0);
    // Python: r = random.Random(5); x = list(range(10)); r.shuffle(x)
    EXPECT_EQ(seen, shuffled_indices(10, 5, 0));
    std::sort(seen.begin(), seen.end());
    Ids all(10);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all);
}

TEST(Batcher, EpochsDifferAndAreReproducible) {
    const NmtArrays data = numbered(50);
    Batcher a(data, {.batch_size = 8, .seed = 1});
    Batcher b(data, {.batch_size = 8, .seed = 1});
    a.start_epoch(0);
    const Ids e0 = a.order();
    a.start_epoch(1);
    const Ids e1 = a.order();
    EXPECT_NE(e0, e1);
    b.start_epoch(1);  // jump straight to epoch 1 (resume)
    EXPECT_EQ(b.order(), e1);
    EXPECT_EQ(e1, shuffled_indices(50, 1, 1));
    EXPECT_EQ(b.batch(6).size, 2);  // 50 = 6 * 8 + 2
    EXPECT_THROW(b.batch(7), Error);
    Batcher c(data, {.batch_size = 8, .seed = 2});
    c.start_epoch(0);
    EXPECT_NE(c.order(), e0);
}

TEST(Batcher, UnshuffledAndDropLast) {
    const NmtArrays data = numbered(10);
    Batcher b(data, {.batch_size = 4, .shuffle = false, .drop_last = true});
    EXPECT_EQ(b.num_batches(), 2);
    Batch x;
    ASSERT_TRUE(b.next(x));
    EXPECT_EQ(x.rows, (Ids{0, 1, 2, 3}));
    ASSERT_TRUE(b.next(x));
    EXPECT_EQ(x.rows, (Ids{4, 5, 6, 7}));
    EXPECT_FALSE(b.next(x));
    EXPECT_EQ(x.rows, (Ids{4, 5, 6, 7}));  // untouched at the end
    b.start_epoch(3);
    ASSERT_TRUE(b.next(x));
    EXPECT_EQ(x.rows, (Ids{0, 1, 2, 3}));
    EXPECT_THROW(Batcher(data, {.batch_size = 0}), Error);
    const NmtArrays empty = numbered(0);
    Batcher e(empty, {.batch_size = 4});
    EXPECT_EQ(e.num_batches(), 0);
    EXPECT_FALSE(e.next(x));
}

}  // namespace
}  // namespace qkv::data
