// Caching allocator (design and measurements: include/qkv/core/allocator.h).
// Cached memory is a list of entries in least-recently-freed order (front = oldest), indexed by
// size for the small pool and by address and by size for the large pool's free ranges. A side
// table records each live block's true size and pool (a cached small block may be larger than
// asked).
#include "qkv/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr int64_t kHugePage   = int64_t(2) << 20;   // transparent huge page size
constexpr int64_t kLargeMin   = int64_t(1) << 20;   // requests from here on use the large pool
constexpr int64_t kLargeGrain = int64_t(64) << 10;  // large sizes and splits are multiples of it
constexpr int64_t kDefaultLimit = int64_t(512) << 20;
constexpr int64_t kArenaReserve[] = {int64_t(256) << 30, int64_t(32) << 30};  // address space tried

struct Entry {
    char*   p;
    int64_t size;
    bool    large;
};
using Lru = std::list<Entry>;

enum class Kind : uint8_t { small, arena, mapped };

struct Live {
    int64_t size;
    Kind    kind;
};

/// Parses "<digits>[K|M|G]" (binary units); -1 when malformed.
int64_t parse_bytes(const char* s) {
    char* end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (end == s || v < 0) return -1;
    int64_t mult = 1;
    if (*end == 'K' || *end == 'k') mult = int64_t(1) << 10, ++end;
    else if (*end == 'M' || *end == 'm') mult = int64_t(1) << 20, ++end;
    else if (*end == 'G' || *end == 'g') mult = int64_t(1) << 30, ++end;
    if (*end != '\0') return -1;
    return int64_t(v) * mult;
}

struct Cache {
    std::mutex                         mu;
    Lru                                lru;          // every cached entry, oldest first
    std::map<std::pair<int64_t, char*>, Lru::iterator> small_by_size;
    std::map<char*, Lru::iterator>     large_by_addr;
    std::set<std::pair<int64_t, char*>> large_by_size;
    std::unordered_map<void*, Live>    live;
    // The large pool's address space: [arena, top) has been handed out at least once; holes are
    // released ranges below top (no pages behind them), reused before top grows.
    char*                              arena = nullptr;
    char*                              arena_end = nullptr;
    char*                              top = nullptr;
    std::map<char*, int64_t>           holes;
    std::set<std::pair<int64_t, char*>> holes_by_size;
    AllocatorStats                     stats;
    bool                               caching = true;
    int64_t                            limit   = kDefaultLimit;
    Cache() {
        for (int64_t reserve : kArenaReserve) {
            void* raw = mmap(nullptr, size_t(reserve + kHugePage), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (raw == MAP_FAILED) continue;
            arena = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + uintptr_t(kHugePage - 1)) &
                                            ~uintptr_t(kHugePage - 1));
            arena_end = arena + reserve;
            top = arena;
            madvise(arena, size_t(reserve), MADV_HUGEPAGE);
            break;
        }
        const char* env = std::getenv("QKV_ALLOCATOR_CACHE");
        if (env && env[0] == '0') caching = false;
        if (const char* lim = std::getenv("QKV_ALLOCATOR_CACHE_LIMIT")) {
            const int64_t v = parse_bytes(lim);
            if (v >= 0) limit = v;
            else
                std::fprintf(stderr, "qkv: ignoring QKV_ALLOCATOR_CACHE_LIMIT=%s (expected <bytes>[K|M|G]); "
                                     "cache limit stays %lld bytes\n", lim, static_cast<long long>(limit));
        }
    }
};

Cache& cache() {
    static Cache* c = new Cache();  // never destroyed: tensors may outlive static destructors
    return *c;
}

int64_t round_small(int64_t n) {
    if (n <= 0) return 64;
    if (n < (int64_t(64) << 10)) return (n + 63) & ~int64_t(63);
    return (n + 4095) & ~int64_t(4095);
}

void* small_system_alloc(int64_t n) {
    void* p = std::aligned_alloc(64, size_t(n));
    QKV_CHECK(p != nullptr, "allocate: out of memory requesting ", n, " bytes");
    return p;
}

/// Fresh 2 MiB-aligned anonymous memory of n bytes (a multiple of kLargeGrain) outside the arena
/// (used only when the arena's address space is exhausted or could not be reserved).
char* mapped_alloc(int64_t n) {
    const size_t span = size_t(n + kHugePage);
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    QKV_CHECK(raw != MAP_FAILED, "allocate: out of memory requesting ", n, " bytes");
    char* base = static_cast<char*>(raw);
    char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + uintptr_t(kHugePage - 1)) &
                                      ~uintptr_t(kHugePage - 1));
    if (p > base) munmap(base, size_t(p - base));
    char* end = p + n;
    if (base + span > end) munmap(end, size_t(base + span - end));
    madvise(p, size_t(n), MADV_HUGEPAGE);
    return p;
}

// --- cached-entry bookkeeping (caller holds the mutex) ---

void add_small(Cache& c, char* p, int64_t size) {
    auto it = c.lru.insert(c.lru.end(), Entry{p, size, false});
    c.small_by_size.emplace(std::make_pair(size, p), it);
    c.stats.bytes_cached += size;
}

using SmallIndex = std::map<std::pair<int64_t, char*>, Lru::iterator>;

void remove_small(Cache& c, SmallIndex::iterator sit) {
    c.stats.bytes_cached -= sit->first.first;
    c.lru.erase(sit->second);
    c.small_by_size.erase(sit);
}

void add_large_range(Cache& c, char* p, int64_t size, Lru::iterator pos) {
    auto it = c.lru.insert(pos, Entry{p, size, true});
    c.large_by_addr.emplace(p, it);
    c.large_by_size.emplace(size, p);
    c.stats.bytes_cached += size;
}

void remove_large_range(Cache& c, std::map<char*, Lru::iterator>::iterator ait) {
    const Entry e = *ait->second;
    c.large_by_size.erase({e.size, e.p});
    c.lru.erase(ait->second);
    c.large_by_addr.erase(ait);
    c.stats.bytes_cached -= e.size;
}

/// Puts a freed large block [p, p + size) into the cache, merged with adjacent free ranges; the
/// merged range counts as just freed.
void free_large(Cache& c, char* p, int64_t size) {
    auto next = c.large_by_addr.find(p + size);
    if (next != c.large_by_addr.end()) {
        size += next->second->size;
        remove_large_range(c, next);
    }
    auto prev = c.large_by_addr.lower_bound(p);
    if (prev != c.large_by_addr.begin()) {
        --prev;
        if (prev->first + prev->second->size == p) {
            p = prev->first;
            size += prev->second->size;
            remove_large_range(c, prev);
        }
    }
    add_large_range(c, p, size, c.lru.end());
}

/// Gives the pages of [p, p + size) (arena memory, not cached) back to the system and makes the
/// range a hole, merged with adjacent holes; a hole that reaches top lowers top instead.
void release_arena(Cache& c, char* p, int64_t size) {
    madvise(p, size_t(size), MADV_DONTNEED);
    auto next = c.holes.find(p + size);
    if (next != c.holes.end()) {
        size += next->second;
        c.holes_by_size.erase({next->second, next->first});
        c.holes.erase(next);
    }
    auto prev = c.holes.lower_bound(p);
    if (prev != c.holes.begin()) {
        --prev;
        if (prev->first + prev->second == p) {
            p = prev->first;
            size += prev->second;
            c.holes_by_size.erase({prev->second, prev->first});
            c.holes.erase(prev);
        }
    }
    if (p + size == c.top) {
        c.top = p;
        return;
    }
    c.holes.emplace(p, size);
    c.holes_by_size.emplace(size, p);
}

/// n bytes of the arena not cached (fresh pages, or nullptr when the arena is exhausted): the
/// free range that ends at top grown by the shortfall, else the best-fitting hole, else top.
char* arena_fresh(Cache& c, int64_t n) {
    if (c.top != c.arena) {
        auto last = c.large_by_addr.lower_bound(c.top);
        if (last != c.large_by_addr.begin()) {
            --last;
            const int64_t r = last->second->size;
            char* a = last->first;
            if (a + r == c.top && a + n <= c.arena_end) {
                remove_large_range(c, last);
                c.top = a + n;
                c.stats.bytes_fresh += n - r;
                return a;
            }
        }
    }
    auto h = c.holes_by_size.lower_bound({n, nullptr});
    if (h != c.holes_by_size.end()) {
        const auto [hs, hp] = *h;
        c.holes_by_size.erase(h);
        c.holes.erase(hp);
        if (hs > n) {
            c.holes.emplace(hp + n, hs - n);
            c.holes_by_size.emplace(hs - n, hp + n);
        }
        c.stats.bytes_fresh += n;
        return hp;
    }
    if (c.arena_end - c.top < n) return nullptr;
    char* p = c.top;
    c.top += n;
    c.stats.bytes_fresh += n;
    return p;
}

/// Releases the least recently freed memory until bytes_cached <= limit.
void evict_to_limit(Cache& c) {
    while (c.stats.bytes_cached > c.limit) {
        const Entry e = c.lru.front();
        const int64_t excess = c.stats.bytes_cached - c.limit;
        ++c.stats.evictions;
        if (!e.large) {
            c.stats.bytes_evicted += e.size;
            remove_small(c, c.small_by_size.find({e.size, e.p}));
            std::free(e.p);
            continue;
        }
        // Release the range's tail: whole 2 MiB pages covering the excess, or all of it.
        const int64_t cut = std::min(e.size, (excess + kHugePage - 1) / kHugePage * kHugePage);
        c.stats.bytes_evicted += cut;
        auto ait = c.large_by_addr.find(e.p);
        const auto pos = std::next(ait->second);
        remove_large_range(c, ait);
        if (cut < e.size) add_large_range(c, e.p, e.size - cut, pos);
        release_arena(c, e.p + (e.size - cut), cut);
    }
}

void note_peaks(Cache& c) {
    c.stats.peak_bytes    = std::max(c.stats.peak_bytes, c.stats.bytes_in_use);
    c.stats.peak_cached   = std::max(c.stats.peak_cached, c.stats.bytes_cached);
    c.stats.peak_reserved = std::max(c.stats.peak_reserved, c.stats.bytes_in_use + c.stats.bytes_cached);
}

}  // namespace

void* allocate(int64_t nbytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.stats.allocs;
    char* p = nullptr;
    int64_t got = 0;
    Kind kind = nbytes >= kLargeMin ? Kind::arena : Kind::small;
    if (kind == Kind::small) {
        const int64_t n = round_small(nbytes);
        got = n;
        auto it = c.caching ? c.small_by_size.lower_bound({n, nullptr}) : c.small_by_size.end();
        if (it != c.small_by_size.end() && it->first.first <= 2 * n) {
            p   = it->first.second;
            got = it->first.first;
            remove_small(c, it);
            ++c.stats.cache_hits;
        } else {
            ++c.stats.system_allocs;
            c.stats.bytes_fresh += n;
            p = static_cast<char*>(small_system_alloc(n));
        }
    } else {
        const int64_t n = (nbytes + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
        got = n;
        auto it = c.large_by_size.lower_bound({n, nullptr});
        if (it != c.large_by_size.end()) {
            // Best fit: take the block from the range's start, keep the rest in the range's place.
            const int64_t range = it->first;
            p = it->second;
            auto ait = c.large_by_addr.find(p);
            const auto pos = std::next(ait->second);
            remove_large_range(c, ait);
            if (range > n) add_large_range(c, p + n, range - n, pos);
            ++c.stats.cache_hits;
        } else {
            ++c.stats.system_allocs;
            p = arena_fresh(c, n);
            if (!p) {
                p = mapped_alloc(n);
                kind = Kind::mapped;
                c.stats.bytes_fresh += n;
            }
        }
    }
    c.live[p] = Live{got, kind};
    c.stats.bytes_in_use += got;
    note_peaks(c);
    return p;
}

void deallocate(void* ptr, int64_t) {
    if (!ptr) return;
    char* p = static_cast<char*>(ptr);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.live.find(p);
    QKV_ASSERT(it != c.live.end());
    const Live b = it->second;
    c.live.erase(it);
    c.stats.bytes_in_use -= b.size;
    if (b.kind == Kind::mapped) {  // outside the arena: never cached
        munmap(p, size_t(b.size));
        return;
    }
    if (!c.caching) {
        if (b.kind == Kind::arena) release_arena(c, p, b.size);
        else std::free(p);
        return;
    }
    if (b.kind == Kind::arena) free_large(c, p, b.size);
    else add_small(c, p, b.size);
    evict_to_limit(c);
    note_peaks(c);
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
    c.stats.evictions = c.stats.bytes_evicted = c.stats.bytes_fresh = 0;
    c.stats.peak_bytes    = c.stats.bytes_in_use;
    c.stats.peak_cached   = c.stats.bytes_cached;
    c.stats.peak_reserved = c.stats.bytes_in_use + c.stats.bytes_cached;
}

void empty_cache() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    for (const Entry& e : c.lru)
        if (!e.large) std::free(e.p);
    std::vector<std::pair<char*, int64_t>> ranges;
    for (const auto& [p, it] : c.large_by_addr) ranges.emplace_back(p, it->size);
    c.lru.clear();
    c.small_by_size.clear();
    c.large_by_addr.clear();
    c.large_by_size.clear();
    c.stats.bytes_cached = 0;
    for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) release_arena(c, it->first, it->second);
}

void set_allocator_caching(bool on) {
    Cache& c = cache();
    {
        std::lock_guard<std::mutex> lock(c.mu);
        c.caching = on;
    }
    if (!on) empty_cache();
}

void set_allocator_cache_limit(int64_t bytes) {
    QKV_CHECK(bytes >= 0, "set_allocator_cache_limit: bytes must be >= 0, got ", bytes);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.limit = bytes;
    evict_to_limit(c);
}

int64_t allocator_cache_limit() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    return c.limit;
}

}  // namespace qkv
