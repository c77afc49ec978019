// Per-call cost of qkv::scaled_dot_product_attention on small shapes (the op as the library and
// the Python binding call it: validation, dispatch, allocation, kernel), the C++ side of
// bench/python_call_overhead.py. fp32, no autograd history (inputs do not require grad).
//   bench_sdpa_call [--benchmark_filter=...]   (OMP_NUM_THREADS as the Python run)
#include <benchmark/benchmark.h>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/attention.h"
#include "isa_cap.h"

namespace {

void BM_sdpa_call(benchmark::State& st) {
    const int64_t B = st.range(0), H = st.range(1), T = st.range(2), D = st.range(3);
    qkv::Generator gen(0);
    const qkv::Tensor q = qkv::randn({B, H, T, D}, &gen), k = qkv::randn({B, H, T, D}, &gen),
                      v = qkv::randn({B, H, T, D}, &gen);
    for (auto _ : st) {
        qkv::Tensor out = qkv::scaled_dot_product_attention(q, k, v);
        benchmark::DoNotOptimize(out.raw_data());
    }
}
BENCHMARK(BM_sdpa_call)
    ->Args({1, 1, 4, 8})
    ->Args({1, 2, 8, 16})
    ->Args({2, 4, 32, 32})
    ->ArgNames({"B", "H", "T", "D"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    return bench_run(argc, argv);
}
