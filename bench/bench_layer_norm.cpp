// Layer norm with the fused residual (D2L 11.7.3 AddNorm: LN(dropout(Y) + X)) on the D2L step's
// shape (rows of 256, num_hiddens 256; 1152 = 128 sentences × 9 tokens, 768 ≈ the pad-free rows):
//   BM_kernel_add_ln/<impl>/<rows>: forward + backward of the kernels alone; impl 0 = the fused
//     cpu kernel (residual in the forward's row pass), 1 = a separate add pass then the cpu
//     kernel (what the ops did before), 2 = the scalar reference (kernels/ref) with the residual.
//   BM_op_add_ln/<fused>/<rows>: the ops with autograd (forward, backward from a fixed dy):
//     add_layer_norm against layer_norm(add(x, r)) (allocation and graph bookkeeping included).
// Run: build/bench/bench_layer_norm --threads N [google-benchmark flags]; results in
// bench/RESULTS.md.
#include <benchmark/benchmark.h>

#include <omp.h>

#include <string>
#include <vector>

#include "kernels/cpu/layer_norm.h"
#include "kernels/ref/layer_norm.h"
#include "qkv/core/generator.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/reduce.h"
#include "isa_cap.h"

namespace {

using namespace qkv;
constexpr int64_t kN = 256;

std::vector<float> random_vec(int64_t n, uint64_t seed) {
    Generator g(seed);
    return randn({n}, &g).to_vector<float>();
}

void BM_kernel_add_ln(benchmark::State& st) {
    const int impl = int(st.range(0));
    const int64_t rows = st.range(1), n = rows * kN;
    const auto x = random_vec(n, 1), r = random_vec(n, 2), dy = random_vec(n, 3);
    const auto gamma = random_vec(kN, 4), beta = random_vec(kN, 5);
    std::vector<float> z(n), y(n), mu(rows), rs(rows), dx(n), dg(kN), db(kN);
    for (auto _ : st) {
        kernels::LayerNormParams<float> p{y.data(), mu.data(), rs.data(), x.data(), gamma.data(), beta.data(),
                                          rows, kN, 1e-5, r.data(), z.data()};
        if (impl == 1) {  // unfused: the sum as its own pass, then the plain kernel
            for (int64_t i = 0; i < n; ++i) z[i] = x[i] + r[i];
            p.x = z.data(), p.residual = nullptr, p.sum = nullptr;
        }
        const kernels::LayerNormGradParams<float> g{dx.data(), dg.data(), db.data(), dy.data()};
        p.x = z.data();  // the backward normalises the sum in every variant
        if (impl == 2) {
            p.x = x.data();
            kernels::ref::layer_norm_forward<float>(p);
            p.x = z.data();
            kernels::ref::layer_norm_backward<float>(p, g);
        } else {
            if (impl == 0) p.x = x.data();
            kernels::cpu::layer_norm_forward(p);
            p.x = z.data();
            kernels::cpu::layer_norm_backward(p, g);
        }
        benchmark::DoNotOptimize(dx.data());
    }
    st.SetItemsProcessed(st.iterations() * rows);
    st.SetLabel(impl == 0 ? "fused" : impl == 1 ? "add then ln" : "ref");
}
BENCHMARK(BM_kernel_add_ln)->ArgsProduct({{0, 1, 2}, {768, 1152}})->Unit(benchmark::kMicrosecond);

void BM_op_add_ln(benchmark::State& st) {
    const bool fused = st.range(0) != 0;
    const int64_t rows = st.range(1);
    Generator g(7);
    const Tensor x0 = randn({rows, kN}, &g), r0 = randn({rows, kN}, &g), dy = randn({rows, kN}, &g);
    Tensor w = ones({kN}).requires_grad_(), b = zeros({kN}).requires_grad_();
    for (auto _ : st) {
        Tensor x = x0.detach().requires_grad_(), r = r0.detach().requires_grad_();
        Tensor y = fused ? add_layer_norm(x, r, {kN}, w, b) : layer_norm(add(x, r), {kN}, w, b);
        y.backward(dy);
        benchmark::DoNotOptimize(x.grad());
        w.reset_grad(), b.reset_grad();
    }
    st.SetItemsProcessed(st.iterations() * rows);
    st.SetLabel(fused ? "add_layer_norm" : "layer_norm(add)");
}
BENCHMARK(BM_op_add_ln)->ArgsProduct({{1, 0}, {768, 1152}})->Unit(benchmark::kMicrosecond);

}  // namespace

// `--threads N` (default 2) sets the OpenMP thread count; other flags go to Google Benchmark.
int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    const int threads = bench_take_threads(argc, argv, 2);
    if (threads < 0) return 2;
    omp_set_num_threads(threads);
    benchmark::AddCustomContext("omp_threads", std::to_string(threads));
    return bench_run(argc, argv);
}
