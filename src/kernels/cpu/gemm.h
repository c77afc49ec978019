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
void gemm(bool trans_a,
          bool trans_b,
          int64_t M,
          int64_t N,
          int64_t K,
          float alpha,
          const float* A,
          int64_t lda,
          const float* B,
          int64_t ldb,
          float beta,
          float* C,
          int64_t ldc);

/// GemmBatchedParams' `batch` GEMMs (fp32). A shared B (stride_b = 0) with the A and C blocks
/// stacked row after row (stride_a = M·lda, stride_c = M·ldc, !trans_a) runs as one
/// (batch·M)-row GEMM. Otherwise products below 2·256³ FLOPs (D2L's attention heads, e.g.
/// (9×64)·(64×9)), or any batch that divides evenly over the threads, run one whole GEMM per
/// thread; the rest run one at a time with all threads inside oneDNN. Throws as gemm.
void gemm_batched(const GemmBatchedParams<float>& p);

}  // namespace qkv::kernels::cpu
