#pragma once
// Fast fp32 GEMM: oneDNN's dnnl_sgemm (row-major) for one product, and batched strided products
// that pick their threading by size (bench/RESULTS_matmul.md has the measurements).
// The reference is kernels::ref::gemm<T> (ref/matmul.h); semantics are identical.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// C = alpha·op(A)·op(B) + beta·C, fp32, row-major, BLAS argument order (as dnnl_sgemm).
/// op(A) is (M, K): A (M×K, lda >= K) or, when trans_a, Aᵀ of a K×M matrix (lda >= M);
/// op(B) is (K, N): B (K×N, ldb >= N) or, when trans_b, Bᵀ of an N×K matrix (ldb >= K);
/// C is M×N with ldc >= N and must not alias A or B. beta == 0 overwrites C without reading it.
/// M, N or K may be 0 (K == 0 gives C = beta·C). Uses all OpenMP threads (oneDNN threads
/// through OpenMP; inside a parallel region it runs on the calling thread only).
/// Throws qkv::Error if oneDNN reports a failure (invalid leading dimensions).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// GemmBatchedParams' `batch` GEMMs (fp32). A shared B (stride_b = 0) with the A and C blocks
/// stacked row after row (stride_a = M·lda, stride_c = M·ldc, !trans_a) runs as one
/// (batch·M)-row GEMM. Otherwise products below 2·256³ FLOPs (D2L's attention heads, e.g.
/// (9×64)·(64×9)), or any batch that divides evenly over the threads, run one whole GEMM per
/// thread; the rest run one at a time with all threads inside oneDNN. Throws as gemm.
void gemm_batched(const GemmBatchedParams<float>& p);

}  // namespace qkv::kernels::cpu

namespace qkv::kernels::cpu {

/// GemmBatchedParams' `batch` GEMMs with both operands rounded to bf16 (RNE, core/bf16.h) and the
/// products accumulated in fp32: C = op(round(A))·op(round(B)), the numerics of mixed-precision
/// (autocast) matrix products. alpha must be 1 and beta 0 (throws qkv::Error otherwise); stride_b
/// may be 0 (one B for every batch). Two paths with the same rounding of the inputs and fp32
/// accumulation (they differ only in summation order):
///   onednn:       one oneDNN bf16 matmul on bf16 copies (AMX tiles or AVX-512-BF16, as oneDNN
///                 picks); needs a non-reference oneDNN bf16 matmul and the ISA cap >= avx512_bf16.
///   rounded_fp32: the fp32 GEMM (gemm / gemm_batched) on bf16-rounded fp32 copies.
/// `automatic` (the default) takes onednn for products of at least kBf16OnednnMinFlops when the
/// cap allows amx and AMX is usable (amx_permitted), or the cap allows avx512_bf16 and vdpbf16ps
/// runs at full rate (CpuFeatures::bf16_dot_full_rate: AMD); otherwise rounded_fp32 (on Intel's
/// AVX-512-BF16 without AMX oneDNN's bf16 matmul is slower than its fp32 GEMM: bench/RESULTS.md). The copies
/// live in per-thread buffers that grow and are reused. Throws qkv::Error when oneDNN fails.
void gemm_bf16_batched(const GemmBatchedParams<float>& p);

/// The operand copies of gemm_bf16_batched, on the capped tier's vectors: bits[i] =
/// bf16_bits(src[i]) (core/bf16.h: RNE, NaN made quiet) when bits is non-null, else rounded[i] =
/// round_to_bf16(src[i]); i < n, one thread. Every tier gives the same bits.
void convert_bf16(const float* src, uint16_t* bits, float* rounded, int64_t n);

enum class Bf16GemmPath { automatic, onednn, rounded_fp32 };
/// Products below this many FLOPs (2·M·N·K per GEMM) take rounded_fp32 under `automatic`: the
/// oneDNN call's fixed cost outweighs the tiles there.
constexpr double kBf16OnednnMinFlops = 2.0 * 64 * 64 * 64;
/// Forces a path for later calls (tests and benchmarks run both); `onednn` falls back to
/// rounded_fp32 where oneDNN has no bf16 matmul or the cap is below avx512_bf16. Not thread-safe:
/// call between kernel calls. Returns the previous setting.
Bf16GemmPath set_bf16_gemm_path(Bf16GemmPath p);

/// Which path a large product takes now: "oneDNN bf16 matmul (<oneDNN implementation>)" or
/// "fp32 GEMM on bf16-rounded inputs (<why>)".
const char* bf16_gemm_path();

}  // namespace qkv::kernels::cpu
