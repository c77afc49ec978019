// qkv::Error support: the abort path of QKV_ASSERT.
#include "qkv/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace qkv::detail {

void assert_fail(const char* cond, const char* file, int line) {
    std::fprintf(stderr, "qkv: internal assertion failed: %s at %s:%d\n", cond, file, line);
    std::abort();
}

}  // namespace qkv::detail
