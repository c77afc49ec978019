// Layer-norm kernels: fast vs ref<double> (2x rule) for y, mean, rstd, dx, dγ, dβ on every SIMD
// path; constant and offset rows; dγ/dβ independent of the thread count; the reference backward
// vs float64 central differences in x, γ and β.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/layer_norm.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/layer_norm.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

constexpr double kEps = 1e-5;  // D2L / PyTorch LayerNorm default

struct LnCase {
    int64_t rows, N;
    bool affine;
    float offset = 0.f;  // added to x (large offsets test the two-pass variance)
};

void check_case(const LnCase& c, uint64_t seed) {
    const int64_t n = c.rows * c.N;
    auto x          = random_floats(n, seed, -2.f, 2.f);
    for (auto& v : x) v += c.offset;
    const auto gamma = random_floats(c.N, seed + 1, 0.5f, 1.5f);
    const auto beta  = random_floats(c.N, seed + 2);
    const auto dy    = random_floats(n, seed + 3);
    const float* g32 = c.affine ? gamma.data() : nullptr;
    const float* b32 = c.affine ? beta.data() : nullptr;
    const auto x64 = to_double(x), gamma64 = to_double(gamma), beta64 = to_double(beta),
               dy64   = to_double(dy);
    const double* g64 = c.affine ? gamma64.data() : nullptr;
    const double* b64 = c.affine ? beta64.data() : nullptr;

    // Forward: ref32 and ref64 once, fast per ISA.
    std::vector<float> y32(n), mu32(c.rows), rs32(c.rows);
    std::vector<double> y64(n), mu64(c.rows), rs64(c.rows);
    ref::layer_norm_forward<float>({y32.data(), mu32.data(), rs32.data(), x.data(), g32, b32, c.rows, c.N, kEps});
    ref::layer_norm_forward<double>({y64.data(), mu64.data(), rs64.data(), x64.data(), g64, b64, c.rows, c.N, kEps});
    // Backward from the same float statistics (ref32's) for all three.
    std::vector<float> dx32(n), dg32(c.N), db32(c.N);
    std::vector<double> dx64(n), dg64(c.N), db64(c.N);
    ref::layer_norm_backward<float>({nullptr, const_cast<float*>(mu32.data()), const_cast<float*>(rs32.data()), x.data(), g32, nullptr, c.rows, c.N}, {dx32.data(), dg32.data(), db32.data(), dy.data()});
    const auto mu32d = to_double(mu32), rs32d = to_double(rs32);
    ref::layer_norm_backward<double>({nullptr, const_cast<double*>(mu32d.data()), const_cast<double*>(rs32d.data()), x64.data(), g64, nullptr, c.rows, c.N}, {dx64.data(), dg64.data(), db64.data(), dy64.data()});
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> y(n), mu(c.rows), rs(c.rows), dx(n), dg(c.N), db(c.N);
        cpu::layer_norm_forward({y.data(), mu.data(), rs.data(), x.data(), g32, b32, c.rows, c.N, kEps});
        cpu::layer_norm_backward({nullptr, const_cast<float*>(mu32.data()), const_cast<float*>(rs32.data()), x.data(), g32, nullptr, c.rows, c.N}, {dx.data(), dg.data(), db.data(), dy.data()});
        const auto where = ::testing::Message()
                           << cpu::isa_name(isa) << " rows=" << c.rows << " N=" << c.N
                           << " affine=" << c.affine << " offset=" << c.offset;
        EXPECT_TRUE(within_2x(y, y32, y64)) << "y " << where;
        EXPECT_TRUE(within_2x(mu, mu32, mu64)) << "mean " << where;
        // rstd = 1/sqrt(var + 1e-5) reaches 316 for constant rows: compare relative to it.
        std::vector<float> rs_rel(c.rows), rs32_rel(c.rows);
        std::vector<double> rs64_rel(c.rows, 1.0);
        for (int64_t r = 0; r < c.rows; ++r)
            rs_rel[r] = float(rs[r] / rs64[r]), rs32_rel[r] = float(rs32[r] / rs64[r]);
        EXPECT_TRUE(within_2x(rs_rel, rs32_rel, rs64_rel)) << "rstd (relative) " << where;
        EXPECT_TRUE(within_2x(dx, dx32, dx64)) << "dx " << where;
        EXPECT_TRUE(within_2x(dg, dg32, dg64)) << "dgamma " << where;
        EXPECT_TRUE(within_2x(db, db32, db64)) << "dbeta " << where;
    }
}

TEST(LayerNormKernels, FastMatchesRef_OddSizes) {
    uint64_t seed = 1;
    for (int64_t N : {1, 7, 17, 256, 1000})
        for (int64_t rows : {1, 7, 37})
            for (bool affine : {true, false}) check_case({rows, N, affine}, seed += 4);
}

TEST(LayerNormKernels, FastMatchesRef_D2LShapeParallel) {
    check_case({1152, 256, true}, 100);  // 128 sentences × 9 tokens, num_hiddens 256
    check_case({1000, 33, true}, 104);
}

TEST(LayerNormKernels, FastMatchesRef_WideRows) { check_case({3, 17496, true}, 150); }

TEST(LayerNormKernels, FastMatchesRef_LargeOffset) { check_case({9, 256, true, 1e4f}, 200); }

// The fused residual (AddNorm): y and sum equal the unfused kernel on a precomputed x + residual
// bit for bit (same fp32 additions, same normalisation), on every SIMD path and the reference,
// and y is within the 2x rule of ref<double> on the float sum.
void check_residual_case(int64_t rows, int64_t N, uint64_t seed) {
    const int64_t n = rows * N;
    const auto x = random_floats(n, seed, -2.f, 2.f), res = random_floats(n, seed + 1, -2.f, 2.f);
    const auto gamma = random_floats(N, seed + 2, 0.5f, 1.5f), beta = random_floats(N, seed + 3);
    std::vector<float> z(n);
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + res[i];
    std::vector<float> y32(n), mu32(rows), rs32(rows), s32(n);
    ref::layer_norm_forward<float>({y32.data(), mu32.data(), rs32.data(), z.data(), gamma.data(), beta.data(), rows, N, kEps});
    std::vector<float> yr(n), mur(rows), rsr(rows);
    ref::layer_norm_forward<float>({yr.data(), mur.data(), rsr.data(), x.data(), gamma.data(), beta.data(), rows, N, kEps, res.data(), s32.data()});
    EXPECT_EQ(yr, y32) << "ref rows=" << rows << " N=" << N;
    EXPECT_EQ(s32, z) << "ref sum rows=" << rows << " N=" << N;
    const auto z64 = to_double(z), g64 = to_double(gamma), b64 = to_double(beta);
    std::vector<double> y64(n);
    ref::layer_norm_forward<double>({y64.data(), nullptr, nullptr, z64.data(), g64.data(), b64.data(), rows, N, kEps});
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> y(n), mu(rows), rs(rows), sum(n), yu(n), muu(rows), rsu(rows);
        cpu::layer_norm_forward({y.data(), mu.data(), rs.data(), x.data(), gamma.data(), beta.data(), rows, N, kEps, res.data(), sum.data()});
        cpu::layer_norm_forward({yu.data(), muu.data(), rsu.data(), z.data(), gamma.data(), beta.data(), rows, N, kEps});
        const auto where = ::testing::Message() << cpu::isa_name(isa) << " rows=" << rows << " N=" << N;
        EXPECT_EQ(sum, z) << "sum " << where;
        EXPECT_EQ(y, yu) << "y " << where;
        EXPECT_EQ(mu, muu) << "mean " << where;
        EXPECT_EQ(rs, rsu) << "rstd " << where;
        EXPECT_TRUE(within_2x(y, y32, y64)) << "y vs ref64 " << where;
    }
}

TEST(LayerNormKernels, FusedResidualEqualsSumThenNorm) {
    uint64_t seed = 500;
    for (int64_t N : {1, 7, 17, 256, 1000})
        for (int64_t rows : {1, 7, 37}) check_residual_case(rows, N, seed += 4);
    check_residual_case(1152, 256, 600);  // the D2L step's AddNorm, threaded
}

TEST(LayerNormKernels, FusedResidualMayAliasAnAddend) {
    const int64_t rows = 5, N = 33;
    auto x = random_floats(rows * N, 700), res = random_floats(rows * N, 701);
    std::vector<float> z(x.size());
    for (size_t i = 0; i < x.size(); ++i) z[i] = x[i] + res[i];
    std::vector<float> y(x.size()), yu(x.size()), mu(rows), rs(rows);
    cpu::layer_norm_forward({yu.data(), mu.data(), rs.data(), z.data(), nullptr, nullptr, rows, N, kEps});
    cpu::layer_norm_forward({y.data(), mu.data(), rs.data(), x.data(), nullptr, nullptr, rows, N, kEps, res.data(), x.data()});
    EXPECT_EQ(x, z);  // the sum overwrote x
    EXPECT_EQ(y, yu);
}

TEST(LayerNormKernels, ConstantRowsGiveBeta) {
    const int64_t N = 19;
    std::vector<float> x(2 * N, 3.25f);
    const auto gamma = random_floats(N, 5), beta = random_floats(N, 6);
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        std::vector<float> y(x.size()), mu(2), rs(2);
        cpu::layer_norm_forward({y.data(), mu.data(), rs.data(), x.data(), gamma.data(), beta.data(), 2, N, kEps});
        for (int64_t j = 0; j < 2 * N; ++j) EXPECT_EQ(y[j], beta[j % N]) << cpu::isa_name(isa);
        EXPECT_EQ(mu[0], 3.25f);
        EXPECT_FLOAT_EQ(rs[0], float(1.0 / std::sqrt(kEps)));
    }
}

TEST(LayerNormKernels, ParamGradsIndependentOfThreadCount) {
    const int64_t rows = 1152, N = 64;
    const auto x = random_floats(rows * N, 300), dy = random_floats(rows * N, 301);
    const auto gamma = random_floats(N, 302);
    std::vector<float> y(x.size()), mu(rows), rs(rows);
    cpu::layer_norm_forward({y.data(), mu.data(), rs.data(), x.data(), gamma.data(), nullptr, rows, N, kEps});
    const int saved = omp_get_max_threads();
    std::vector<float> dg[2], db[2], dx[2];
    for (int t = 0; t < 2; ++t) {
        omp_set_num_threads(t + 1);
        dg[t].resize(N), db[t].resize(N), dx[t].resize(x.size());
        cpu::layer_norm_backward({nullptr, const_cast<float*>(mu.data()), const_cast<float*>(rs.data()), x.data(), gamma.data(), nullptr, rows, N}, {dx[t].data(), dg[t].data(), db[t].data(), dy.data()});
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(dg[0], dg[1]);
    EXPECT_EQ(db[0], db[1]);
    EXPECT_EQ(dx[0], dx[1]);
}

TEST(LayerNormKernels, RefBackwardMatchesFiniteDifferences) {
    const int64_t rows = 3, N = 7;
    const auto x  = to_double(random_floats(rows * N, 41, -2.f, 2.f));
    const auto gm = to_double(random_floats(N, 42, 0.5f, 1.5f));
    const auto bt = to_double(random_floats(N, 43));
    const auto dy = to_double(random_floats(rows * N, 44));
    auto fwd      = [&](const std::vector<double>& xv, const std::vector<double>& g,
                   const std::vector<double>& b) {
        std::vector<double> y(xv.size());
        ref::layer_norm_forward<double>({y.data(), nullptr, nullptr, xv.data(), g.data(), b.data(), rows, N, kEps});
        return y;
    };
    std::vector<double> y(x.size()), mu(rows), rs(rows), dx(x.size()), dg(N), db(N);
    ref::layer_norm_forward<double>({y.data(), mu.data(), rs.data(), x.data(), gm.data(), bt.data(), rows, N, kEps});
    ref::layer_norm_backward<double>({nullptr, const_cast<double*>(mu.data()), const_cast<double*>(rs.data()), x.data(), gm.data(), nullptr, rows, N}, {dx.data(), dg.data(), db.data(), dy.data()});
    EXPECT_TRUE(all_close(dx, numeric_grad([&](const auto& v) { return fwd(v, gm, bt); }, x, dy),
                          kGradAtol, kGradRtol));
    EXPECT_TRUE(all_close(dg, numeric_grad([&](const auto& v) { return fwd(x, v, bt); }, gm, dy),
                          kGradAtol, kGradRtol));
    EXPECT_TRUE(all_close(db, numeric_grad([&](const auto& v) { return fwd(x, gm, v); }, bt, dy),
                          kGradAtol, kGradRtol));
}

}  // namespace
