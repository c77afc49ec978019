#pragma once
// Shared by the benchmark mains: a bad QKV_MAX_ISA or --threads value is a usage error (message,
// exit 2) as in the qkv CLI, not an abort inside a benchmark or a silent default.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

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

/// The thread count in `text` (a whole number in [1, 1024]); else prints why (prefixed with
/// `argv0`, naming --threads and the value) and returns -1 (the caller exits 2).
inline int bench_parse_threads(const char* argv0, const char* text) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || n < 1 || n > 1024) {
        std::fprintf(stderr, "%s: --threads must be a whole number from 1 to 1024, got '%s'\n", argv0, text);
        return -1;
    }
    return int(n);
}
