// Fast fp32 GEMM through oneDNN (dnnl_sgemm, row-major). Measurements behind the batched
// threading choice: bench/RESULTS_matmul.md (bench/bench_matmul.cpp).
#include "kernels/cpu/gemm.h"

#include <dnnl.h>
#include <omp.h>

#include "qkv/core/error.h"

namespace qkv::kernels::cpu {
namespace {

// gemm_batched runs one GEMM per thread (single-threaded oneDNN inside) when each GEMM has fewer
// FLOPs than this, or when the batch divides evenly over the threads; otherwise one GEMM at a
// time with all threads inside oneDNN (no idle thread on an uneven batch of large products).
// Measured with 2 threads (bench/RESULTS_matmul.md, best of 100 trials on a shared machine):
// per-thread beat oneDNN-threaded by 1.5-2.1x for 512 × (9×64)·(64×9) and 16 × 64³, by 1.3x for
// 16 × 128³ and 1.1-1.3x for 8 × 256³.
constexpr double kPerThreadMaxFlops = 2.0 * 256 * 256 * 256;

// C = beta·C for the degenerate K == 0 product (beta == 0 writes zeros, never reads C).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) return scale_c(M, N, beta, C, ldc);
    const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                        lda, B, ldb, beta, C, ldc);
    QKV_CHECK(st == dnnl_success, "gemm: dnnl_sgemm failed with status ", int(st), " (M=", M,
              ", N=", N, ", K=", K, ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc, ")");
}

void gemm_batched(const GemmBatchedParams<float>& p) {
    const auto trans_a = p.trans_a; const auto trans_b = p.trans_b; const auto M = p.M;
    const auto N = p.N; const auto K = p.K; const auto alpha = p.alpha; const auto A = p.A;
    const auto lda = p.lda; const auto stride_a = p.stride_a; const auto B = p.B;
    const auto ldb = p.ldb; const auto stride_b = p.stride_b; const auto beta = p.beta;
    const auto C = p.C; const auto ldc = p.ldc; const auto stride_c = p.stride_c;
    const auto batch = p.batch;
    // A shared B with A and C blocks stacked row after row is one tall GEMM (batch·M rows).
    if (batch > 1 && stride_b == 0 && !trans_a && stride_a == M * lda && stride_c == M * ldc)
        return gemm(false, trans_b, batch * M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const double flops    = 2.0 * double(M) * double(N) * double(K);
    const int64_t threads = omp_get_max_threads();
    const bool per_thread =
        batch > 1 && threads > 1 && (flops < kPerThreadMaxFlops || batch % threads == 0);
    if (!per_thread) {
        for (int64_t b = 0; b < batch; ++b)
            gemm(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb,
                 beta, C + b * stride_c, ldc);
        return;
    }
    // One whole GEMM per thread; oneDNN sees omp_in_parallel() and stays single-threaded.
    // Exceptions must not leave the parallel region: record the first failure, throw after.
    int failed = 0;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
        if (M == 0 || N == 0) continue;
        if (K == 0) {
            scale_c(M, N, beta, C + b * stride_c, ldc);
            continue;
        }
        const dnnl_status_t st =
            dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A + b * stride_a,
                       lda, B + b * stride_b, ldb, beta, C + b * stride_c, ldc);
        if (st != dnnl_success) {
#pragma omp atomic write
            failed = int(st);
        }
    }
    QKV_CHECK(failed == 0, "gemm_batched: dnnl_sgemm failed with status ", failed, " (M=", M,
              ", N=", N, ", K=", K, ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc, ")");
}

}  // namespace qkv::kernels::cpu
