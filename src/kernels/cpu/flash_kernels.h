#pragma once
// The flash attention builds' entry points as one table per ISA tier, and the helpers every build
// shares (compiled once, in flash_attention.cpp, for plain x86-64). Each build's translation unit
// (flash_attention.cpp: portable; flash_attention_<isa>.cpp) fills the entries it has
// (flash_build<I>); flash_kernels() gives the table of the capped tier, where an entry a tier's
// build lacks is the tier below's (the avx512_bf16 tier runs the avx512 fp32 kernels, and so on).
// flash_attention.cpp's public entry points only choose among a table's entries.
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/params.h"

namespace qkv::kernels::cpu::detail {

/// C (M x N) = A (M x K, row-major, lda) · B (K x N, ldb), row-major C (ldc); N a multiple of 16.
struct TileGemmParams {
    int64_t      M = 0, N = 0, K = 0;
    const float* A   = nullptr;
    int64_t      lda = 0;
    const float* B   = nullptr;
    int64_t      ldb = 0;
    float*       C   = nullptr;
    int64_t      ldc = 0;
};

using FlashForwardFn  = void (*)(const AttentionParams<float>&);
using FlashBackwardFn = void (*)(const AttentionParams<float>&, const AttentionGradParams<float>&);

/// The most keys the few-keys kernels (flash_few_keys.h) take: key vectors held in registers.
constexpr int64_t kFewKeysMax = 32;

/// One tier's flash attention entry points. Null: this tier has no such build.
struct FlashKernels {
    FlashForwardFn  forward  = nullptr;  // fp32 tiles (also bf16 values as Bf16AttentionPath::rounded_fp32)
    FlashBackwardFn backward = nullptr;
    void (*tile_gemm)(const TileGemmParams&) = nullptr;  // the fp32 GEMM micro-kernels
    FlashForwardFn  forward_dot  = nullptr;  // p.bf16: every product as vdpbf16ps (Bf16AttentionPath::dot)
    FlashBackwardFn backward_dot = nullptr;
    FlashForwardFn  forward_amx  = nullptr;  // p.bf16: the AMX tiles (AMX usable)
    FlashBackwardFn backward_amx = nullptr;
    FlashForwardFn  forward_amx_emulated  = nullptr;  // p.bf16: the AMX kernels, tiles in plain code
    FlashBackwardFn backward_amx_emulated = nullptr;
    /// For bench_attention only: the AMX kernels with tiles that do nothing (simd_amx.h: TilesNull),
    /// timing everything but the tile products; results meaningless. p.bf16 only.
    FlashForwardFn  forward_amx_untimed_tiles  = nullptr;
    FlashBackwardFn backward_amx_untimed_tiles = nullptr;
    FlashForwardFn  forward_few_keys  = nullptr;  // fp32, 1 <= Tk <= kFewKeysMax (flash_few_keys.h)
    FlashBackwardFn backward_few_keys = nullptr;
};

/// The entries of the build compiled for tier I (defined in that build's translation unit).
template <Isa I>
FlashKernels flash_build();
template <> FlashKernels flash_build<Isa::scalar>();
template <> FlashKernels flash_build<Isa::avx2>();
template <> FlashKernels flash_build<Isa::avx512>();
template <> FlashKernels flash_build<Isa::avx512_bf16>();
template <> FlashKernels flash_build<Isa::amx>();

/// The table of the capped tier (simd_isa()): flash_build of that tier, with the entries it lacks
/// taken from the tiers below. Built once.
const FlashKernels& flash_kernels();

/// flash_kernels().tile_gemm: for bench/bench_attention.cpp --tiles (vs dnnl_sgemm).
void flash_tile_gemm(const TileGemmParams& t);

/// This thread's workspace of at least n floats, 64-byte aligned; grown (never shrunk) and kept
/// for later calls, so steady-state calls do not allocate. Arenas of 2 MiB or more get
/// MADV_HUGEPAGE (first-touch cost of fresh 4 KiB pages; docs/kernels/flash_attention.md).
float* flash_thread_workspace(int64_t n);

/// The calling thread's second arena (at least `bytes`, 64-byte aligned, grown and kept like
/// flash_thread_workspace's): data a call packs once before its parallel region (the AMX
/// forward's K and V^T), which the workspace of the calling thread cannot hold.
void* flash_call_buffer(int64_t bytes);

}  // namespace qkv::kernels::cpu::detail
