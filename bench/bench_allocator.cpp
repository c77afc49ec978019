// Caching allocator: system allocations per steady-state training step and step time with and
// without the cache. The workload is a 2-layer MLP (batch 1152 = 128 × 9 tokens, width 256 → 1024
// → 256, the D2L Transformer FFN shape) with layer_norm, forward + backward + Adam.
//   build/bench/bench_allocator --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include "qkv/core/allocator.h"
#include "qkv/core/parallel.h"
#include "qkv/nn/layers.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"
#include "isa_cap.h"

using namespace qkv;

namespace {
struct Ffn : nn::Module {
    std::shared_ptr<nn::Linear> d1, d2;
    std::shared_ptr<nn::LayerNorm> ln;
    Ffn() {
        d1 = register_module("dense1", std::make_shared<nn::Linear>(256, 1024));
        d2 = register_module("dense2", std::make_shared<nn::Linear>(1024, 256));
        ln = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{256}));
    }
    Tensor forward(const Tensor& x) const { return ln->forward(add(x, d2->forward(relu(d1->forward(x))))); }
};

void BM_train_step(benchmark::State& state) {
    set_allocator_caching(state.range(0) != 0);
    set_num_threads(2);
    manual_seed(0);
    Ffn m;
    optim::Adam opt(m.parameters(), 1e-3);
    Tensor x = randn({1152, 256});
    auto step = [&] {
        opt.zero_grad();
        Tensor loss = mean(mul(m.forward(x), m.forward(x)));
        loss.backward();
        opt.step();
    };
    step();  // warm the cache and Adam state
    reset_allocator_stats();
    int64_t steps = 0;
    for (auto _ : state) {
        step();
        ++steps;
    }
    const AllocatorStats s = allocator_stats();
    state.counters["allocs/step"] = double(s.allocs) / double(steps);
    state.counters["system_allocs/step"] = double(s.system_allocs) / double(steps);
    state.counters["cache_hit_%"] = s.allocs ? 100.0 * double(s.cache_hits) / double(s.allocs) : 0.0;
    set_allocator_caching(true);
}
}  // namespace

BENCHMARK(BM_train_step)->Arg(1)->Arg(0)->ArgName("cache")->Unit(benchmark::kMillisecond);
int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    return bench_run(argc, argv);
}
