#pragma once
// Reference GEMM (the spec for kernels::cpu::gemm): plain triple loops, templated on float/double
// so gradcheck can run matmul in float64. Row-major, BLAS argument order and semantics.
#include <cstdint>

namespace qkv::kernels::ref {

/// C = alpha·op(A)·op(B) + beta·C, row-major. op(A) is (M, K): A itself when !trans_a (A is M×K,
/// row stride lda >= K), Aᵀ when trans_a (A is K×M, lda >= M); likewise op(B) is (K, N) with
/// B N×K when trans_b (ldb >= K) or K×N otherwise (ldb >= N). C is M×N with ldc >= N.
/// beta == 0 overwrites C without reading it (NaN in C does not propagate), as in BLAS.
/// Sums over k run in increasing k, accumulating in T. C must not alias A or B.
template <class T>
void gemm(bool trans_a,
          bool trans_b,
          int64_t M,
          int64_t N,
          int64_t K,
          T alpha,
          const T* A,
          int64_t lda,
          const T* B,
          int64_t ldb,
          T beta,
          T* C,
          int64_t ldc);

/// `batch` independent GEMMs (cublasSgemmStridedBatched order): GEMM i uses A + i·stride_a,
/// B + i·stride_b, C + i·stride_c. stride_a or stride_b may be 0 (one operand shared by every
/// GEMM); stride_c must separate the C blocks (no two GEMMs write the same element).
template <class T>
void gemm_batched(bool trans_a,
                  bool trans_b,
                  int64_t M,
                  int64_t N,
                  int64_t K,
                  T alpha,
                  const T* A,
                  int64_t lda,
                  int64_t stride_a,
                  const T* B,
                  int64_t ldb,
                  int64_t stride_b,
                  T beta,
                  T* C,
                  int64_t ldc,
                  int64_t stride_c,
                  int64_t batch);

}  // namespace qkv::kernels::ref
