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
/// Runs the AVX-512, AVX2 or portable build as the capped CPU allows (cpu/isa.h: simd_isa()).
/// Assumes valid input.
void flash_attention_forward(const AttentionParams<float>& p);

/// Backward: writes dq (B, H, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, Dv) (contiguous; dk/dv
/// overwritten, summed over the query heads of a GQA group) from dout and the forward's q, k, v,
/// out and lse (p.out, p.lse as flash_attention_forward or ref::attention_forward wrote them).
/// Per block pair: P = exp(S - lse), dV += (P Z)^T dO, dP = dO V^T, dS = P (Z dP - D) with
/// D = rowsum(dO o O), dQ += dS K, dK += dS^T Q (flash-attention 2, Alg. 2). Parallel over
/// (batch, kv head) when B * Hkv >= threads, else over key blocks with private dQ accumulators.
void flash_attention_backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g);

}  // namespace qkv::kernels::cpu
