// GEMM kernels: cpu::gemm / cpu::gemm_batched (oneDNN) against ref::gemm<double>, with the 2x rule
// (err_fast <= 2·err_ref<float> + 1e-6, both measured against ref<double>), every transpose
// combination, odd sizes, padded leading dimensions and the BLAS edge cases.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/matmul.h"
#include "qkv/core/error.h"

namespace {

using qkv::test::kErrFactor;
using qkv::test::kErrFloor;
using qkv::test::max_abs_diff;
using qkv::test::random_floats;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;

using qkv::test::to_double;

struct GemmCase {
    bool ta, tb;
    int64_t M, N, K;
    int64_t pad = 0;  // extra elements per row of A, B and C (lda > minimum)
    float alpha = 1.f, beta = 0.f;
};

// Runs fast, ref<float>, ref<double> on the same inputs and applies the 2x rule.
void check_gemm(const GemmCase& c, uint64_t seed) {
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
    const auto A              = random_floats(a_rows * lda, seed);
    const auto B              = random_floats(b_rows * ldb, seed + 1);
    const auto C0             = random_floats(c.M * ldc, seed + 2);
    std::vector<float> c_fast = C0, c_ref32 = C0;
    std::vector<double> c_ref64 = to_double(C0);
    const auto A64 = to_double(A), B64 = to_double(B);

    cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
              c_fast.data(), ldc);
    ref::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                     c_ref32.data(), ldc);
    ref::gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A64.data(), lda, B64.data(), ldb, c.beta,
                      c_ref64.data(), ldc);

    const double err_fast = max_abs_diff(c_fast.data(), c_ref64.data(), c.M * ldc);
    const double err_ref  = max_abs_diff(c_ref32.data(), c_ref64.data(), c.M * ldc);
    EXPECT_LE(err_fast, kErrFactor * err_ref + kErrFloor)
        << "ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
        << " pad=" << c.pad << " err_ref32=" << err_ref;
    // Padding columns of C are never written.
    for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(c_fast[i * ldc + j], C0[i * ldc + j]);
}

TEST(MatmulKernels, FastMatchesRef_AllTransposes_OddSizes) {
    const int64_t sizes[][3] = {{1, 1, 1},      {7, 17, 5},   {17, 7, 1000}, {64, 65, 63},
                                {100, 31, 200}, {1, 300, 17}, {129, 1, 33}};
    uint64_t seed            = 1;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (const auto& s : sizes) check_gemm({ta, tb, s[0], s[1], s[2]}, seed++);
}

TEST(MatmulKernels, FastMatchesRef_PaddedLeadingDims_AlphaBeta) {
    uint64_t seed = 100;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            check_gemm({ta, tb, 33, 45, 27, /*pad=*/5, 0.7f, -0.3f}, seed++);
            check_gemm({ta, tb, 9, 9, 64, /*pad=*/3, 1.f, 1.f}, seed++);
        }
}

TEST(MatmulKernels, FastMatchesRef_LargeK) {
    check_gemm({false, false, 32, 48, 4096}, 200);
    check_gemm({true, true, 48, 32, 4096}, 201);
}

TEST(MatmulKernels, BetaZeroIgnoresNanInC) {
    const auto A = random_floats(6 * 4, 7), B = random_floats(4 * 5, 8);
    std::vector<float> C(6 * 5, std::numeric_limits<float>::quiet_NaN());
    cpu::gemm(false, false, 6, 5, 4, 1.f, A.data(), 4, B.data(), 5, 0.f, C.data(), 5);
    std::vector<double> want(6 * 5);
    ref::gemm<double>(false, false, 6, 5, 4, 1.0, to_double(A).data(), 4, to_double(B).data(), 5,
                      0.0, want.data(), 5);
    EXPECT_TRUE(qkv::test::all_close(C.data(), want.data(), 30, 1e-6, 1e-6));
}

TEST(MatmulKernels, DegenerateSizes) {
    // K == 0: C = beta·C; beta == 0 gives zeros even over NaN.
    std::vector<float> C = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
    cpu::gemm(false, false, 2, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
    EXPECT_EQ(C, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f, 2.5f, 3.f}));
    std::vector<float> Cn(6, std::numeric_limits<float>::quiet_NaN());
    cpu::gemm(true, true, 2, 3, 0, 1.f, nullptr, 2, nullptr, 1, 0.f, Cn.data(), 3);
    EXPECT_EQ(Cn, std::vector<float>(6, 0.f));
    // M == 0 or N == 0: nothing is touched.
    std::vector<float> untouched = {9.f};
    cpu::gemm(false, false, 0, 1, 4, 1.f, nullptr, 4, nullptr, 1, 0.f, untouched.data(), 1);
    cpu::gemm(false, false, 1, 0, 4, 1.f, nullptr, 4, nullptr, 1, 0.f, untouched.data(), 1);
    EXPECT_EQ(untouched[0], 9.f);
}

TEST(MatmulKernels, BadLeadingDimensionThrows) {
    std::vector<float> A(16), B(16), C(16);
    // lda = 2 < K = 4 for a non-transposed A: oneDNN rejects it, gemm throws qkv::Error.
    EXPECT_THROW(cpu::gemm(false, false, 2, 2, 4, 1.f, A.data(), 2, B.data(), 2, 0.f, C.data(), 2),
                 qkv::Error);
}

// Batched: fast vs ref<double> with the 2x rule; covers the one-tall-GEMM path (shared B), the
// one-GEMM-per-thread path (small products, or an even batch) and the all-threads-per-GEMM path
// (>= 2·256³ FLOPs with an odd batch).
void check_batched(bool ta,
                   bool tb,
                   int64_t batch,
                   int64_t M,
                   int64_t N,
                   int64_t K,
                   bool share_b,
                   float beta,
                   uint64_t seed) {
    const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    const int64_t sa = M * K, sb = share_b ? 0 : K * N, sc = M * N;
    const auto A              = random_floats(batch * sa, seed);
    const auto B              = random_floats(share_b ? K * N : batch * sb, seed + 1);
    const auto C0             = random_floats(batch * sc, seed + 2);
    std::vector<float> c_fast = C0, c_ref32 = C0;
    std::vector<double> c_ref64 = to_double(C0);
    cpu::gemm_batched({ta, tb, M, N, K, 0.5f, A.data(), lda, sa, B.data(), ldb, sb, beta, c_fast.data(), ldc, sc, batch});
    ref::gemm_batched<float>({ta, tb, M, N, K, 0.5f, A.data(), lda, sa, B.data(), ldb, sb, beta, c_ref32.data(), ldc, sc, batch});
    ref::gemm_batched<double>({ta, tb, M, N, K, 0.5, to_double(A).data(), lda, sa, to_double(B).data(), ldb, sb, double(beta), c_ref64.data(), ldc, sc, batch});
    const double err_fast = max_abs_diff(c_fast.data(), c_ref64.data(), batch * sc);
    const double err_ref  = max_abs_diff(c_ref32.data(), c_ref64.data(), batch * sc);
    EXPECT_LE(err_fast, kErrFactor * err_ref + kErrFloor)
        << "batch=" << batch << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta
        << " tb=" << tb << " share_b=" << share_b;
}

TEST(MatmulKernels, BatchedMatchesRef_SmallPerThread) {
    uint64_t seed = 300;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            check_batched(ta, tb, 37, 9, 9, 64, false, 0.f, seed++);  // D2L scores per head
            check_batched(ta, tb, 13, 9, 64, 9, true, 1.f, seed++);   // shared B, accumulate
            check_batched(ta, tb, 1, 7, 5, 3, false, 0.f, seed++);
        }
}

TEST(MatmulKernels, BatchedMatchesRef_LargeBothThreadingPaths) {
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        check_batched(false, true, 2, 256, 256, 256, false, 0.f, 400);  // 2 threads: per thread
        check_batched(true, false, 3, 200, 300, 280, true, -1.f, 401);  // all threads per GEMM
    }
    omp_set_num_threads(saved);
}

TEST(MatmulKernels, BatchedDegenerate) {
    std::vector<float> C(2 * 3 * 2, 2.f);
    cpu::gemm_batched({false, false, 3, 2, 0, 1.f, nullptr, 1, 0, nullptr, 2, 0, 0.25f, C.data(), 2, 6, 2});
    EXPECT_EQ(C, std::vector<float>(12, 0.5f));
    cpu::gemm_batched({false, false, 3, 2, 4, 1.f, nullptr, 4, 12, nullptr, 2, 8, 0.f, C.data(), 2, 6, 0});  // batch 0: nothing written
    EXPECT_EQ(C, std::vector<float>(12, 0.5f));
}

// The backward calls documented in docs/kernels/matmul.md, checked against central differences
// of c = a·b (L = Σ dc∘c): da = dc·bᵀ = gemm(false, true, M, K, N, ...), db = aᵀ·dc =
// gemm(true, false, K, N, M, ...).
TEST(MatmulKernels, DocumentedBackwardCallsMatchFiniteDifferences) {
    const int64_t M = 3, K = 4, N = 5;
    const auto a = to_double(random_floats(M * K, 500)), b = to_double(random_floats(K * N, 501));
    const auto dc = to_double(random_floats(M * N, 502));
    auto product  = [&](const std::vector<double>& av, const std::vector<double>& bv) {
        std::vector<double> c(M * N);
        ref::gemm<double>(false, false, M, N, K, 1.0, av.data(), K, bv.data(), N, 0.0, c.data(), N);
        return c;
    };
    std::vector<double> da(M * K), db(K * N);
    ref::gemm<double>(false, true, M, K, N, 1.0, dc.data(), N, b.data(), N, 0.0, da.data(), K);
    ref::gemm<double>(true, false, K, N, M, 1.0, a.data(), K, dc.data(), N, 0.0, db.data(), N);
    using qkv::test::all_close;
    using qkv::test::numeric_grad;
    EXPECT_TRUE(all_close(da, numeric_grad([&](const auto& v) { return product(v, b); }, a, dc),
                          qkv::test::kGradAtol, qkv::test::kGradRtol));
    EXPECT_TRUE(all_close(db, numeric_grad([&](const auto& v) { return product(a, v); }, b, dc),
                          qkv::test::kGradAtol, qkv::test::kGradRtol));
}

}  // namespace
