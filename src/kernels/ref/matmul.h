#pragma once
// Reference GEMM (the spec for kernels::cpu::gemm): plain triple loops, templated on float/double
// so gradcheck can run matmul in float64. Row-major, BLAS argument order and semantics.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// C = alpha·op(A)·op(B) + beta·C, row-major. op(A) is (M, K): A itself when !trans_a (A is M×K,
/// row stride lda >= K), Aᵀ when trans_a (A is K×M, lda >= M); likewise op(B) is (K, N) with
/// B N×K when trans_b (ldb >= K) or K×N otherwise (ldb >= N). C is M×N with ldc >= N.
/// beta == 0 overwrites C without reading it (NaN in C does not propagate), as in BLAS.
/// Sums over k run in increasing k, accumulating in T. C must not alias A or B.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc);

/// GemmBatchedParams' `batch` GEMMs, one after another with gemm<T>.
template <class T>
void gemm_batched(const GemmBatchedParams<T>& p);

}  // namespace qkv::kernels::ref
