#pragma once
// Seeded shuffles and train/valid/test splits that are bit-exact with CPython's random module,
// so the quality anchor's split (random.Random(0).shuffle, quality_anchor.md §2.1 step 4) is
// reproduced without Python, and every permutation qkv draws can be recomputed in Python.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace qkv::data {

/// CPython's random.Random: MT19937 (Matsumoto & Nishimura 1998) seeded with init_by_array, and
/// the integer methods shuffle() uses. Bit-exact with CPython 3.2+ (checked against 3.11).
class PyRandom {
public:
    /// random.Random(seed) for a non-negative integer: the key is seed's 32-bit words, least
    /// significant first, without leading zero words ([0] for 0).
    explicit PyRandom(uint64_t seed = 0);
    /// init_by_array(key) (key non-empty): random.Random(n) where key holds n's 32-bit words.
    explicit PyRandom(const std::vector<uint32_t>& key);

    /// One 32-bit output (genrand_uint32).
    uint32_t next_u32();
    /// random.getrandbits(k), 0 <= k <= 64.
    uint64_t getrandbits(int k);
    /// random._randbelow(n) for n >= 1: getrandbits(n.bit_length()) with rejection.
    uint64_t randbelow(uint64_t n);
    /// random.random(): 53-bit double in [0, 1).
    double random();

    /// random.shuffle(x): for i = n-1 down to 1, swap x[i] with x[randbelow(i + 1)].
    template <class T>
    void shuffle(std::vector<T>& x) {
        for (std::size_t i = x.size(); i-- > 1;) std::swap(x[i], x[std::size_t(randbelow(i + 1))]);
    }

private:
    void init_genrand(uint32_t s);
    uint32_t mt_[624];
    int mti_ = 625;
};

/// Python's list(range(n)) shuffled by random.Random(seed) + (epoch << 64): epoch 0 is exactly
/// random.Random(seed).shuffle; each epoch is an independent stream, so a run resumed at any
/// epoch draws the same order. Python: r = random.Random(seed + (epoch << 64)); r.shuffle(idx).
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch = 0);

struct SplitIndices {
    std::vector<int64_t> train, valid, test;  // each in shuffled order
};

/// idx = shuffled_indices(n, seed); test = idx[n - n_test:], valid = idx[n - n_test - n_valid :
/// n - n_test], train = the rest (Python: idx[-n_test:], idx[-(n_test+n_valid):-n_test],
/// idx[:-(n_test+n_valid)]). Throws qkv::Error when n < n_valid + n_test or a size is negative.
SplitIndices shuffled_split(int64_t n, int64_t n_valid, int64_t n_test, uint64_t seed);

/// The quality anchor's split: shuffled_split(n, 2000, 5000, seed). For the full fra.txt
/// (n = 167,130, seed 0): 160,130 / 2,000 / 5,000 with the anchor's sha256 checksums.
SplitIndices anchor_split(int64_t n, uint64_t seed = 0);

}  // namespace qkv::data
