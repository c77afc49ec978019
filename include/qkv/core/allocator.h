#pragma once
// Caching allocator: freed blocks are kept in size-class bins and reused, so a steady-state
// training step makes no fresh large mmaps (first touch of fresh 4 KiB pages costs ~0.35 GB/s on
// the project's machines). Blocks >= 2 MiB are 2 MiB-aligned and advised MADV_HUGEPAGE.
#include <cstddef>
#include <cstdint>

namespace qkv {

struct AllocatorStats {
    int64_t allocs         = 0;  // calls to allocate()
    int64_t cache_hits     = 0;  // served from the cache
    int64_t system_allocs  = 0;  // fresh memory from the system
    int64_t bytes_in_use   = 0;
    int64_t bytes_cached   = 0;  // free blocks kept for reuse
    int64_t peak_bytes     = 0;  // max of in_use
};

/// 64-byte aligned memory of at least nbytes (nbytes 0 gives a valid unique pointer).
void* allocate(int64_t nbytes);
void  deallocate(void* p, int64_t nbytes);
AllocatorStats allocator_stats();
void reset_allocator_stats();
/// Returns cached blocks to the system.
void empty_cache();
/// Enables or disables caching (QKV_ALLOCATOR_CACHE=0 disables at start-up); for benchmarks.
void set_allocator_caching(bool on);

}  // namespace qkv
