// Flash attention kernel benchmarks: forward, forward+backward, causal, on the shapes of
// bench/attn_side_by_side.py (PyTorch anchor). GFLOP/s with the convention of
// /work/shared/bench/attn_bench.py: forward 4*B*H*N*N*d, backward 2.5x forward, causal half.
//   bench_attention [--threads=2] [--isa=avx512|avx2|scalar] [google-benchmark flags]
//                  (BM_attention_sdpa_dtype_fwd: the op on float32 / float16 / bfloat16 tensors;
//                  BM_fp16_convert_*: the F16C conversions against the scalar reference)
//   bench_attention --mem [N]      peak-RSS probe: (1, 8, N, 64) forward+backward, N = 16384
//   bench_attention --tiles        tile-GEMM probe: micro-kernel vs dnnl_sgemm, 1 thread
//   bench_attention --probe=fwd|fwdbwd|causal_fwd|causal_fwdbwd --shape=B,H,N,d --reps=R
//   bench_attention --probe=sdpa_<f32|f16|bf16>_<fwd|causal_fwd> ...   the op on tensors of that dtype
//                  [--dropout=P]   fixed work, rated per CPU-second (robust on a busy machine)
#include <benchmark/benchmark.h>
#include <dnnl.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/fp16.h"
#include "kernels/params.h"
#include "qkv/core/error.h"
#include "qkv/core/fp16.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/attention.h"
#include "isa_cap.h"

namespace {

using qkv::kernels::AttentionGradParams;
using qkv::kernels::AttentionParams;
using qkv::kernels::CausalAlign;
namespace cpu = qkv::kernels::cpu;

int           g_threads = 2;
float         g_dropout = 0.0f;  // --dropout=P (probe only)

struct Problem {
    std::vector<float> q, k, v, out, lse, lse_lo, dout, dq, dk, dv;
    AttentionParams<float>     p;
    AttentionGradParams<float> g;
    Problem(int64_t B, int64_t H, int64_t N, int64_t d, bool causal) : Problem(B, H, N, N, d, causal) {}
    Problem(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t d, bool causal) {
        const int64_t N = std::max(Tq, Tk);  // buffers sized for the longer side
        const size_t  n = size_t(B * H * N * d);
        auto rnd = [](std::vector<float>& x, size_t n_, uint32_t s) {
            x.resize(n_);
            for (auto& e : x) s = s * 1664525u + 1013904223u, e = float(s >> 8) / 16777216.0f - 0.5f;
        };
        rnd(q, n, 1), rnd(k, n, 2), rnd(v, n, 3), rnd(dout, n, 4);
        out.assign(n, 0), dq.assign(n, 0), dk.assign(n, 0), dv.assign(n, 0);
        lse.assign(size_t(B * H * N), 0), lse_lo.assign(size_t(B * H * N), 0);
        p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data(), p.lse = lse.data();
        p.lse_lo = lse_lo.data();
        p.B = B, p.H = H, p.Hkv = H, p.Tq = Tq, p.Tk = Tk, p.D = d, p.Dv = d;
        p.q_stride_b = p.k_stride_b = p.v_stride_b = p.o_stride_b = H * N * d;
        p.q_stride_h = p.k_stride_h = p.v_stride_h = p.o_stride_h = N * d;
        p.q_stride_t = p.k_stride_t = p.v_stride_t = p.o_stride_t = d;
        p.scale  = float(1.0 / std::sqrt(double(d)));
        p.causal = causal ? CausalAlign::top_left : CausalAlign::none;
        g.dout = dout.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    }
};

double attn_flops(int64_t B, int64_t H, int64_t N, int64_t d, bool causal, bool bwd) {
    const double fwd = 4.0 * double(B * H) * double(N) * double(N) * double(d) * (causal ? 0.5 : 1.0);
    return fwd * (bwd ? 3.5 : 1.0);
}

void run_case(benchmark::State& st, bool causal, bool bwd) {
    omp_set_num_threads(g_threads);
    const int64_t B = st.range(0), H = st.range(1), N = st.range(2), d = st.range(3);
    Problem       pr(B, H, N, d, causal);
    for (auto _ : st) {
        cpu::flash_attention_forward(pr.p);
        if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
        benchmark::ClobberMemory();
    }
    st.counters["GFLOP/s"] = benchmark::Counter(attn_flops(B, H, N, d, causal, bwd) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
    st.SetLabel(std::string(cpu::isa_name(cpu::fp32_variant_isa())) +
                " threads=" + std::to_string(g_threads));
}

void BM_attention_flash_fwd(benchmark::State& st) { run_case(st, false, false); }
void BM_attention_flash_fwdbwd(benchmark::State& st) { run_case(st, false, true); }
void BM_attention_flash_causal_fwd(benchmark::State& st) { run_case(st, true, false); }
void BM_attention_flash_causal_fwdbwd(benchmark::State& st) { run_case(st, true, true); }

// Few keys (the D2L training step: batch 128, 4 heads, ~10 queries and keys, d = 64, valid_lens
// per batch element): the few-keys kernels (flash_few_keys.h) against the flash kernels on the
// same call. Args: Tq, Tk, path (1 few-keys, 0 flash), causal (top-left). kFewKeysAutoMaxKeys is
// where the few-keys kernels stop winning in these cases.
void run_few_keys(benchmark::State& st, bool bwd) {
    omp_set_num_threads(g_threads);
    const int64_t Tq = st.range(0), Tk = st.range(1), B = 128, H = 4, d = 64;
    const bool    causal = st.range(3) != 0;
    Problem       pr(B, H, Tq, Tk, d, causal);
    std::vector<int64_t> lens(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) lens[size_t(b)] = 1 + (b * 7) % Tk;  // key padding, as the step's batches
    pr.p.valid_lens = lens.data(), pr.p.valid_lens_rank = 1;
    const auto old = cpu::set_few_keys_path(st.range(2) ? cpu::FewKeysPath::always : cpu::FewKeysPath::never);
    for (auto _ : st) {
        cpu::flash_attention_forward(pr.p);
        if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
        benchmark::ClobberMemory();
    }
    cpu::set_few_keys_path(old);
    st.SetLabel(std::string(cpu::isa_name(cpu::fp32_variant_isa())) + " threads=" + std::to_string(g_threads) +
                (st.range(2) ? " few-keys" : " flash"));
}
void BM_attention_few_keys_fwd(benchmark::State& st) { run_few_keys(st, false); }
void BM_attention_few_keys_fwdbwd(benchmark::State& st) { run_few_keys(st, true); }
void few_keys_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t tk : {1, 4, 9, 10, 16, 17, 24, 32})
        for (int64_t path : {0, 1}) b->Args({10, tk, path, 0});
    for (int64_t path : {0, 1}) b->Args({10, 10, path, 1});  // the decoder's self-attention
}
BENCHMARK(BM_attention_few_keys_fwd)->Apply(few_keys_shapes);
BENCHMARK(BM_attention_few_keys_fwdbwd)->Apply(few_keys_shapes);

// Sliding window (local causal attention): each query sees the W keys ending at its own (window
// (W - 1, 0), top-left). FLOPs count the visible keys only, 4·B·H·N·W·d forward (minus the first
// rows' shorter windows), so GFLOP/s compares with full attention's and the time shows the N·W
// growth. Arg W = 0 runs full (non-causal) attention on the same shape.
void run_window(benchmark::State& st, bool bwd) {
    omp_set_num_threads(g_threads);
    const int64_t B = st.range(0), H = st.range(1), N = st.range(2), d = st.range(3), W = st.range(4);
    Problem       pr(B, H, N, d, W > 0);
    if (W > 0) pr.p.window_left = W - 1, pr.p.window_right = 0;
    for (auto _ : st) {
        cpu::flash_attention_forward(pr.p);
        if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
        benchmark::ClobberMemory();
    }
    const double keys = W > 0 ? double(N) * double(W) - double(W) * double(W - 1) / 2.0 : double(N) * double(N);
    const double fwd  = 4.0 * double(B * H) * keys * double(d);
    st.counters["GFLOP/s"] = benchmark::Counter(fwd * (bwd ? 3.5 : 1.0) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    st.SetLabel(std::string(cpu::isa_name(cpu::fp32_variant_isa())) + " threads=" + std::to_string(g_threads) +
                (W > 0 ? " window=" + std::to_string(W) : " full"));
}
void BM_attention_flash_window_fwd(benchmark::State& st) { run_window(st, false); }
void BM_attention_flash_window_fwdbwd(benchmark::State& st) { run_window(st, true); }
void window_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t n : {1024, 2048, 4096, 8192, 16384}) b->Args({1, 8, n, 64, 256});
    b->Args({1, 8, 16384, 64, 0});
    b->ArgNames({"B", "H", "N", "d", "W"})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
}
BENCHMARK(BM_attention_flash_window_fwd)->Apply(window_shapes);
BENCHMARK(BM_attention_flash_window_fwdbwd)->Apply(window_shapes);

void shapes(benchmark::internal::Benchmark* b) {
    b->Args({8, 8, 128, 64})->Args({4, 8, 512, 64})->Args({1, 8, 2048, 64})->Args({1, 8, 4096, 64});
    b->ArgNames({"B", "H", "N", "d"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_attention_flash_fwd)->Apply(shapes);
BENCHMARK(BM_attention_flash_fwdbwd)->Apply(shapes);
BENCHMARK(BM_attention_flash_causal_fwd)->Apply(shapes);
BENCHMARK(BM_attention_flash_causal_fwdbwd)->Apply(shapes);

// bf16 compute (AttentionParams::bf16: P and dS rounded to bf16 before their products) against
// fp32 on the same shapes: the issue-23 grid N = 512..16384, d = 64 and 128, (1, H, N, d) with
// H = max(1, 8·2048²/N²) so every N up to 4096 costs the same. Arg bf16: 0 the fp32 kernel, 1 bf16
// on the fp32 tiles (Bf16AttentionPath::rounded_fp32), 2 bf16 on vdpbf16ps (dot; skipped without
// AVX-512-BF16), 3 the AMX kernels (amx; skipped where Linux does not grant the AMX tiles), 4 the
// AMX kernels with tiles that cost nothing (TilesNull: loads and products no-ops, stores write
// zeros; results meaningless): everything but the tile products, a bound on the tiles' gain that
// any AVX-512-BF16 machine can measure.
void run_precision(benchmark::State& st, bool bwd) {
    omp_set_num_threads(g_threads);
    const int64_t N = st.range(0), d = st.range(1), H = std::max<int64_t>(1, 8 * 2048 * 2048 / (N * N));
    const int64_t mode = st.range(2);
    if (mode == 2 && cpu::simd_isa() < cpu::Isa::avx512_bf16) {
        st.SkipWithError("no AVX-512-BF16 (or capped below avx512_bf16)");
        return;
    }
    if (mode == 4 && cpu::simd_isa() < cpu::Isa::avx512_bf16) {
        st.SkipWithError("no AVX-512-BF16 (or capped below avx512_bf16)");
        return;
    }
    if (mode == 3 && !(cpu::simd_isa() == cpu::Isa::amx && cpu::amx_permitted())) {
        st.SkipWithError("no usable AMX (or capped below amx)");
        return;
    }
    Problem pr(1, H, N, d, false);
    pr.p.bf16      = mode != 0;
    const auto old = cpu::set_bf16_attention_path(mode == 3   ? cpu::Bf16AttentionPath::amx
                                                  : mode == 2 ? cpu::Bf16AttentionPath::dot
                                                              : cpu::Bf16AttentionPath::rounded_fp32);
    for (auto _ : st) {
        if (mode == 4) {
            cpu::detail::flash_kernels().forward_amx_untimed_tiles(pr.p);
            if (bwd) cpu::detail::flash_kernels().backward_amx_untimed_tiles(pr.p, pr.g);
        } else {
            cpu::flash_attention_forward(pr.p);
            if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
        }
        benchmark::ClobberMemory();
    }
    cpu::set_bf16_attention_path(old);
    st.counters["GFLOP/s"] = benchmark::Counter(attn_flops(1, H, N, d, false, bwd) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
    const char* what = mode == 0   ? " fp32"
                       : mode == 1 ? " bf16 rounded_fp32"
                       : mode == 2 ? " bf16 dot"
                       : mode == 3 ? " bf16 amx"
                                   : " bf16 amx, tile products free (a bound)";
    st.SetLabel(std::string(cpu::isa_name(mode >= 2 ? cpu::simd_isa() : cpu::fp32_variant_isa())) + what +
                " H=" + std::to_string(H) + " threads=" + std::to_string(g_threads));
}
// Short calls (what kAmxMinQueries and kAmxMinKeys decide): B = 8, H = 4, d = 64 (the D2L model's
// heads), Tq queries against Tk keys, bf16 compute on the fp32 tiles (path 1, rounded_fp32), on
// vdpbf16ps (path 2, dot) or on the AMX tiles (path 3); forward, or forward+backward with Tq = Tk
// (the training step's self-attention). Skipped where the path is not usable.
void run_few_queries(benchmark::State& st, bool bwd) {
    omp_set_num_threads(g_threads);
    const int64_t Tq = st.range(0), Tk = st.range(1), mode = st.range(2), B = 8, H = 4, d = 64;
    if ((mode >= 2 && cpu::simd_isa() < cpu::Isa::avx512_bf16) ||
        (mode == 3 && !(cpu::simd_isa() == cpu::Isa::amx && cpu::amx_permitted()))) {
        st.SkipWithError(mode == 3 ? "no usable AMX (or capped below amx)" : "no AVX-512-BF16");
        return;
    }
    Problem pr(B, H, Tq, Tk, d, false);
    pr.p.bf16      = true;
    const auto old = cpu::set_bf16_attention_path(mode == 3   ? cpu::Bf16AttentionPath::amx
                                                  : mode == 2 ? cpu::Bf16AttentionPath::dot
                                                              : cpu::Bf16AttentionPath::rounded_fp32);
    for (auto _ : st) {
        cpu::flash_attention_forward(pr.p);
        if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
        benchmark::ClobberMemory();
    }
    cpu::set_bf16_attention_path(old);
    st.SetLabel(std::string(mode == 3 ? "amx" : mode == 2 ? "dot" : "rounded_fp32") +
                " threads=" + std::to_string(g_threads));
}
void BM_attention_bf16_few_queries_fwd(benchmark::State& st) { run_few_queries(st, false); }
void BM_attention_bf16_few_queries_fwdbwd(benchmark::State& st) { run_few_queries(st, true); }
BENCHMARK(BM_attention_bf16_few_queries_fwd)
    ->ArgsProduct({{1, 4, 8, 16, 32, 64, 128}, {10, 32, 64, 128, 256, 512}, {1, 2, 3}})
    ->ArgNames({"Tq", "Tk", "path"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->Apply(bench_default_min_time<100>);
void self_attention_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t t : {10, 16, 24, 32, 64, 128})
        for (int64_t mode : {1, 2, 3}) b->Args({t, t, mode});
}
BENCHMARK(BM_attention_bf16_few_queries_fwdbwd)
    ->Apply(self_attention_shapes)
    ->ArgNames({"Tq", "Tk", "path"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->Apply(bench_default_min_time<100>);

void BM_attention_flash_precision_fwd(benchmark::State& st) { run_precision(st, false); }
void BM_attention_flash_precision_fwdbwd(benchmark::State& st) { run_precision(st, true); }
void precision_shapes(benchmark::internal::Benchmark* b) {
    for (int64_t d : {64, 128})
        for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384})
            for (int64_t bf : {0, 1, 2, 3, 4}) b->Args({n, d, bf});
    b->ArgNames({"N", "d", "bf16"})->Unit(benchmark::kMillisecond)->UseRealTime();
    bench_default_min_time<1000>(b);
}
BENCHMARK(BM_attention_flash_precision_fwd)->Apply(precision_shapes);
BENCHMARK(BM_attention_flash_precision_fwdbwd)->Apply(precision_shapes);

// The op on storage dtypes (ops/attention.h), forward, on the side-by-side shapes, causal (top-left)
// too: float16 q, k, v (widened by F16C, the fp32 flash kernel, the output rounded back) and
// bfloat16 (widened, bf16 compute) against the same call on float32 tensors, the reference path
// whose cost the conversions add to. Arg dtype: 0 float32, 1 float16, 2 bfloat16. The side by side
// with PyTorch 2.6's float16 attention is bench/torch2_attn_fp16.py (bench/RESULTS.md).
void BM_attention_sdpa_dtype_fwd(benchmark::State& st) {
    omp_set_num_threads(g_threads);
    const int64_t B = st.range(0), H = st.range(1), N = st.range(2), d = st.range(3);
    const bool causal = st.range(4) != 0;
    const qkv::DType dt = st.range(5) == 1 ? qkv::DType::f16 : st.range(5) == 2 ? qkv::DType::bf16 : qkv::DType::f32;
    Problem pr(B, H, N, d, false);  // its random q, k, v
    auto tensor = [&](const std::vector<float>& x) { return qkv::from_vector(x, {B, H, N, d}).to(dt); };
    const qkv::Tensor q = tensor(pr.q), k = tensor(pr.k), v = tensor(pr.v);
    qkv::AttentionMask m;
    m.causal = causal ? qkv::CausalAlign::top_left : qkv::CausalAlign::none;
    qkv::AttentionOptions opt;
    opt.backend = qkv::AttentionBackend::flash;
    for (auto _ : st) {
        qkv::Tensor out = qkv::scaled_dot_product_attention(q, k, v, m, opt);
        benchmark::DoNotOptimize(out.raw_data());
    }
    st.counters["GFLOP/s"] = benchmark::Counter(attn_flops(B, H, N, d, causal, false) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
    st.SetLabel(std::string(qkv::dtype_name(dt)) + (causal ? " causal " : " ") +
                cpu::isa_name(cpu::fp32_variant_isa()) + " threads=" + std::to_string(g_threads));
}
void sdpa_dtype_shapes(benchmark::internal::Benchmark* b) {
    for (const auto& s : {std::vector<int64_t>{8, 8, 128, 64}, {4, 8, 512, 64}, {1, 8, 2048, 64}, {1, 8, 4096, 64}})
        for (int64_t causal : {0, 1})
            for (int64_t dt : {0, 1, 2}) b->Args({s[0], s[1], s[2], s[3], causal, dt});
    b->ArgNames({"B", "H", "N", "d", "causal", "dtype"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_attention_sdpa_dtype_fwd)->Apply(sdpa_dtype_shapes);

// The float16 conversions of one (1, 8, 4096, 64) tensor (2 Mi elements): the F16C kernels
// (cpu/fp16.h, threaded) against core/fp16.h's scalar reference loops. Arg: 0 reference, 1 kernel.
void BM_fp16_convert_to(benchmark::State& st) {
    omp_set_num_threads(g_threads);
    const int64_t n = int64_t(1) << 21;
    Problem pr(1, 8, 4096, 64, false);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (auto _ : st) {
        if (st.range(0)) cpu::convert_to_fp16(pr.q.data(), h.data(), n);
        else qkv::float_to_fp16(pr.q.data(), h.data(), n);
        benchmark::ClobberMemory();
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * n * 6);
    st.SetLabel(st.range(0) ? cpu::isa_name(cpu::fp32_variant_isa()) : "scalar reference");
}
void BM_fp16_convert_from(benchmark::State& st) {
    omp_set_num_threads(g_threads);
    const int64_t n = int64_t(1) << 21;
    Problem pr(1, 8, 4096, 64, false);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    qkv::float_to_fp16(pr.q.data(), h.data(), n);
    for (auto _ : st) {
        if (st.range(0)) cpu::convert_from_fp16(h.data(), pr.out.data(), n);
        else qkv::fp16_to_float(h.data(), pr.out.data(), n);
        benchmark::ClobberMemory();
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * n * 6);
    st.SetLabel(st.range(0) ? cpu::isa_name(cpu::fp32_variant_isa()) : "scalar reference");
}
BENCHMARK(BM_fp16_convert_to)->Arg(0)->Arg(1)->ArgName("kernel")->UseRealTime();
BENCHMARK(BM_fp16_convert_from)->Arg(0)->Arg(1)->ArgName("kernel")->UseRealTime();

long maxrss_kib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

// Peak RSS of one (1, 8, N, 64) forward+backward beyond its inputs, outputs and gradients
// (allocated and touched first), on g_threads threads.
int mem_probe(int64_t N) {
    omp_set_num_threads(g_threads);
    Problem pr(1, 8, N, 64, false);
    const long before = maxrss_kib();
    const auto t0     = std::chrono::steady_clock::now();
    cpu::flash_attention_forward(pr.p);
    cpu::flash_attention_backward(pr.p, pr.g);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const long after = maxrss_kib();
    const double io  = double(8 * pr.q.size() + 2 * pr.lse.size()) * 4 / 1048576.0;
    std::printf("MEM flash fwd+bwd shape=1,8,%lld,64 threads=%d maxrss_before=%.1fMiB "
                "maxrss_after=%.1fMiB delta=%.1fMiB (inputs+outputs+grads = %.0f MiB) time=%.2fs "
                "%.1f GFLOP/s\n",
                (long long)N, g_threads, before / 1024.0, after / 1024.0, (after - before) / 1024.0,
                io, secs, attn_flops(1, 8, N, 64, false, true) / secs / 1e9);
    return 0;
}

// Single-thread tile GEMMs of the flash kernel's shapes, hot in cache: the kernel's own
// micro-kernels (detail::flash_tile_gemm) vs oneDNN dnnl_sgemm on the same row-major operands.
int tile_probe() {
    omp_set_num_threads(1);
    struct Shape {
        int64_t M, N, K;
        const char* what;
    };
    const Shape shapes_[] = {{128, 64, 64, "S^T = K Q^T (keys x queries, K = d)"},
                             {64, 64, 128, "O += P V (queries x d, K = keys)"},
                             {128, 64, 64, "dV += P dO (keys x d, K = queries)"},
                             {256, 64, 64, "S^T 256 keys"},
                             {64, 64, 512, "O += P V, 512 keys"}};
    for (const auto& s : shapes_) {
        std::vector<float> A(size_t(s.M * s.K), 0.5f), Bm(size_t(s.K * s.N), 0.25f), C(size_t(s.M * s.N));
        auto time_it = [&](auto&& f) {
            for (int w = 0; w < 200; ++w) f();
            double best = 1e30;
            // Best of many short batches: on a shared machine some run without preemption.
            for (int rep = 0; rep < 400; ++rep) {
                const int  iters = 20;
                const auto t0    = std::chrono::steady_clock::now();
                for (int it = 0; it < iters; ++it) f();
                const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
                best = dt < best ? dt : best;
            }
            return 2.0 * double(s.M * s.N * s.K) / best / 1e9;
        };
        const double mk = time_it([&] {
            cpu::detail::flash_tile_gemm({s.M, s.N, s.K, A.data(), s.K, Bm.data(), s.N, C.data(), s.N});
        });
        const double dn = time_it([&] {
            dnnl_sgemm('N', 'N', s.M, s.N, s.K, 1.0f, A.data(), s.K, Bm.data(), s.N, 0.0f, C.data(), s.N);
        });
        std::printf("TILE M=%lld N=%lld K=%lld  micro-kernel %.1f GFLOP/s  dnnl_sgemm %.1f GFLOP/s  (%s)\n",
                    (long long)s.M, (long long)s.N, (long long)s.K, mk, dn, s.what);
    }
    return 0;
}

// The op (scaled_dot_product_attention, flash backend) on float32, float16 or bfloat16 tensors:
// --probe=sdpa_<f32|f16|bf16>_<fwd|causal_fwd>, rated per CPU-second as probe() does.
int probe_sdpa(const std::string& what, long long B, long long H, long long N, long long d, int reps) {
    const std::string dts = what.substr(5, what.find('_', 5) - 5);
    const bool causal = what.find("causal") != std::string::npos;
    const qkv::DType dt = dts == "f16" ? qkv::DType::f16 : dts == "bf16" ? qkv::DType::bf16 : qkv::DType::f32;
    Problem pr(B, H, N, d, false);
    auto tensor = [&](const std::vector<float>& x) { return qkv::from_vector(x, {B, H, N, d}).to(dt); };
    const qkv::Tensor q = tensor(pr.q), k = tensor(pr.k), v = tensor(pr.v);
    qkv::AttentionMask m;
    m.causal = causal ? qkv::CausalAlign::top_left : qkv::CausalAlign::none;
    qkv::AttentionOptions opt;
    opt.backend = qkv::AttentionBackend::flash;
    (void)qkv::scaled_dot_product_attention(q, k, v, m, opt);  // warm-up
    const std::clock_t c0 = std::clock();
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) (void)qkv::scaled_dot_product_attention(q, k, v, m, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpus = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double gf   = attn_flops(B, H, N, d, causal, false) * reps / 1e9;
    std::printf("PROBE %s %lld,%lld,%lld,%lld reps=%d threads=%d GFLOP=%.3f wall=%.3fs cpu=%.3fs %.1f GFLOP/s wall, "
                "%.1f GFLOP/s per cpu-second x threads\n", what.c_str(), B, H, N, d, reps, g_threads, gf, secs, cpus,
                gf / secs, gf / cpus * g_threads);
    return 0;
}

int probe(const std::string& what, const std::string& shp, int reps) {
    omp_set_num_threads(g_threads);
    long long B, H, N, d;
    if (std::sscanf(shp.c_str(), "%lld,%lld,%lld,%lld", &B, &H, &N, &d) != 4) return 2;
    if (what.rfind("sdpa_", 0) == 0) return probe_sdpa(what, B, H, N, d, reps);
    const bool causal = what.rfind("causal", 0) == 0;
    const bool bwd    = what.find("fwdbwd") != std::string::npos;
    Problem    pr(B, H, N, d, causal);
    pr.p.dropout_p = g_dropout, pr.p.dropout_seed = 1234;
    cpu::flash_attention_forward(pr.p);  // warm-up: workspace, page faults
    const std::clock_t c0 = std::clock();
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        cpu::flash_attention_forward(pr.p);
        if (bwd) cpu::flash_attention_backward(pr.p, pr.g);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpus = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double gf   = attn_flops(B, H, N, d, causal, bwd) * reps / 1e9;
    // Per CPU-second x threads: what dedicated cores would give when the machine is shared.
    std::printf("PROBE %s %s reps=%d threads=%d GFLOP=%.3f wall=%.3fs cpu=%.3fs %.1f GFLOP/s wall, "
                "%.1f GFLOP/s per cpu-second x threads\n", what.c_str(), shp.c_str(), reps, g_threads,
                gf, secs, cpus, gf / secs, gf / cpus * g_threads);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    if ((g_threads = bench_take_threads(argc, argv, 2)) < 0) return 2;
    std::vector<char*> rest;
    bool               mem = false, tiles = false;
    std::string        probe_what, probe_shape = "1,8,2048,64";
    int                probe_reps = 5;
    int64_t            memN = 16384;
    for (int i = 0; i < argc; ++i) {
        if (std::strncmp(argv[i], "--isa=", 6) == 0) {  // qkv's kernels only: QKV_MAX_ISA also caps oneDNN
            try {
                cpu::set_max_isa(cpu::parse_isa(argv[i] + 6, "--isa"));
            } catch (const qkv::Error& e) {
                std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
                return 2;
            }
        }
        else if (std::strcmp(argv[i], "--mem") == 0) {
            mem = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') memN = std::atoll(argv[++i]);
        } else if (std::strcmp(argv[i], "--tiles") == 0) tiles = true;
        else if (std::strncmp(argv[i], "--probe=", 8) == 0) probe_what = argv[i] + 8;
        else if (std::strncmp(argv[i], "--shape=", 8) == 0) probe_shape = argv[i] + 8;
        else if (std::strncmp(argv[i], "--reps=", 7) == 0) probe_reps = std::atoi(argv[i] + 7);
        else if (std::strncmp(argv[i], "--dropout=", 10) == 0) g_dropout = float(std::atof(argv[i] + 10));
        else rest.push_back(argv[i]);
    }
    if (mem) return mem_probe(memN);
    if (tiles) return tile_probe();
    if (!probe_what.empty()) return probe(probe_what, probe_shape, probe_reps);
    return bench_run(int(rest.size()), rest.data());
}
