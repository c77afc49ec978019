#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Random number i of a stream is a pure function of (seed, counter),
// so any thread can compute any element and results never depend on the thread count.
// Header-only so kernels (dropout in flash attention) can regenerate masks in place.
#include <cmath>
#include <cstdint>

namespace qkv::philox {

struct U32x4 {
    uint32_t v[4];
};

/// Ten rounds of Philox4x32 on counter (c0..c3) with key (k0, k1).
inline U32x4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                        uint32_t k1) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int r = 0; r < 10; ++r) {
        const uint64_t p0 = uint64_t(kM0) * c0;
        const uint64_t p1 = uint64_t(kM1) * c2;
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = uint32_t(p1);
        c2 = n2;
        c3 = uint32_t(p0);
        k0 += kW0;
        k1 += kW1;
    }
    return {{c0, c1, c2, c3}};
}

/// 32 random bits number `index` of stream (seed, stream): counter = (index, stream), key = seed.
/// Each Philox call yields 4 words; word index%4 of block index/4 is returned.
inline uint32_t bits(uint64_t seed, uint64_t stream, uint64_t index) {
    const uint64_t block = index >> 2;
    const U32x4 r = philox4x32(uint32_t(block), uint32_t(block >> 32), uint32_t(stream),
                               uint32_t(stream >> 32), uint32_t(seed), uint32_t(seed >> 32));
    return r.v[index & 3];
}

/// Uniform float in [0, 1) with 24 random bits.
inline float uniform01(uint32_t b) { return float(b >> 8) * (1.0f / 16777216.0f); }
/// Uniform double in [0, 1) from two words (53 bits).
inline double uniform01d(uint32_t hi, uint32_t lo) {
    const uint64_t x = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
    return double(x & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace qkv::philox
