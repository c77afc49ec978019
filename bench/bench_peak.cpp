// Peak arithmetic rate of this CPU's vector and matrix units, the denominators of "share of peak"
// in bench/RESULTS.md: register-only loops with enough independent accumulators to cover each
// instruction's latency, one loop per thread (OpenMP), so the figure is the issue rate of the
// units and not of memory.
//   bench_peak [--threads=N] [google-benchmark flags]
// fp32_fma:  vfmadd231ps zmm (AVX-512) or ymm (AVX2): 2 FLOP per lane.
// bf16_dp:   vdpbf16ps zmm (AVX-512-BF16): 32 bf16 products summed pairwise into 16 fp32 lanes,
//            64 FLOP per instruction.
// amx_bf16:  tdpbf16ps on 16 x 32 bf16 tiles (AMX-BF16): 16·16·32 products = 16,384 FLOP per
//            instruction, four independent accumulator tiles. Skipped (with a message) where Linux
//            grants no tile state (cpu/isa.h: amx_permitted()).
// Each benchmark is skipped on a CPU without its instructions.
#include <benchmark/benchmark.h>

#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "isa_cap.h"

namespace {

namespace cpu = qkv::kernels::cpu;

int g_threads = 2;

constexpr int64_t kInner = 1 << 20;  // instructions per accumulator per loop

// 12 independent accumulators: FMA latency 4 cycles x 2 ports (and vdpbf16ps latency) covered.
__attribute__((target("avx512f"))) double loop_fma512() {
    __m512       acc[12];
    const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
    for (auto& x : acc) x = _mm512_setzero_ps();
    for (int64_t n = 0; n < kInner; ++n) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
    __m512 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
    return 12.0 * double(kInner) * 32.0;
}

__attribute__((target("avx2,fma"))) double loop_fma256() {
    __m256       acc[12];
    const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
    for (auto& x : acc) x = _mm256_setzero_ps();
    for (int64_t n = 0; n < kInner; ++n) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
    }
    __m256 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
    return 12.0 * double(kInner) * 16.0;
}

__attribute__((target("avx512f,avx512bf16"))) double loop_dpbf16() {
    __m512        acc[12];
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
    for (auto& x : acc) x = _mm512_setzero_ps();
    for (int64_t n = 0; n < kInner; ++n) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    __m512 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
    return 12.0 * double(kInner) * 64.0;
}

// Tile configuration of palette 1: tiles 0-3 are 16 x 16 fp32 accumulators (64-byte rows), tiles
// 4-5 the A operands (16 rows x 32 bf16), tiles 6-7 the B operands (16 rows of 32 bf16 pairs).
struct alignas(64) TileConfig {
    uint8_t  palette_id = 1;
    uint8_t  start_row  = 0;
    uint8_t  reserved[14]{};
    uint16_t colsb[16]{};
    uint8_t  rows[16]{};
};

__attribute__((target("amx-tile,amx-bf16"))) double loop_amx(int64_t inner) {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    alignas(64) uint16_t ones[16 * 32];
    for (auto& x : ones) x = 0x3f80;  // bf16 1.0
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (int64_t n = 0; n < inner; ++n) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    alignas(64) float c[16 * 16];
    _tile_stored(0, c, 64);
    _tile_release();
    benchmark::DoNotOptimize(c[0]);
    return 4.0 * double(inner) * 16384.0;
}

template <class F>
void run(benchmark::State& st, F body, const char* label) {
    omp_set_num_threads(g_threads);
    double flop = 0;
    for (auto _ : st) {
        double f = 0;
#pragma omp parallel reduction(+ : f)
        f += body();
        flop = f;
    }
    st.counters["GFLOP/s"] = benchmark::Counter(flop / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    st.SetLabel(std::string(label) + " threads=" + std::to_string(g_threads));
}

void BM_peak_fp32_fma(benchmark::State& st) {
    const auto& f = cpu::cpu_features();
    if (f.avx512) return run(st, loop_fma512, "vfmadd231ps zmm");
    if (f.avx2) return run(st, loop_fma256, "vfmadd231ps ymm");
    st.SkipWithError("no AVX2/FMA on this CPU");
}
void BM_peak_bf16_dp(benchmark::State& st) {
    if (!cpu::cpu_features().avx512_bf16) return st.SkipWithError("no AVX-512-BF16 on this CPU");
    run(st, loop_dpbf16, "vdpbf16ps zmm");
}
void BM_peak_amx_bf16(benchmark::State& st) {
    if (!cpu::amx_permitted()) return st.SkipWithError("AMX not usable here (no AMX-BF16, or Linux refused the tile state)");
    run(st, [] { return loop_amx(kInner / 16); }, "tdpbf16ps");
}

BENCHMARK(BM_peak_fp32_fma)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_peak_bf16_dp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_peak_amx_bf16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    if ((g_threads = bench_take_threads(argc, argv, 2)) < 0) return 2;
    return bench_run(argc, argv);
}
