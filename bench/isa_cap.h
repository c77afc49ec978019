#pragma once
// Shared by the benchmark mains: a bad QKV_MAX_ISA or --threads value is a usage error (message,
// exit 2) as in the qkv CLI, not an abort inside a benchmark or a silent default; bench_run hands
// the rest to Google Benchmark, with the benchmarks' own minimum times unless the user gives one.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

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

/// The thread count in `text` (decimal digits only, 1 to 1024); else prints why (prefixed with
/// `argv0`, naming --threads and the value) and returns -1 (the caller exits 2).
inline int bench_parse_threads(const char* argv0, const char* text) {
    long n = 0;
    bool ok = *text != '\0';
    for (const char* c = text; ok && *c; ++c) {
        ok = *c >= '0' && *c <= '9';
        n  = ok ? std::min(n * 10 + (*c - '0'), 100000L) : n;
    }
    if (!ok || n < 1 || n > 1024) {
        std::fprintf(stderr, "%s: --threads must be a whole number from 1 to 1024, got '%s'\n", argv0, text);
        return -1;
    }
    return int(n);
}

/// Takes `--threads N` and `--threads=N` (the last one wins) out of argv, so Google Benchmark never
/// sees them. Returns the count, `fallback` when neither is given, or -1 after printing why (a bad
/// value, or --threads without one).
inline int bench_take_threads(int& argc, char** argv, int fallback) {
    int threads = fallback, out = 1;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        const char* value = nullptr;
        if (std::strcmp(a, "--threads") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s: --threads needs a value (a whole number from 1 to 1024)\n", argv[0]);
                return -1;
            }
            value = argv[++i];
        } else if (std::strncmp(a, "--threads=", 10) == 0) {
            value = a + 10;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if ((threads = bench_parse_threads(argv[0], value)) < 0) return -1;
    }
    argc = out;
    argv[argc] = nullptr;
    return threads;
}

/// The benchmarks' default minimum times (bench_default_min_time), for bench_run.
inline std::vector<std::pair<benchmark::internal::Benchmark*, double>>& bench_default_min_times() {
    static std::vector<std::pair<benchmark::internal::Benchmark*, double>> v;
    return v;
}

/// `->Apply(bench_default_min_time<Ms>)` where `->MinTime(Ms / 1000.0)` would go: Ms milliseconds
/// per benchmark unless the user gives --benchmark_min_time (or BENCHMARK_MIN_TIME). Google
/// Benchmark lets a benchmark's MinTime win over the flag, so bench_run sets it only then.
template <int Ms>
void bench_default_min_time(benchmark::internal::Benchmark* b) {
    bench_default_min_times().emplace_back(b, Ms / 1000.0);
}

/// Google Benchmark on the remaining arguments: runs the selected benchmarks and returns 0, or
/// returns 2 (a usage error) when an argument is not one of its flags (it says which).
inline int bench_run(int argc, char** argv) {
    bool min_time_given = std::getenv("BENCHMARK_MIN_TIME") != nullptr;
    for (int i = 1; i < argc; ++i)
        min_time_given = min_time_given || std::strncmp(argv[i], "--benchmark_min_time=", 21) == 0;
    if (!min_time_given)
        for (const auto& [b, seconds] : bench_default_min_times()) b->MinTime(seconds);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
