// Caching allocator: reuse across sizes, the cap on cached bytes, eviction, content and alignment,
// concurrent use. Each test restores the global caching flag and limit it changes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/allocator.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

/// Restores the cache limit and caching on scope exit, and starts from an empty cache.
struct AllocatorScope {
    int64_t limit = allocator_cache_limit();
    AllocatorScope() { empty_cache(); }
    ~AllocatorScope() {
        set_allocator_caching(true);
        set_allocator_cache_limit(limit);
    }
};

int64_t vm_rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
    return -1;
}

TEST(Allocator, LargeBlocksOfOtherSizesReuseAFreedRange) {
    AllocatorScope scope;
    set_allocator_cache_limit(int64_t(1) << 30);
    deallocate(allocate(8 * kMiB), 0);
    reset_allocator_stats();
    // Sizes that the old exact-size bins kept apart: all fit the freed 8 MiB range.
    for (int64_t n : {3 * kMiB + 5, 5 * kMiB, 7 * kMiB + 4096, 8 * kMiB, 2 * kMiB}) deallocate(allocate(n), 0);
    // Two blocks at once are split from the one range, and merge back when freed.
    void* a = allocate(3 * kMiB);
    void* b = allocate(5 * kMiB);
    EXPECT_NE(a, b);
    deallocate(a, 0);
    deallocate(b, 0);
    deallocate(allocate(8 * kMiB), 0);
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.allocs, 8);
    EXPECT_EQ(s.cache_hits, 8);
    EXPECT_EQ(s.system_allocs, 0);
    EXPECT_EQ(s.bytes_cached, 8 * kMiB);
    EXPECT_EQ(s.peak_reserved, 8 * kMiB);
    // Larger than any cached range: fresh memory.
    deallocate(allocate(9 * kMiB), 0);
    EXPECT_EQ(allocator_stats().system_allocs, 1);
}

TEST(Allocator, SmallBlocksReuseUpToTwiceTheirSize) {
    AllocatorScope scope;
    deallocate(allocate(4096), 0);
    reset_allocator_stats();
    deallocate(allocate(2048), 0);  // the 4,096 B block is <= 2 × 2,048: reused
    deallocate(allocate(1984), 0);  // 4,096 > 2 × 1,984: fresh
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.cache_hits, 1);
    EXPECT_EQ(s.system_allocs, 1);
}

TEST(Allocator, CachedBytesNeverExceedTheLimitAndEvictionsAreCounted) {
    AllocatorScope scope;
    const int64_t limit = 5 * kMiB;
    set_allocator_cache_limit(limit);
    reset_allocator_stats();
    std::vector<void*> blocks;
    std::vector<int64_t> sizes;
    for (int i = 0; i < 12; ++i) {
        const int64_t n = i % 3 == 0 ? 200 * 1024 : (1 + i % 4) * kMiB + 64 * 1024 * i;
        blocks.push_back(allocate(n));
        sizes.push_back(n);
        std::memset(blocks.back(), i, size_t(n));
    }
    const int64_t in_use = allocator_stats().bytes_in_use;
    for (size_t i = 0; i < blocks.size(); ++i) {
        deallocate(blocks[(i * 5) % blocks.size()], 0);  // freed in a scattered order
        EXPECT_LE(allocator_stats().bytes_cached, limit) << "after " << i + 1 << " deallocations";
    }
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.bytes_in_use, 0);
    EXPECT_GT(s.evictions, 0);
    // Everything freed is either still cached or was evicted.
    EXPECT_EQ(s.bytes_cached + s.bytes_evicted, in_use);
    EXPECT_GE(s.bytes_cached, limit - 2 * kMiB);  // eviction cuts at most the excess rounded to 2 MiB
    // Lowering the limit evicts at once.
    set_allocator_cache_limit(0);
    EXPECT_EQ(allocator_stats().bytes_cached, 0);
    EXPECT_THROW(set_allocator_cache_limit(-1), Error);
}

TEST(Allocator, EvictedLargeMemoryLeavesTheProcess) {
    AllocatorScope scope;
    set_allocator_cache_limit(int64_t(1) << 30);
    const int64_t n = 64 * kMiB;
    char* p = static_cast<char*>(allocate(n));
    std::memset(p, 1, size_t(n));
    deallocate(p, 0);
    const int64_t cached_rss = vm_rss_bytes();
    ASSERT_GT(cached_rss, 0);
    set_allocator_cache_limit(0);
    const int64_t after = vm_rss_bytes();
    EXPECT_LE(after, cached_rss - 48 * kMiB) << "VmRSS " << cached_rss << " -> " << after;
}

TEST(Allocator, BlocksAreAlignedAndKeepTheirContents) {
    AllocatorScope scope;
    set_allocator_cache_limit(int64_t(1) << 30);
    const std::vector<int64_t> sizes = {0, 1, 63, 64, 1000, 70000, kMiB - 1, kMiB, 3 * kMiB + 5, 17 * kMiB};
    for (int round = 0; round < 3; ++round) {  // later rounds are served from the cache
        std::vector<unsigned char*> ps;
        for (size_t i = 0; i < sizes.size(); ++i) {
            auto* p = static_cast<unsigned char*>(allocate(sizes[i]));
            ASSERT_NE(p, nullptr);
            EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << sizes[i];
            if (sizes[i] >= kMiB) {
                EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (64 * 1024), 0u) << sizes[i];
            }
            std::memset(p, int(i + 1), size_t(sizes[i]));
            ps.push_back(p);
        }
        for (size_t i = 0; i < sizes.size(); ++i)  // no block overlaps another
            for (int64_t k = 0; k < sizes[i]; k += 4093)
                ASSERT_EQ(ps[i][k], i + 1) << "size " << sizes[i] << " offset " << k;
        for (size_t i = 0; i < sizes.size(); i += 2) deallocate(ps[i], 0);
        for (size_t i = 1; i < sizes.size(); i += 2) deallocate(ps[i], 0);
    }
    EXPECT_EQ(allocator_stats().bytes_in_use, 0);
}

TEST(Allocator, CachingOffReturnsEveryBlock) {
    AllocatorScope scope;
    set_allocator_caching(false);
    reset_allocator_stats();
    for (int i = 0; i < 3; ++i) {
        deallocate(allocate(2 * kMiB), 0);
        deallocate(allocate(100), 0);
    }
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.system_allocs, 6);
    EXPECT_EQ(s.cache_hits, 0);
    EXPECT_EQ(s.bytes_cached, 0);
}

TEST(Allocator, ManyThreadsAllocateAndFreeConcurrently) {
    AllocatorScope scope;
    const int64_t limit = 32 * kMiB;  // small enough that eviction runs concurrently too
    set_allocator_cache_limit(limit);
    const int64_t in_use_before = allocator_stats().bytes_in_use;
    constexpr int kThreads = 8, kIters = 300;
    constexpr int64_t kStride = 509;  // bytes between written and checked positions
    std::vector<int> bad(kThreads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
        pool.emplace_back([t, &bad] {
            std::mt19937 rng{uint32_t(t)};
            std::vector<std::pair<unsigned char*, int64_t>> held;
            for (int i = 0; i < kIters; ++i) {
                const int64_t n = rng() % 8 == 0 ? int64_t(kMiB + rng() % kMiB) : int64_t(1 + rng() % 70000);
                auto* p = static_cast<unsigned char*>(allocate(n));
                for (int64_t j = 0; j < n; j += kStride) p[j] = static_cast<unsigned char>(t + 1);
                p[n - 1] = static_cast<unsigned char>(t + 1);
                held.emplace_back(p, n);
                if (held.size() > 6 || rng() % 2) {
                    const size_t k = rng() % held.size();
                    auto [q, m] = held[k];
                    for (int64_t j = 0; j < m; j += kStride) bad[size_t(t)] += q[j] != t + 1;
                    bad[size_t(t)] += q[m - 1] != t + 1;
                    deallocate(q, 0);
                    held.erase(held.begin() + long(k));
                }
            }
            for (auto [q, m] : held) deallocate(q, 0);
        });
    for (auto& th : pool) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[size_t(t)], 0) << "thread " << t;
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.bytes_in_use, in_use_before);
    EXPECT_LE(s.bytes_cached, limit);
}

}  // namespace
}  // namespace qkv
