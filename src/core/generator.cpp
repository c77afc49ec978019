// Generator: Philox-based (seed, offset) stream; see include/qkv/core/generator.h.
#include "qkv/core/generator.h"

#include "qkv/core/philox.h"

namespace qkv {

uint64_t Generator::randint(uint64_t n) {
    // 64 random bits from one block; modulo bias is < n / 2^64, negligible for shuffles.
    const uint64_t c = reserve(4);
    const uint64_t x = (uint64_t(philox::bits(seed_, 1, c)) << 32) | philox::bits(seed_, 1, c + 1);
    return n == 0 ? 0 : x % n;
}

double Generator::uniform() {
    const uint64_t c = reserve(4);
    return philox::uniform01d(philox::bits(seed_, 1, c), philox::bits(seed_, 1, c + 1));
}

Generator& default_generator() {
    static Generator g(0);
    return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace qkv
