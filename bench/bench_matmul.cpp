// GEMM throughput: qkv's cpu::gemm / cpu::gemm_batched against dnnl_sgemm called directly, on
// square sizes and on the D2L Transformer's shapes, and greedy decoding's output layer (linear +
// argmax against the fused linear_argmax). FLOP convention: 2·M·N·K per GEMM.
// Run: build/bench/bench_matmul --threads 2 [google-benchmark flags]; results in
// bench/RESULTS_matmul.md.
#include <benchmark/benchmark.h>

#include <dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/ref/matmul.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/reduce.h"
#include "isa_cap.h"

namespace {

using qkv::kernels::cpu::gemm;
using qkv::kernels::cpu::gemm_batched;

std::vector<float> filled(int64_t n, float v0) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = v0 + 1e-3f * float(i % 97);
    return v;
}

// GFLOP/s over wall time (the benchmarks use real time); MFLOP per iteration lets a reader
// recompute the rate over CPU time (cpu_time column), the robust figure for 1 thread on a shared
// machine.
void set_flops(benchmark::State& st, double flops_per_iter) {
    st.counters["GFLOP/s"] =
        benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    st.counters["MFLOP"] = flops_per_iter * 1e-6;
}

// ---- one GEMM: (M×K)·(K×N), args {M, N, K} --------------------------------------------------
template <bool kDirect>
void BM_gemm(benchmark::State& st) {
    const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    auto A = filled(M * K, 0.5f), B = filled(K * N, 0.25f), C = filled(M * N, 0.f);
    for (auto _ : st) {
        if constexpr (kDirect)
            dnnl_sgemm('N', 'N', M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
        else
            gemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
        benchmark::DoNotOptimize(C.data());
    }
    set_flops(st, 2.0 * double(M) * double(N) * double(K));
}
void BM_gemm_qkv(benchmark::State& st) { BM_gemm<false>(st); }
void BM_gemm_dnnl(benchmark::State& st) { BM_gemm<true>(st); }

void gemm_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t n : {256, 512, 1024, 2048}) b->Args({n, n, n});
    b->Args({1152, 256, 256});  // D2L: (128·9, C) · W_q/k/v/o (C = 256)
    b->Args({1152, 64, 256});   // D2L: FFN dense1, C -> F (F = 64)
    b->Args({1152, 256, 64});   // D2L: FFN dense2, F -> C
}
BENCHMARK(BM_gemm_qkv)->Apply(gemm_shapes)->UseRealTime();
BENCHMARK(BM_gemm_dnnl)->Apply(gemm_shapes)->UseRealTime();

// ---- bf16 GEMM (gemm_bf16_batched), args {M, N, K}: the rounded fp32 path and oneDNN's bf16
// matmul (where the CPU has AVX-512-BF16 or AMX), the operands converted in every call as the ops do.
template <qkv::kernels::cpu::Bf16GemmPath kPath>
void BM_gemm_bf16(benchmark::State& st) {
    namespace cpu = qkv::kernels::cpu;
    const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    auto A = filled(M * K, 0.5f), B = filled(K * N, 0.25f), C = filled(M * N, 0.f);
    const auto old = cpu::set_bf16_gemm_path(kPath);
    st.SetLabel(cpu::bf16_gemm_path());
    for (auto _ : st) {
        cpu::gemm_bf16_batched({false, false, M, N, K, 1.f, A.data(), K, 0, B.data(), N, 0, 0.f, C.data(), N, 0, 1});
        benchmark::DoNotOptimize(C.data());
    }
    cpu::set_bf16_gemm_path(old);
    set_flops(st, 2.0 * double(M) * double(N) * double(K));
}
void BM_gemm_bf16_rounded_fp32(benchmark::State& st) {
    BM_gemm_bf16<qkv::kernels::cpu::Bf16GemmPath::rounded_fp32>(st);
}
void BM_gemm_bf16_onednn(benchmark::State& st) { BM_gemm_bf16<qkv::kernels::cpu::Bf16GemmPath::onednn>(st); }
BENCHMARK(BM_gemm_bf16_rounded_fp32)->Apply(gemm_shapes)->UseRealTime();
BENCHMARK(BM_gemm_bf16_onednn)->Apply(gemm_shapes)->UseRealTime();

// ---- oneDNN's bf16 matmul at its best, args {M, N, K}: A already bf16 (plain rows), B already
// bf16 and reordered once to the layout the primitive asks for (format_tag::any: the VNNI blocks
// AMX and vdpbf16ps read), C fp32; only execute() is timed. What gemm_bf16_batched adds to this
// (converting A and B every call, B in plain layout) is the gap to BM_gemm_bf16_onednn; this is
// the "oneDNN bf16 matmul" peak of bench/RESULTS.md.
void BM_onednn_bf16_matmul_prepacked(benchmark::State& st) {
    using dt   = dnnl::memory::data_type;
    using tag  = dnnl::memory::format_tag;
    const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({M, K}, dt::bf16, tag::ab), b_any({K, N}, dt::bf16, tag::any),
            b_plain({K, N}, dt::bf16, tag::ab), c_md({M, N}, dt::f32, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
        std::vector<uint16_t> a16(size_t(M * K), 0x3f00), b16(size_t(K * N), 0x3e80);  // 0.5, 0.25
        for (size_t i = 0; i < a16.size(); ++i) a16[i] = uint16_t(0x3f00 + i % 97);
        std::vector<float>    c(size_t(M * N), 0.f);
        dnnl::memory am(a_md, eng, a16.data()), bp(b_plain, eng, b16.data()), bm(pd.weights_desc(), eng),
            cm(c_md, eng, c.data());
        dnnl::reorder(bp, bm).execute(strm, bp, bm);
        dnnl::matmul mm(pd);
        for (auto _ : st) {
            mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
            strm.wait();
            benchmark::DoNotOptimize(c.data());
        }
        st.SetLabel(std::string("oneDNN bf16 matmul (") + pd.impl_info_str() + "), prepacked");
    } catch (const dnnl::error& e) {
        st.SkipWithError((std::string("oneDNN bf16 matmul unavailable: ") + e.what()).c_str());
        return;
    }
    set_flops(st, 2.0 * double(M) * double(N) * double(K));
}
BENCHMARK(BM_onednn_bf16_matmul_prepacked)->Apply(gemm_shapes)->UseRealTime();

// ---- the anchor Transformer's training GEMMs as a linear layer issues them (y = x·Wᵀ is NT, dX =
// G·W is NN, dW = Gᵀ·x is TN), 1,060 rows: args {M, N, K, trans_a, trans_b}.
void BM_gemm_layouts(benchmark::State& st) {
    const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    const bool ta = st.range(3) != 0, tb = st.range(4) != 0;
    auto A = filled(M * K, 0.5f), B = filled(K * N, 0.25f), C = filled(M * N, 0.f);
    for (auto _ : st) {
        gemm(ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, C.data(), N);
        benchmark::DoNotOptimize(C.data());
    }
    set_flops(st, 2.0 * double(M) * double(N) * double(K));
}
void layout_shapes(benchmark::internal::Benchmark* b) {
    b->Args({1060, 1024, 256, 0, 1});    // FFN dense1 forward
    b->Args({1060, 256, 1024, 0, 1});    // FFN dense2 forward
    b->Args({1060, 256, 1024, 0, 0});    // FFN dense1 dX
    b->Args({1060, 1024, 256, 0, 0});    // FFN dense2 dX
    b->Args({1024, 256, 1060, 1, 0});    // FFN dense1 dW
    b->Args({256, 1024, 1060, 1, 0});    // FFN dense2 dW
    b->Args({1060, 256, 256, 0, 1});     // attention projection forward
    b->Args({1060, 256, 256, 0, 0});     // its dX
    b->Args({256, 256, 1060, 1, 0});     // its dW
    b->Args({1060, 17496, 256, 0, 1});   // output layer forward
    b->Args({1060, 256, 17496, 0, 0});   // its dX
    b->Args({17496, 256, 1060, 1, 0});   // its dW
}
BENCHMARK(BM_gemm_layouts)->Apply(layout_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- paired: qkv and direct oneDNN calls alternate in one loop, so both see the same machine
// load (this host is shared); counters give each one's GFLOP/s over wall time and their ratio.
void BM_gemm_qkv_vs_dnnl(benchmark::State& st) {
    const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    auto A = filled(M * K, 0.5f), B = filled(K * N, 0.25f), C = filled(M * N, 0.f);
    using clock  = std::chrono::steady_clock;
    double t_qkv = 0, t_dnnl = 0;
    for (auto _ : st) {
        const auto t0 = clock::now();
        gemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
        const auto t1 = clock::now();
        dnnl_sgemm('N', 'N', M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
        const auto t2 = clock::now();
        benchmark::DoNotOptimize(C.data());
        t_qkv += std::chrono::duration<double>(t1 - t0).count();
        t_dnnl += std::chrono::duration<double>(t2 - t1).count();
    }
    const double flops          = 2.0 * double(M) * double(N) * double(K) * double(st.iterations());
    st.counters["qkv_GFLOP/s"]  = flops / t_qkv * 1e-9;
    st.counters["dnnl_GFLOP/s"] = flops / t_dnnl * 1e-9;
    st.counters["qkv/dnnl"]     = t_dnnl / t_qkv;
}
BENCHMARK(BM_gemm_qkv_vs_dnnl)->Apply(gemm_shapes)->UseRealTime();

// ---- batched: args {batch, M, N, K, trans_b} ------------------------------------------------
// D2L attention with 4 heads of D = 64 on a batch of 128 sentences × 9 tokens: scores are 512 ×
// (9×64)·(64×9)ᵀ (trans_b), outputs 512 × (9×9)·(9×64).
enum class Batched { qkv, serial, per_thread };
template <Batched kMode>
void BM_batched(benchmark::State& st) {
    const int64_t batch = st.range(0), M = st.range(1), N = st.range(2), K = st.range(3);
    const bool tb     = st.range(4) != 0;
    const int64_t ldb = tb ? K : N;
    auto A = filled(batch * M * K, 0.5f), B = filled(batch * K * N, 0.25f),
         C         = filled(batch * M * N, 0.f);
    const char tbc = tb ? 'T' : 'N';
    for (auto _ : st) {
        if constexpr (kMode == Batched::qkv) {
            gemm_batched({false, tb, M, N, K, 1.f, A.data(), K, M * K, B.data(), ldb, K * N, 0.f, C.data(), N, M * N, batch});
        } else if constexpr (kMode == Batched::serial) {
            for (int64_t b = 0; b < batch; ++b)
                dnnl_sgemm('N', tbc, M, N, K, 1.f, A.data() + b * M * K, K, B.data() + b * K * N,
                           ldb, 0.f, C.data() + b * M * N, N);
        } else {
#pragma omp parallel for schedule(static)
            for (int64_t b = 0; b < batch; ++b)
                dnnl_sgemm('N', tbc, M, N, K, 1.f, A.data() + b * M * K, K, B.data() + b * K * N,
                           ldb, 0.f, C.data() + b * M * N, N);
        }
        benchmark::DoNotOptimize(C.data());
    }
    set_flops(st, 2.0 * double(batch) * double(M) * double(N) * double(K));
}
void BM_gemm_batched_qkv(benchmark::State& st) { BM_batched<Batched::qkv>(st); }
void BM_gemm_batched_dnnl_serial(benchmark::State& st) { BM_batched<Batched::serial>(st); }
void BM_gemm_batched_dnnl_per_thread(benchmark::State& st) { BM_batched<Batched::per_thread>(st); }

void batched_shapes(benchmark::internal::Benchmark* b) {
    b->Args({512, 9, 9, 64, 1});   // scores  Q·Kᵀ per head
    b->Args({512, 9, 64, 9, 0});   // weights·V per head
    b->Args({128, 9, 9, 256, 1});  // one head of width 256 (Bahdanau-style / H = 1)
    b->Args({16, 64, 64, 64, 0});
    b->Args({16, 128, 128, 128, 0});
    b->Args({8, 256, 256, 256, 0});
    b->Args({4, 512, 512, 512, 0});
}
BENCHMARK(BM_gemm_batched_qkv)->Apply(batched_shapes)->UseRealTime();
BENCHMARK(BM_gemm_batched_dnnl_serial)->Apply(batched_shapes)->UseRealTime();
BENCHMARK(BM_gemm_batched_dnnl_per_thread)->Apply(batched_shapes)->UseRealTime();

// ---- reference (scale of the triple loop, small sizes only) --------------------------------
void BM_gemm_ref(benchmark::State& st) {
    const int64_t n = st.range(0);
    auto A = filled(n * n, 0.5f), B = filled(n * n, 0.25f), C = filled(n * n, 0.f);
    for (auto _ : st) {
        qkv::kernels::ref::gemm<float>(false, false, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f,
                                       C.data(), n);
        benchmark::DoNotOptimize(C.data());
    }
    set_flops(st, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(BM_gemm_ref)->Arg(256)->UseRealTime();

// ---- greedy decoding's output layer: linear + argmax vs the fused linear_argmax -------------
// args {M rows, N vocabulary}, K = 256 (the anchor model: C 256, V_tgt 17,496).
template <bool kFused>
void BM_output_argmax(benchmark::State& st) {
    const int64_t M = st.range(0), N = st.range(1), K = 256;
    qkv::Generator g(1);
    const qkv::Tensor x = qkv::randn({M, K}, &g), w = qkv::randn({N, K}, &g), b = qkv::randn({N}, &g);
    qkv::NoGradGuard ng;
    for (auto _ : st) {
        qkv::Tensor ids = kFused ? qkv::linear_argmax(x, w, b) : qkv::argmax(qkv::linear(x, w, b), 1);
        benchmark::DoNotOptimize(ids.raw_data());
    }
    set_flops(st, 2.0 * double(M) * double(N) * double(K));
}
void BM_linear_then_argmax(benchmark::State& st) { BM_output_argmax<false>(st); }
void BM_linear_argmax(benchmark::State& st) { BM_output_argmax<true>(st); }
void output_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t m : {20, 100, 250, 1000}) b->Args({m, 17496});
    b->Args({250, 8000});  // the --preset full model: shared BPE vocabulary of 8,000 pieces
}
BENCHMARK(BM_linear_then_argmax)->Apply(output_shapes)->UseRealTime();
BENCHMARK(BM_linear_argmax)->Apply(output_shapes)->UseRealTime();

// ---- int8 linear layers (translate/eval --compute-type int8) against the fp32 layer --------
// args {M rows, O out_features, K in_features}: decoding's rows (1 sentence, a batch of 20 to 500
// live hypotheses), the anchor model's projections (256 × 256), FFN (1024 × 256 and 256 × 1024) and
// output layer (17,496 × 256). The int8 time includes quantizing the activations and dequantizing.
enum class Linear { fp32, int8_gemm_api, int8_matmul_prepacked };
template <Linear kKind>
void BM_linear_kind(benchmark::State& st) {
    namespace cpu = qkv::kernels::cpu;
    if (kKind == Linear::int8_matmul_prepacked && !cpu::int8_matmul_available()) {
        st.SkipWithError("no VNNI / AMX-INT8 s8 matmul in oneDNN here");
        return;
    }
    const int64_t M = st.range(0), O = st.range(1), K = st.range(2);
    qkv::Generator g(1);
    const qkv::Tensor x = qkv::randn({M, K}, &g), w = qkv::randn({O, K}, &g), b = qkv::randn({O}, &g);
    const qkv::Int8Weight q = qkv::quantize_int8(w);
    const auto old = cpu::set_int8_gemm_path(kKind == Linear::int8_gemm_api ? cpu::Int8GemmPath::gemm_api
                                                                            : cpu::Int8GemmPath::matmul_prepacked);
    if (kKind != Linear::fp32) st.SetLabel(cpu::int8_gemm_path());
    qkv::NoGradGuard ng;
    for (auto _ : st) {
        qkv::Tensor y = kKind == Linear::fp32 ? qkv::linear(x, w, b) : qkv::linear_int8(x, q, b);
        benchmark::DoNotOptimize(y.raw_data());
    }
    cpu::set_int8_gemm_path(old);
    set_flops(st, 2.0 * double(M) * double(O) * double(K));
}
void BM_linear_fp32(benchmark::State& st) { BM_linear_kind<Linear::fp32>(st); }
void BM_linear_int8_gemm_api(benchmark::State& st) { BM_linear_kind<Linear::int8_gemm_api>(st); }
void BM_linear_int8_matmul_prepacked(benchmark::State& st) { BM_linear_kind<Linear::int8_matmul_prepacked>(st); }
void int8_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t m : {1, 20, 100, 500})
        for (auto ok : {std::pair<int64_t, int64_t>{256, 256}, {1024, 256}, {256, 1024}, {17496, 256}})
            b->Args({m, ok.first, ok.second});
}
// The int8 products dequantized: one whole-width product (the int32 sums go to memory and come
// back) against gemm_int8_nt_dequant's automatic column blocks (sums kept in cache). args {M, O,
// K, blocked}; the path is the automatic one (matmul on AMX, GEMM API elsewhere).
void BM_int8_dequant(benchmark::State& st) {
    namespace cpu = qkv::kernels::cpu;
    const int64_t M = st.range(0), O = st.range(1), K = st.range(2);
    std::vector<int8_t> x(size_t(M * K)), q(size_t(O * K));
    for (size_t i = 0; i < x.size(); ++i) x[i] = int8_t(int(i * 37 % 201) - 100);
    for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int(i * 53 % 255) - 127);
    const std::vector<float> sx(size_t(M), 0.01f), sw(size_t(O), 0.02f), b(size_t(O), 0.5f);
    std::vector<float> y(size_t(M * O));
    const auto packed = cpu::make_int8_packed_weight(q.data(), O, K);
    st.SetLabel(cpu::int8_gemm_path());
    for (auto _ : st) {
        cpu::gemm_int8_nt_dequant({x.data(), M, K, O, packed.get(), sx.data(), sw.data(), b.data(), y.data(),
                                   st.range(3) ? 0 : O});
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(st, 2.0 * double(M) * double(O) * double(K));
}
BENCHMARK(BM_int8_dequant)->ArgsProduct({{20, 100, 500}, {17496}, {256}, {0, 1}})->UseRealTime()
    ->Apply(bench_default_min_time<200>);
BENCHMARK(BM_linear_fp32)->Apply(int8_shapes)->UseRealTime()->Apply(bench_default_min_time<200>);
BENCHMARK(BM_linear_int8_gemm_api)->Apply(int8_shapes)->UseRealTime()->Apply(bench_default_min_time<200>);
BENCHMARK(BM_linear_int8_matmul_prepacked)->Apply(int8_shapes)->UseRealTime()->Apply(bench_default_min_time<200>);

// ---- training's output layer and loss, forward + backward: cross_entropy(linear(...)) vs the fused
// linear_cross_entropy. args {N target rows, V vocabulary}, C = 256; 1,060 rows is the anchor
// protocol's batch (128 pairs, ~8.3 non-pad target tokens each). FLOPs: the three GEMMs, 6·N·V·C.
template <bool kFused>
void BM_output_loss(benchmark::State& st) {
    const int64_t N = st.range(0), V = st.range(1), C = 256;
    qkv::Generator g(1);
    qkv::Tensor x = qkv::randn({N, C}, &g), w = qkv::randn({V, C}, &g, 0.0, 0.05),
                b = qkv::randn({V}, &g, 0.0, 0.05);
    x.requires_grad_(true), w.requires_grad_(true), b.requires_grad_(true);
    std::vector<int64_t> t(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) t[size_t(i)] = (i * 7919) % V;
    const qkv::Tensor target = qkv::from_vector(t, {N});
    for (auto _ : st) {
        x.reset_grad(), w.reset_grad(), b.reset_grad();
        qkv::Tensor loss = kFused ? qkv::linear_cross_entropy(x, w, b, target)
                                  : qkv::cross_entropy(qkv::linear(x, w, b), target);
        loss.backward();
        benchmark::DoNotOptimize(w.grad().raw_data());
    }
    set_flops(st, 6.0 * double(N) * double(V) * double(C));
}
void BM_linear_then_cross_entropy(benchmark::State& st) { BM_output_loss<false>(st); }
void BM_linear_cross_entropy(benchmark::State& st) { BM_output_loss<true>(st); }
void loss_shapes(benchmark::internal::Benchmark* b) {
    b->Args({1060, 17496});  // the anchor protocol's word vocabulary
    b->Args({1400, 8000});   // --preset full: 8,000 shared BPE pieces, about 1.3 per French word
}
BENCHMARK(BM_linear_then_cross_entropy)->Apply(loss_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_linear_cross_entropy)->Apply(loss_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

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
