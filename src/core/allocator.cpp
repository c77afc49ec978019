// Caching allocator (see include/qkv/core/allocator.h). Free blocks are kept in a size-ordered
// multimap; a request takes the smallest cached block of at least its rounded size and at most
// twice it (best fit, bounded waste). Sizes round up to 64 B below 64 KiB and to 4 KiB above, so
// the shapes of a training step map to a small set of classes that hit the cache every step.
// A side table records each live block's true size (a cached block may be larger than asked).
#include "qkv/core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr int64_t kHugeAlign = int64_t(2) << 20;  // 2 MiB: transparent huge page size

struct Cache {
    std::mutex                         mu;
    std::multimap<int64_t, void*>      free_blocks;
    std::unordered_map<void*, int64_t> live;  // pointer -> block size
    AllocatorStats                     stats;
    bool                               caching = true;
    Cache() {
        const char* env = std::getenv("QKV_ALLOCATOR_CACHE");
        if (env && env[0] == '0') caching = false;
    }
};

Cache& cache() {
    static Cache* c = new Cache();  // never destroyed: tensors may outlive static destructors
    return *c;
}

int64_t round_size(int64_t n) {
    if (n <= 0) return 64;
    if (n < (int64_t(64) << 10)) return (n + 63) & ~int64_t(63);
    return (n + 4095) & ~int64_t(4095);
}

void* system_alloc(int64_t n) {
    const int64_t align = n >= kHugeAlign ? kHugeAlign : 64;
    const int64_t size  = (n + align - 1) / align * align;
    void* p = std::aligned_alloc(static_cast<size_t>(align), size_t(size));
    QKV_CHECK(p != nullptr, "allocate: out of memory requesting ", n, " bytes");
    if (n >= kHugeAlign) madvise(p, size_t(size), MADV_HUGEPAGE);
    return p;
}

}  // namespace

void* allocate(int64_t nbytes) {
    const int64_t n = round_size(nbytes);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.stats.allocs;
    void* p = nullptr;
    int64_t got = n;
    auto it = c.caching ? c.free_blocks.lower_bound(n) : c.free_blocks.end();
    if (it != c.free_blocks.end() && it->first <= 2 * n) {
        p   = it->second;
        got = it->first;
        c.free_blocks.erase(it);
        c.stats.bytes_cached -= got;
        ++c.stats.cache_hits;
    } else {
        ++c.stats.system_allocs;
        p = system_alloc(n);
    }
    c.live[p] = got;
    c.stats.bytes_in_use += got;
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.bytes_in_use);
    return p;
}

void deallocate(void* p, int64_t) {
    if (!p) return;
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.live.find(p);
    QKV_ASSERT(it != c.live.end());
    const int64_t size = it->second;
    c.live.erase(it);
    c.stats.bytes_in_use -= size;
    if (c.caching) {
        c.free_blocks.emplace(size, p);
        c.stats.bytes_cached += size;
    } else {
        std::free(p);
    }
}

AllocatorStats allocator_stats() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    return c.stats;
}

void reset_allocator_stats() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocs = c.stats.cache_hits = c.stats.system_allocs = 0;
    c.stats.peak_bytes = c.stats.bytes_in_use;
}

void empty_cache() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto& [sz, p] : c.free_blocks) std::free(p);
    c.free_blocks.clear();
    c.stats.bytes_cached = 0;
}

void set_allocator_caching(bool on) {
    Cache& c = cache();
    {
        std::lock_guard<std::mutex> lock(c.mu);
        c.caching = on;
    }
    if (!on) empty_cache();
}

}  // namespace qkv
