// PyRandom and splits (data/split.h). MT19937 follows the reference mt19937ar.c (2002), which is
// what CPython's _randommodule.c embeds; getrandbits/_randbelow follow CPython's Lib/random.py.
#include "qkv/data/split.h"

#include <numeric>

#include "qkv/core/error.h"

namespace qkv::data {
namespace {
constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;

std::vector<uint32_t> int_words(std::vector<uint32_t> w) {  // drop leading (high) zero words
    while (w.size() > 1 && w.back() == 0) w.pop_back();
    return w;
}
}  // namespace

PyRandom::PyRandom(uint64_t seed)
    : PyRandom(int_words({uint32_t(seed), uint32_t(seed >> 32)})) {}

void PyRandom::init_genrand(uint32_t s) {
    mt_[0] = s;
    for (mti_ = 1; mti_ < kN; ++mti_)
        mt_[mti_] = 1812433253U * (mt_[mti_ - 1] ^ (mt_[mti_ - 1] >> 30)) + uint32_t(mti_);
}

PyRandom::PyRandom(const std::vector<uint32_t>& key) {
    QKV_CHECK(!key.empty(), "PyRandom: empty seed key");
    init_genrand(19650218U);
    int i = 1;
    size_t j = 0;
    for (size_t k = std::max<size_t>(kN, key.size()); k; --k) {
        mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + uint32_t(j);
        ++i;
        ++j;
        if (i >= kN) {
            mt_[0] = mt_[kN - 1];
            i      = 1;
        }
        if (j >= key.size()) j = 0;
    }
    for (int k = kN - 1; k; --k) {
        mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - uint32_t(i);
        ++i;
        if (i >= kN) {
            mt_[0] = mt_[kN - 1];
            i      = 1;
        }
    }
    mt_[0] = 0x80000000U;  // MSB is 1, assuring a non-zero initial array
    mti_   = kN;
}

uint32_t PyRandom::next_u32() {
    if (mti_ >= kN) {
        int kk = 0;
        auto twist = [&](uint32_t y) { return (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U); };
        for (; kk < kN - kM; ++kk)
            mt_[kk] = mt_[kk + kM] ^ twist((mt_[kk] & kUpper) | (mt_[kk + 1] & kLower));
        for (; kk < kN - 1; ++kk)
            mt_[kk] = mt_[kk + (kM - kN)] ^ twist((mt_[kk] & kUpper) | (mt_[kk + 1] & kLower));
        mt_[kN - 1] = mt_[kM - 1] ^ twist((mt_[kN - 1] & kUpper) | (mt_[0] & kLower));
        mti_        = 0;
    }
    uint32_t y = mt_[mti_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

uint64_t PyRandom::getrandbits(int k) {
    QKV_CHECK(k >= 0 && k <= 64, "PyRandom::getrandbits: k = ", k, " outside [0, 64]");
    if (k == 0) return 0;
    if (k <= 32) return next_u32() >> (32 - k);
    // CPython fills 32-bit words least significant first; the last word keeps its top bits.
    const uint64_t lo = next_u32();
    const uint64_t hi = next_u32() >> (64 - k);
    return lo | (hi << 32);
}

uint64_t PyRandom::randbelow(uint64_t n) {
    QKV_CHECK(n >= 1, "PyRandom::randbelow: n must be >= 1");
    const int k = 64 - __builtin_clzll(n);  // n.bit_length()
    uint64_t r = getrandbits(k);
    while (r >= n) r = getrandbits(k);
    return r;
}

double PyRandom::random() {
    const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch) {
    QKV_CHECK(n >= 0, "shuffled_indices: negative n = ", n);
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), int64_t(0));
    PyRandom r(int_words({uint32_t(seed), uint32_t(seed >> 32), uint32_t(epoch),
                          uint32_t(epoch >> 32)}));
    r.shuffle(idx);
    return idx;
}

SplitIndices shuffled_split(int64_t n, int64_t n_valid, int64_t n_test, uint64_t seed) {
    QKV_CHECK(n_valid >= 0 && n_test >= 0, "shuffled_split: negative split size (valid ", n_valid,
              ", test ", n_test, ")");
    QKV_CHECK(n >= n_valid + n_test, "shuffled_split: ", n, " examples cannot hold ", n_valid,
              " validation + ", n_test, " test examples");
    const auto idx  = shuffled_indices(n, seed);
    const auto cut1 = idx.begin() + (n - n_valid - n_test), cut2 = idx.begin() + (n - n_test);
    return {{idx.begin(), cut1}, {cut1, cut2}, {cut2, idx.end()}};
}

SplitIndices anchor_split(int64_t n, uint64_t seed) { return shuffled_split(n, 2000, 5000, seed); }

}  // namespace qkv::data
