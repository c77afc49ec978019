// Batcher: every row once per epoch, last partial batch kept, per-epoch permutations that match
// CPython's random.Random(seed + (epoch << 64)).shuffle, batch contents equal the dataset rows.
#include <gtest/gtest.h>

#include <algorithm>
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

// Pairs of varied lengths: row r has src_valid_len 1 + (7r mod 11) and tgt_valid_len
// 1 + (5r mod 12), ids r*100 + t in the valid positions and 0 (<pad>) after them.
NmtArrays varied(int64_t n, int64_t T = 12) {
    NmtArrays a;
    a.n = n, a.num_steps = T;
    for (int64_t r = 0; r < n; ++r) {
        const int64_t ls = 1 + (7 * r) % 11, lt = 1 + (5 * r) % 12;
        for (int64_t t = 0; t < T; ++t) {
            a.src.push_back(t < ls ? 100 * r + t : 0);
            a.label.push_back(t < lt ? 100 * r + t : 0);
            a.dec_input.push_back(t <= lt ? -(100 * r + t) : 0);
        }
        a.src_valid_len.push_back(ls);
        a.tgt_valid_len.push_back(lt);
    }
    return a;
}

TEST(Batcher, TrimCutsOnlyPaddingColumns) {
    const NmtArrays data = varied(50);
    Batcher b(data, {.batch_size = 8, .shuffle = true, .seed = 3, .trim = true});
    Batch x;
    int64_t batches = 0, shorter = 0;
    while (b.next(x)) {
        ++batches;
        int64_t ms = 0, mt = 0;
        for (int64_t i = 0; i < x.size; ++i) {
            ms = std::max(ms, x.src_valid_len[size_t(i)]);
            mt = std::max(mt, x.tgt_valid_len[size_t(i)]);
        }
        ASSERT_EQ(x.src_steps, ms);
        ASSERT_EQ(x.num_steps, mt);
        ASSERT_EQ(x.src.size(), size_t(x.size * ms));
        ASSERT_EQ(x.label.size(), size_t(x.size * mt));
        ASSERT_EQ(x.dec_input.size(), size_t(x.size * mt));
        shorter += ms < 12 || mt < 12;
        for (int64_t i = 0; i < x.size; ++i) {  // the kept columns are the row's first columns
            const int64_t r = x.rows[size_t(i)];
            for (int64_t t = 0; t < ms; ++t) EXPECT_EQ(x.src[size_t(i * ms + t)], data.src[size_t(r * 12 + t)]);
            for (int64_t t = 0; t < mt; ++t) {
                EXPECT_EQ(x.label[size_t(i * mt + t)], data.label[size_t(r * 12 + t)]);
                EXPECT_EQ(x.dec_input[size_t(i * mt + t)], data.dec_input[size_t(r * 12 + t)]);
            }
        }
    }
    EXPECT_EQ(batches, 7);
    EXPECT_GT(shorter, 0);  // some batch actually lost columns
}

TEST(Batcher, BucketingIsAPermutationOfSimilarLengthsWithThePartialBatchLast) {
    const NmtArrays data = varied(203);
    auto len = [&](int64_t r) { return std::max(data.src_valid_len[size_t(r)], data.tgt_valid_len[size_t(r)]); };
    BatcherOptions o{.batch_size = 10, .shuffle = true, .seed = 7, .bucket_pool = 5};
    Batcher b(data, o), again(data, o);
    Batcher plain(data, {.batch_size = 10, .shuffle = true, .seed = 7});
    int64_t spread_bucketed = 0, spread_plain = 0;
    for (int64_t epoch : {0, 1}) {
        b.start_epoch(epoch);
        again.start_epoch(epoch);
        plain.start_epoch(epoch);
        EXPECT_EQ(b.order(), again.order());  // deterministic for (seed, epoch)
        std::vector<int64_t> seen = b.order();
        std::sort(seen.begin(), seen.end());
        std::vector<int64_t> all(203);
        std::iota(all.begin(), all.end(), int64_t(0));
        EXPECT_EQ(seen, all);
        for (int64_t k = 0; k < b.num_batches(); ++k) {
            const Batch x = b.batch(k), y = plain.batch(k);
            EXPECT_EQ(x.size, k + 1 < b.num_batches() ? 10 : 3);
            auto spread = [&](const Batch& z) {
                int64_t lo = 99, hi = 0;
                for (int64_t r : z.rows) lo = std::min(lo, len(r)), hi = std::max(hi, len(r));
                return hi - lo;
            };
            spread_bucketed += spread(x);
            spread_plain += spread(y);
        }
    }
    // A pool of 50 pairs over 12 lengths puts ~4 pairs of each length in a pool, so a batch of
    // 10 spans about 3 lengths; unbucketed batches span nearly all 12.
    EXPECT_LT(spread_bucketed * 2, spread_plain);
    b.start_epoch(0);
    std::vector<int64_t> e0 = b.order();
    b.start_epoch(1);
    EXPECT_NE(b.order(), e0);
}

// Batches by tokens: every row exactly once per epoch, the same number of batches every epoch,
// each batch's cost (sum of max(src, tgt) valid lengths) close to the total / batches (a batch is
// cut at the first row that would pass its share, so it is off by less than one row's cost from
// the running goal), short pairs in larger batches than long ones, reproducible per (seed, epoch).
TEST(Batcher, BatchTokensCutsEqualCostBatchesOfEveryRowOnce) {
    const NmtArrays data = varied(403);
    auto cost = [&](int64_t r) { return std::max<int64_t>(1, std::max(data.src_valid_len[size_t(r)], data.tgt_valid_len[size_t(r)])); };
    int64_t total = 0, longest = 0;
    for (int64_t r = 0; r < data.n; ++r) total += cost(r), longest = std::max(longest, cost(r));
    const int64_t tokens = 60;
    BatcherOptions o{.batch_size = 1, .shuffle = true, .seed = 3, .bucket_pool = 4, .batch_tokens = tokens};
    Batcher b(data, o), again(data, o);
    const int64_t nb = (total + tokens - 1) / tokens;
    ASSERT_EQ(b.num_batches(), nb);
    for (int64_t epoch : {0, 1, 2}) {
        b.start_epoch(epoch);
        again.start_epoch(epoch);
        std::vector<int64_t> seen;
        int64_t shortest_hi = 1 << 30, shortest_rows = 0, longest_lo = 0, longest_rows = 0;
        for (int64_t k = 0; k < b.num_batches(); ++k) {
            const Batch x = b.batch(k);
            EXPECT_EQ(x.rows, again.batch(k).rows);
            ASSERT_GE(x.size, 1);
            int64_t c = 0, lo = 1 << 30, hi = 0;
            for (int64_t r : x.rows) c += cost(r), lo = std::min(lo, cost(r)), hi = std::max(hi, cost(r));
            EXPECT_LE(std::abs(double(c) - double(total) / double(nb)), 2.0 * double(longest)) << "batch " << k;
            seen.insert(seen.end(), x.rows.begin(), x.rows.end());
            if (hi < shortest_hi) shortest_hi = hi, shortest_rows = x.size;
            if (lo > longest_lo) longest_lo = lo, longest_rows = x.size;
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int64_t> all(size_t(data.n));
        std::iota(all.begin(), all.end(), int64_t(0));
        EXPECT_EQ(seen, all) << "epoch " << epoch;
        // the batch of the shortest pairs holds over 4/3 the rows of the batch of the longest
        // (costs here run 1 to 12, a batch ~60: about 9-10 rows of pairs up to 6 against 5-6 of 10-12)
        ASSERT_LT(shortest_hi, longest_lo);
        EXPECT_GT(3 * shortest_rows, 4 * longest_rows);
    }
    Batcher no_pool(data, {.batch_size = 1, .shuffle = false, .batch_tokens = 1});  // one row per batch at most
    EXPECT_EQ(no_pool.num_batches(), data.n);
    EXPECT_THROW(Batcher(data, {.batch_size = 1, .batch_tokens = -1}), Error);
}

TEST(Batcher, RejectsANegativeBucketPool) {
    const NmtArrays data = varied(5);
    EXPECT_THROW(Batcher(data, {.batch_size = 2, .bucket_pool = -1}), Error);
}

}  // namespace
}  // namespace qkv::data
