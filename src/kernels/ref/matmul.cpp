// Reference GEMM: triple loop in the element type (see ref/matmul.h).
#include "kernels/ref/matmul.h"

namespace qkv::kernels::ref {

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
          int64_t ldc) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            T acc = 0;
            for (int64_t k = 0; k < K; ++k) {
                const T a = trans_a ? A[k * lda + i] : A[i * lda + k];
                const T b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            T& c = C[i * ldc + j];
            c    = beta == T(0) ? alpha * acc : alpha * acc + beta * c;
        }
    }
}

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
                  int64_t batch) {
    for (int64_t b = 0; b < batch; ++b)
        gemm<T>(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb,
                beta, C + b * stride_c, ldc);
}

template void gemm<float>(bool,
                          bool,
                          int64_t,
                          int64_t,
                          int64_t,
                          float,
                          const float*,
                          int64_t,
                          const float*,
                          int64_t,
                          float,
                          float*,
                          int64_t);
template void gemm<double>(bool,
                           bool,
                           int64_t,
                           int64_t,
                           int64_t,
                           double,
                           const double*,
                           int64_t,
                           const double*,
                           int64_t,
                           double,
                           double*,
                           int64_t);
template void gemm_batched<float>(bool,
                                  bool,
                                  int64_t,
                                  int64_t,
                                  int64_t,
                                  float,
                                  const float*,
                                  int64_t,
                                  int64_t,
                                  const float*,
                                  int64_t,
                                  int64_t,
                                  float,
                                  float*,
                                  int64_t,
                                  int64_t,
                                  int64_t);
template void gemm_batched<double>(bool,
                                   bool,
                                   int64_t,
                                   int64_t,
                                   int64_t,
                                   double,
                                   const double*,
                                   int64_t,
                                   int64_t,
                                   const double*,
                                   int64_t,
                                   int64_t,
                                   double,
                                   double*,
                                   int64_t,
                                   int64_t,
                                   int64_t);

}  // namespace qkv::kernels::ref
