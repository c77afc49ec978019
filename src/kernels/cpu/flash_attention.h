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
/// with p.bf16, the AVX-512-BF16 build where bf16_attention_path() says so. Assumes valid input.
void flash_attention_forward(const AttentionParams<float>& p);

/// Backward: writes dq (B, H, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, Dv) (contiguous; dk/dv
/// overwritten, summed over the query heads of a GQA group) from dout and the forward's q, k, v,
/// out and lse (p.out, p.lse as flash_attention_forward or ref::attention_forward wrote them).
/// Per block pair: P = exp(S - lse), dV += (P Z)^T dO, dP = dO V^T, dS = P (Z dP - D) with
/// D = rowsum(dO o O), dQ += dS K, dK += dS^T Q (flash-attention 2, Alg. 2). Parallel over
/// (batch, kv head) when B * Hkv >= threads, else over key blocks with private dQ accumulators.
void flash_attention_backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g);

/// How calls with AttentionParams::bf16 compute their products. Both round the same operands to
/// bf16 at the same points and keep every sum, the softmax and the statistics in fp32; they differ
/// in summation order, where the softmax scale multiplies (dot: the fp32 score sum; rounded_fp32:
/// the packed bf16(q)), and dot takes bf16 values below 2^-126 (subnormal) as 0 (AVX-512-BF16).
///   dot:          every product of the forward and the backward as vdpbf16ps on bf16 word
///                 operands (the avx512_bf16 tier: the CPU has AVX-512-BF16 and the cap allows
///                 it); a backward whose K or V holds a non-finite bf16 value runs rounded_fp32.
///   rounded_fp32: the fp32 tiles of the capped tier on bf16-rounded values.
/// automatic (the default): dot where the tier allows it and vdpbf16ps runs at full rate
/// (CpuFeatures::bf16_dot_full_rate), else rounded_fp32. `dot` falls back to rounded_fp32 where
/// the tier is below avx512_bf16. Not thread-safe: call between kernel calls. Returns the previous
/// setting.
enum class Bf16AttentionPath { automatic, dot, rounded_fp32 };
Bf16AttentionPath set_bf16_attention_path(Bf16AttentionPath p);

/// Whether a bf16 call takes the dot path now (the setting, the cap and the CPU).
bool bf16_attention_uses_dot();

}  // namespace qkv::kernels::cpu
