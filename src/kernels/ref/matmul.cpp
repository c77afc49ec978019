// Reference GEMM: triple loop in the element type (see ref/matmul.h).
#include "kernels/ref/matmul.h"

namespace qkv::kernels::ref {

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
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
void gemm_batched(const GemmBatchedParams<T>& p) {
    for (int64_t b = 0; b < p.batch; ++b)
        gemm<T>(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, p.A + b * p.stride_a, p.lda,
                p.B + b * p.stride_b, p.ldb, p.beta, p.C + b * p.stride_c, p.ldc);
}

template decltype(gemm<float>) gemm<float>;
template decltype(gemm<double>) gemm<double>;
template decltype(gemm_batched<float>) gemm_batched<float>;
template decltype(gemm_batched<double>) gemm_batched<double>;

}  // namespace qkv::kernels::ref
