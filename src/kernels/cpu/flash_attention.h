#pragma once
// Fused flash-style CPU attention (fp32): tiles of query and key blocks with an online softmax, so
// the Tq x Tk score matrix never exists; backward recomputes probabilities from the saved
// logsumexp. Same semantics as ref::attention_forward/backward (ref/attention.h), which is the
// spec. Derivation, masking, dropout RNG and block sizes: docs/kernels/flash_attention.md.
#include "kernels/cpu/isa.h"
#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// Forward: out (B, H, Tq, Dv) and lse (B, H, Tq) from q (B, H, Tq, D), k (B, Hkv, Tk, D),
/// v (B, Hkv, Tk, Dv), every AttentionParams option (scale, valid_lens rank 1/2, causal
/// top_left/bottom_right, bool/additive mask through strides, dropout, GQA/MQA), D and Dv >= 1 of
/// any size. lse (and lse_lo) may be null when no backward follows. Fully masked rows: out 0,
/// lse -inf. Parallel (OpenMP) over (batch, head, query
/// block); results do not depend on the thread count. Tq, Tk < 2^24. Per-thread workspace is
/// kept between calls (no allocation in steady state). Flash-attention 2 (Dao 2023), Alg. 1.
/// Runs the AVX-512, AVX2 or portable build as the capped CPU allows (cpu/isa.h: simd_isa());
/// with p.bf16, the AMX or AVX-512-BF16 build where bf16_attention_tiles / bf16_attention_uses_dot say so. Assumes valid input.
void flash_attention_forward(const AttentionParams<float>& p);

/// Backward: writes dq (B, H, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, Dv) (contiguous; dk/dv
/// overwritten, summed over the query heads of a GQA group) from dout and the forward's q, k, v,
/// out and lse (p.out, p.lse as flash_attention_forward or ref::attention_forward wrote them).
/// Per block pair: P = exp(S - lse), dV += (P Z)^T dO, dP = dO V^T, dS = P (Z dP - D) with
/// D = rowsum(dO o O), dQ += dS K, dK += dS^T Q (flash-attention 2, Alg. 2). Parallel over
/// (batch, kv head) when B * Hkv >= threads, else over key blocks with private dQ accumulators.
void flash_attention_backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g);

/// How calls with AttentionParams::bf16 compute their products. Every path rounds the same operands
/// to bf16 at the same points and keeps every sum, the softmax and the statistics in fp32; they
/// differ in summation order, where the softmax scale multiplies (amx, dot: the fp32 score sum;
/// rounded_fp32: the packed bf16(q)), and amx/dot take bf16 values below 2^-126 (subnormal) as 0.
///   amx:          every product of the forward and the backward on the AMX tiles (tdpbf16ps;
///                 the amx tier: the CPU has AMX-TILE/AMX-BF16, Linux granted the tile state, the
///                 cap allows it), O and dQ kept transposed; a call whose K or V holds a
///                 non-finite bf16 value runs dot (forward) or rounded_fp32 (backward).
///   dot:          every product of the forward and the backward as vdpbf16ps on bf16 word
///                 operands (the avx512_bf16 tier: the CPU has AVX-512-BF16 and the cap allows
///                 it); a backward whose K or V holds a non-finite bf16 value runs rounded_fp32.
///   rounded_fp32: the fp32 tiles of the capped tier on bf16-rounded values.
/// automatic (the default): amx where usable, Tq >= kAmxMinQueries and Tk >= kAmxMinKeys, else dot where
/// the tier allows it and vdpbf16ps runs at full rate (CpuFeatures::bf16_dot_full_rate), else
/// rounded_fp32. A forced path the tier cannot run falls back the same way. Not thread-safe: call
/// between kernel calls. Returns the previous setting.
enum class Bf16AttentionPath { automatic, amx, dot, rounded_fp32 };
Bf16AttentionPath set_bf16_attention_path(Bf16AttentionPath p);

/// The smallest call `automatic` puts on the AMX tiles: at least kAmxMinQueries queries and
/// kAmxMinKeys keys. Below them the tiles' fixed costs (packing K, V and the query words per call,
/// padding Tq and Tk to whole 16 x 32 tiles, tile configuration) outweigh their products. On an
/// Intel Xeon with AMX (bench/RESULTS.md, "AMX on an AMX machine"; 8 x 4 heads, d = 64, 2 threads)
/// a tile call cost about 1.7 / 3 / 11 us per head at Tk = 10 / 64 / 256 whatever Tq up to 16,
/// slower than the vdpbf16ps build at Tk = 10 for every Tq up to 32 (and that build is itself
/// 1.3-2x slower than the fp32 kernel the CPU falls back to); at Tq = Tk >= 512 the tiles ran
/// 1.7-3.5x faster than fp32. Between, the crossover is estimated from those two (fixed cost +
/// per-score rates: about Tq = 64 at Tk = 64 and Tk = 512; 128 leaves a factor 2), not measured; the D2L training step
/// (Tq, Tk <= ~10) stays off the tiles.
constexpr int64_t kAmxMinQueries = 128;
constexpr int64_t kAmxMinKeys    = 64;

/// Whether a bf16 call off the tiles takes the dot path now (the setting, the cap and the CPU).
bool bf16_attention_uses_dot();

/// Where a bf16 forward or backward of Tq queries and Tk keys runs its products: on the AMX tiles, on the tiles
/// emulated in plain code (set_amx_tile_emulation), or off them (bf16_attention_uses_dot says how).
enum class Bf16AttentionTiles { none, amx, emulated };
Bf16AttentionTiles bf16_attention_tiles(int64_t Tq, int64_t Tk);

/// For tests: with `on`, Bf16AttentionPath::amx runs the AMX kernels with every tile operation
/// emulated in plain code (simd_amx.h: TilesEmu, exact tdpbf16ps semantics, slow) wherever the
/// tier is avx512_bf16 or above, so the tile kernel is tested on machines without AMX. Returns the
/// previous setting. Not thread-safe, as set_bf16_attention_path.
bool set_amx_tile_emulation(bool on);

/// Which kernel runs an fp32 call with few keys. The few-keys kernels (flash_few_keys.h) hold K^T
/// and V^T of a (batch, head) as key-lane vectors and compute one score vector per query, without
/// the flash kernels' query blocks and 64 x 128 tiles, whose packing and zeroing cost several
/// times the products when Tk is ~10 (the D2L training step). They cover what few_keys_covers
/// says; the flash kernels run everything else.
///   automatic (the default): the few-keys kernels for Tk <= few_keys_auto_max_keys();
///   always: wherever few_keys_covers (Tk <= 32); never: the flash kernels only.
/// Not thread-safe, as set_bf16_attention_path. Returns the previous setting.
enum class FewKeysPath { automatic, always, never };
FewKeysPath set_few_keys_path(FewKeysPath p);

/// The most keys `automatic` gives the few-keys kernels, per tier (few_keys_auto_max_keys). On
/// AVX-512 they ran faster than the flash kernels up to 16 keys at the D2L shapes (10 queries,
/// d = 64, forward + backward; one thread); at 17-32 keys neither won consistently. On AVX2 they won
/// 1.45-2.2x at every key count measured up to 32 (bench/RESULTS.md, "Attention for few keys").
/// The portable build (16 lanes, as AVX-512) takes the AVX-512 cut; it was not timed.
constexpr int64_t kFewKeysAutoMaxKeys     = 16;
constexpr int64_t kFewKeysAutoMaxKeysAvx2 = 32;

/// The cut of the capped tier (simd_isa()): kFewKeysAutoMaxKeysAvx2 on avx2, else kFewKeysAutoMaxKeys.
int64_t few_keys_auto_max_keys();

/// Whether the few-keys kernels compute this call: fp32 (not p.bf16), 1 <= Tk <= 32, scale,
/// valid_lens, causal (both alignments), dropout, GQA/MQA, strides, lse and lse_lo; no bool or
/// additive mask, soft cap, ALiBi or sliding window.
bool few_keys_covers(const AttentionParams<float>& p);

/// Whether flash_attention_forward/backward send this call to the few-keys kernels now.
bool uses_few_keys(const AttentionParams<float>& p);

}  // namespace qkv::kernels::cpu
