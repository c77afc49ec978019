#pragma once
// Seedable random source for qkv (parameter init, dropout, shuffling).
// Algorithm: Philox4x32-10 (core/philox.h). A Generator is (seed, offset): a call that needs n
// random numbers reserves counters [offset, offset + n) and element i uses counter offset + i, so
// the same seed gives the same numbers on any thread count.
#include <cstdint>

namespace qkv {

class Generator {
public:
    explicit Generator(uint64_t seed = 0) : seed_(seed) {}
    /// Restarts the stream: same seed -> same sequence.
    void manual_seed(uint64_t seed) {
        seed_   = seed;
        offset_ = 0;
    }
    uint64_t seed() const { return seed_; }
    /// Number of counters consumed so far (saved in checkpoints for exact resume).
    uint64_t offset() const { return offset_; }
    void set_offset(uint64_t off) { offset_ = off; }
    /// Reserves n counters and returns the first. Callers compute element i from counter start + i.
    uint64_t reserve(uint64_t n) {
        const uint64_t start = offset_;
        offset_ += (n + 3) & ~uint64_t(3);  // whole Philox blocks keep streams aligned
        return start;
    }
    /// One uniform integer in [0, n) (for shuffles); consumes one block.
    uint64_t randint(uint64_t n);
    /// One uniform double in [0, 1).
    double uniform();

private:
    uint64_t seed_   = 0;
    uint64_t offset_ = 0;
};

/// The process-wide generator used when an op is given none (seed it with manual_seed).
Generator& default_generator();
/// Seeds the default generator (like torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace qkv
