#pragma once
// Caching allocator. Freed memory is kept and reused, so a steady-state training step makes no
// fresh system allocations: first touch of fresh memory is very slow on the project's machines
// (measured 0.2–0.3 GB/s with 4 KiB pages and 0.1–1.2 GB/s with transparent huge pages, against
// 2–4 GB/s for writing memory already touched), so a 74 MB logits block taken fresh costs
// ~0.3 s, a third of a full-vocabulary step.
//
// Two pools, both under one mutex (thread-safe):
//  - small (< 1 MiB): sizes round up to 64 B (< 64 KiB) or 4 KiB; freed blocks are binned by size
//    and a request takes the smallest cached block of at least its size and at most twice it.
//  - large (>= 1 MiB): sizes round up to 64 KiB and come from one reserved address range (the
//    arena: 256 GiB of address space, MAP_NORESERVE, MADV_HUGEPAGE; pages exist only once
//    touched). Free memory is kept as address ranges: a freed block merges with free neighbours,
//    and a request takes the best-fitting free range and splits off the rest (as PyTorch's CUDA
//    caching allocator splits its large blocks). When nothing fits, the free range at the arena's
//    top grows by the shortfall only. Shapes that vary from step to step (batches trimmed to their
//    longest row, length buckets) thus reuse the same pages instead of each new size adding a
//    block. Peak RSS after ~30 steps of the anchor / full presets: 1.65 / 2.17 GiB with the old
//    exact-size bins (2.2 / 4.0 GiB after 20 minutes); 1.36 GiB (anchor, 1 GiB cap) with one
//    mmap per block, which never merge (2 MiB-aligned mappings are not adjacent); 0.68 / 0.84 GiB
//    with the arena, which took 1 fresh block in steps 30–40 of the anchor (bench/RESULTS_anchor.md).
//
// Cap: the cached (free) bytes of both pools never exceed a limit after a deallocation; beyond
// it the least recently freed memory is released (for large ranges only the part needed, from the
// range's end, in 2 MiB steps, with MADV_DONTNEED, so RSS really drops; the address range becomes
// a hole that later fresh requests reuse). Default 512 MiB: in 30-step runs the anchor preset
// kept at most 409 MiB cached (no eviction); the full preset reached the cap (35 evictions) with
// the same 498 fresh allocations as under a 1 GiB cap, so the cap cost no fresh memory there,
// and the footprint stays at most in use + 512 MiB (peak in use 0.41 / 0.48 GiB).
// QKV_ALLOCATOR_CACHE_LIMIT=<bytes>[K|M|G] overrides it at start-up,
// set_allocator_cache_limit() at run time. QKV_ALLOCATOR_CACHE=0 disables caching.
// Blocks that do not fit the arena's remaining address space come from plain mmap and are
// unmapped when freed (never cached).
#include <cstddef>
#include <cstdint>

namespace qkv {

struct AllocatorStats {
    int64_t allocs         = 0;  // calls to allocate()
    int64_t cache_hits     = 0;  // served from the cache
    int64_t system_allocs  = 0;  // served with fresh memory (not cached)
    int64_t bytes_fresh    = 0;  // bytes of fresh memory handed out (each costs a first touch)
    int64_t evictions      = 0;  // cached blocks or range pieces released because of the cap
    int64_t bytes_evicted  = 0;  // their bytes
    int64_t bytes_in_use   = 0;  // live blocks (rounded sizes)
    int64_t bytes_cached   = 0;  // free memory kept for reuse
    int64_t peak_bytes     = 0;  // max of bytes_in_use
    int64_t peak_cached    = 0;  // max of bytes_cached
    int64_t peak_reserved  = 0;  // max of bytes_in_use + bytes_cached (the allocator's footprint)
};

/// 64-byte aligned memory of at least nbytes (nbytes 0 gives a valid unique pointer); blocks of
/// 1 MiB and more are 64 KiB-aligned. Throws qkv::Error when the system has no memory.
void* allocate(int64_t nbytes);
/// Returns p (from allocate; nullptr is ignored) to the cache; nbytes is not used.
void  deallocate(void* p, int64_t nbytes);
/// Counters since the last reset_allocator_stats(); bytes_in_use / bytes_cached are current.
AllocatorStats allocator_stats();
/// Zeroes the counters; peaks restart from the current in-use / cached / reserved bytes.
void reset_allocator_stats();
/// Returns all cached memory to the system.
void empty_cache();
/// Enables or disables caching (QKV_ALLOCATOR_CACHE=0 disables at start-up); for benchmarks.
void set_allocator_caching(bool on);
/// Sets the cap on cached bytes (>= 0; throws qkv::Error otherwise) and evicts down to it.
void set_allocator_cache_limit(int64_t bytes);
/// The current cap on cached bytes.
int64_t allocator_cache_limit();

}  // namespace qkv
