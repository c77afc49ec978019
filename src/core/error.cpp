// qkv::Error support: the abort path of QKV_ASSERT and the undefined-Tensor error.
#include "qkv/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace qkv::detail {

void assert_fail(const char* cond, const char* file, int line) {
    std::fprintf(stderr, "qkv: internal assertion failed: %s at %s:%d\n", cond, file, line);
    std::abort();
}

void throw_undefined_tensor() {
    throw Error("undefined tensor: a default-constructed Tensor has no shape, dtype or data (check "
                "defined() first)");
}

}  // namespace qkv::detail
