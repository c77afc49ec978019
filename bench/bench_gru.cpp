// GRU and Bahdanau-model training throughput. Shapes are D2L EN's Bahdanau run (spec §3): batch
// 128, 9 source and 9 target steps, E = H = 256, 2 layers, vocabularies 194/214, dropout 0.2.
//   BM_gru_train/<impl>:      nn::GRU(256, 256, 2) forward + backward on X (9, 128, 256), for
//                             each recurrence implementation (sequence / cell / composite).
//   BM_bahdanau_step/<impl>:  one full training step of the book model (forward, unmasked mean
//                             cross-entropy, backward, clip 1, Adam) — comparable to
//                             bench/bench_gru_torch.py, which runs the same step in PyTorch.
// Counter tokens/s = target tokens per second (128·9 per step).
// Run: build/bench/bench_gru --threads 2 [google-benchmark flags]; results in bench/RESULTS_gru.md.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/models/bahdanau.h"
#include "qkv/nn/rnn.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"
#include "isa_cap.h"

namespace {

using namespace qkv;

constexpr int64_t kB = 128, kT = 9, kH = 256, kVs = 194, kVt = 214;

nn::GRUImpl impl_of(int64_t i) { return static_cast<nn::GRUImpl>(i); }
const char* impl_label(int64_t i) {
    return i == 0 ? "sequence" : i == 1 ? "cell" : "composite";
}

void BM_gru_train(benchmark::State& st) {
    manual_seed(0);
    nn::GRU gru(kH, kH, 2, 0.2);
    gru.impl = impl_of(st.range(0));
    const Tensor X = randn({kT, kB, kH}).requires_grad_();
    const Tensor g = randn({kT, kB, kH});
    for (auto _ : st) {
        gru.zero_grad();
        auto [out, hn] = gru.forward(X);
        out.backward(g);
    }
    st.SetLabel(impl_label(st.range(0)));
    st.counters["tokens/s"] = benchmark::Counter(double(kB * kT), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gru_train)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

Tensor random_ids(int64_t V, Shape s, Generator& gen) {
    Tensor u = rand(s, &gen, 0.0, double(V));
    std::vector<int64_t> ids;
    for (float v : u.to_vector<float>()) ids.push_back(std::min<int64_t>(V - 1, int64_t(v)));
    return from_vector(ids, s);
}

void BM_bahdanau_step(benchmark::State& st) {
    manual_seed(0);
    models::BahdanauConfig c;
    c.src_vocab_size = kVs;
    c.tgt_vocab_size = kVt;
    c.gru_impl = impl_of(st.range(0));
    models::Bahdanau m(c);
    m.train();
    optim::Adam opt(m.parameters(), 0.005);
    Generator gen(1);
    const Tensor src = random_ids(kVs, {kB, kT}, gen), dec = random_ids(kVt, {kB, kT}, gen),
                 lab = random_ids(kVt, {kB, kT}, gen);
    std::vector<int64_t> lens(kB);
    for (int64_t b = 0; b < kB; ++b) lens[size_t(b)] = 2 + b % 8;
    const Tensor vl = from_vector(lens, {kB});
    for (auto _ : st) {
        opt.zero_grad();
        Tensor loss = cross_entropy(m.forward(src, vl, dec), lab);
        loss.backward();
        optim::clip_grad_norm(m.parameters(), 1.0);
        opt.step();
        benchmark::DoNotOptimize(loss.item());
    }
    st.SetLabel(impl_label(st.range(0)));
    st.counters["tokens/s"] = benchmark::Counter(double(kB * kT), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_bahdanau_step)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

// `--threads N` (default 2) sets the kernel thread count; other flags go to Google Benchmark.
int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    const int threads = bench_take_threads(argc, argv, 2);
    if (threads < 0) return 2;
    qkv::set_num_threads(threads);
    benchmark::AddCustomContext("threads", std::to_string(threads));
    return bench_run(argc, argv);
}
