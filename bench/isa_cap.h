#pragma once
// Shared by the benchmark mains: a bad QKV_MAX_ISA is a usage error (message, exit 2) as in the
// qkv CLI, not an abort inside a benchmark.
#include <cstdio>

#include "qkv/core/error.h"
#include "qkv/ops/kernel_mode.h"

/// 0 when QKV_MAX_ISA is unset or valid; else prints why (prefixed with `argv0`) and returns 2.
inline int bench_isa_cap_status(const char* argv0) {
    try {
        qkv::check_isa_cap();
        return 0;
    } catch (const qkv::Error& e) {
        std::fprintf(stderr, "%s: %s\n", argv0, e.what());
        return 2;
    }
}
