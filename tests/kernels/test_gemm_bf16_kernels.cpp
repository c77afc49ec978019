// bf16 GEMM (cpu::gemm_bf16_batched) against float64 on the bf16-rounded inputs, with the 2x rule
// (the only error left after rounding the inputs is the fp32 accumulation: err_bf16 <=
// 2·err(ref<float> on the rounded inputs) + floor, both against ref<double> on them), on every
// path this CPU has (oneDNN's bf16 matmul when the ISA cap allows avx512_bf16 and oneDNN has one;
// the fp32 GEMM on rounded copies otherwise), every transpose, shared B, padded C.
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/matmul.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"

namespace {

using qkv::test::IsaGuard;
using qkv::test::kErrFactor;
using qkv::test::kErrFloor;
using qkv::test::max_abs_diff;
using qkv::test::random_floats;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

/// Forces one of gemm_bf16_batched's paths (and an ISA cap) for the guard's lifetime.
struct PathGuard {
    IsaGuard isa;
    cpu::Bf16GemmPath old;
    PathGuard(Isa cap, cpu::Bf16GemmPath p) : isa(cap), old(cpu::set_bf16_gemm_path(p)) {}
    ~PathGuard() { cpu::set_bf16_gemm_path(old); }
};
struct PathCase {
    Isa cap;
    cpu::Bf16GemmPath path;
};
/// Every path this CPU has: the rounded fp32 GEMM (under the scalar cap and the CPU's own), and
/// oneDNN's bf16 matmul where the CPU has AVX-512-BF16 or AMX.
std::vector<PathCase> bf16_paths() {
    std::vector<PathCase> out = {{Isa::scalar, cpu::Bf16GemmPath::rounded_fp32},
                                 {cpu::cpu_isa(), cpu::Bf16GemmPath::rounded_fp32}};
    if (cpu::cpu_isa() >= Isa::avx512_bf16) out.push_back({cpu::cpu_isa(), cpu::Bf16GemmPath::onednn});
    return out;
}

std::vector<float> rounded(std::vector<float> v) {
    for (float& x : v) x = qkv::round_to_bf16(x);
    return v;
}

void check(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, bool share_b, int64_t pad, uint64_t seed) {
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    const int64_t sa = a_rows * lda + pad, sb = share_b ? 0 : b_rows * ldb + pad, sc = M * ldc + pad;
    const auto A = random_floats(batch * sa, seed), B = random_floats((share_b ? 1 : batch) * (b_rows * ldb + pad), seed + 1);
    const auto Ar = rounded(A), Br = rounded(B);
    const std::vector<double> A64(Ar.begin(), Ar.end()), B64(Br.begin(), Br.end());
    const std::vector<float> C0(size_t(batch * sc), 7.0f);
    std::vector<float> ref32 = C0;
    std::vector<double> ref64(C0.begin(), C0.end());
    ref::gemm_batched<float>({ta, tb, M, N, K, 1.f, Ar.data(), lda, sa, Br.data(), ldb, sb, 0.f, ref32.data(), ldc, sc, batch});
    ref::gemm_batched<double>({ta, tb, M, N, K, 1.0, A64.data(), lda, sa, B64.data(), ldb, sb, 0.0, ref64.data(), ldc, sc, batch});
    for (const PathCase& pc : bf16_paths()) {
        PathGuard g(pc.cap, pc.path);
        const Isa cap = pc.cap;
        std::vector<float> C = C0;
        cpu::gemm_bf16_batched({ta, tb, M, N, K, 1.f, A.data(), lda, sa, B.data(), ldb, sb, 0.f, C.data(), ldc, sc, batch});
        const double err = max_abs_diff(C.data(), ref64.data(), int64_t(C.size()));
        const double err32 = max_abs_diff(ref32.data(), ref64.data(), int64_t(C.size()));
        EXPECT_LE(err, kErrFactor * err32 + kErrFloor)
            << cpu::bf16_gemm_path() << " cap " << cpu::isa_name(cap) << " ta " << ta << " tb " << tb << " batch " << batch
            << " M " << M << " N " << N << " K " << K << " share_b " << share_b;
        // Padding of C is never written.
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < M; ++i)
                for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[size_t(b * sc + i * ldc + j)], 7.0f);
    }
}

TEST(GemmBf16Kernels, MatchesFloat64OnRoundedInputs_EveryPathAndTranspose) {
    uint64_t seed = 1;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            check(ta, tb, 1, 17, 33, 65, false, 0, seed++);
            check(ta, tb, 3, 9, 9, 64, false, 3, seed++);     // attention scores per head, padded
            check(ta, tb, 4, 20, 12, 130, true, 1, seed++);   // one B for every batch (a Linear)
            check(ta, tb, 1, 128, 96, 256, false, 0, seed++);
        }
}

TEST(GemmBf16Kernels, RoundsTheInputsNotTheOutput) {
    // 1 + 2^-9 rounds to 1 in bf16, so (1 + 2^-9)·1 must give exactly 1 on every path; the fp32
    // output keeps sums finer than bf16: 1·1 + 2^-8·2^-8 = 1 + 2^-16.
    for (const PathCase& pc : bf16_paths()) {
        PathGuard g(pc.cap, pc.path);
        const float a[2] = {1.0f + 0x1p-9f, 0x1p-8f}, b[2] = {1.0f, 0x1p-8f};
        float c = -1;
        cpu::gemm_bf16_batched({false, false, 1, 1, 1, 1.f, a, 1, 0, b, 1, 0, 0.f, &c, 1, 0, 1});
        EXPECT_EQ(c, 1.0f) << cpu::bf16_gemm_path();
        cpu::gemm_bf16_batched({false, false, 1, 1, 2, 1.f, a, 2, 0, b, 1, 0, 0.f, &c, 1, 0, 1});
        EXPECT_EQ(c, 1.0f + 0x1p-16f) << cpu::bf16_gemm_path();
    }
}

TEST(GemmBf16Kernels, LongSumsOfLargeEqualProductsDoNotOverflow) {
    // 32,768 products of 300·1 accumulate in fp32: 9,830,400 exactly (below 2^24).
    const int64_t K = 32768;
    const std::vector<float> a(K, 300.0f), b(K, 1.0f);
    for (const PathCase& pc : bf16_paths()) {
        PathGuard g(pc.cap, pc.path);
        float c = 0;
        cpu::gemm_bf16_batched({false, false, 1, 1, K, 1.f, a.data(), K, 0, b.data(), 1, 0, 0.f, &c, 1, 0, 1});
        EXPECT_EQ(c, 300.0f * float(K)) << cpu::bf16_gemm_path();
    }
}

TEST(GemmBf16Kernels, DegenerateSizesAndBadArguments) {
    std::vector<float> C(6, 2.f);
    cpu::gemm_bf16_batched({false, false, 3, 2, 0, 1.f, nullptr, 1, 0, nullptr, 2, 0, 0.f, C.data(), 2, 0, 1});
    EXPECT_EQ(C, std::vector<float>(6, 0.f));  // K = 0: zeros
    const float one = 1;
    float c = 0;
    EXPECT_THROW(cpu::gemm_bf16_batched({false, false, 1, 1, 1, 2.f, &one, 1, 0, &one, 1, 0, 0.f, &c, 1, 0, 1}),
                 qkv::Error);  // alpha != 1
}

TEST(GemmBf16Kernels, PathIsNamed) {
    const std::string path = cpu::bf16_gemm_path();
    // automatic: oneDNN with usable AMX, or with AVX-512-BF16 whose vdpbf16ps runs at full rate
    const bool fast = (cpu::cpu_isa() == Isa::amx && cpu::amx_permitted()) ||
                      (cpu::cpu_isa() >= Isa::avx512_bf16 && cpu::cpu_features().bf16_dot_full_rate);
    EXPECT_EQ(path.rfind(fast ? "oneDNN bf16 matmul (" : "fp32 GEMM on bf16-rounded inputs (", 0), 0u) << path;
    {
        PathGuard g(Isa::avx512, cpu::Bf16GemmPath::onednn);  // the cap wins over the forced path
        EXPECT_EQ(std::string(cpu::bf16_gemm_path()).rfind("fp32 GEMM on bf16-rounded inputs (", 0), 0u);
    }
    if (cpu::cpu_isa() >= Isa::avx512_bf16) {
        PathGuard g(cpu::cpu_isa(), cpu::Bf16GemmPath::onednn);
        EXPECT_EQ(std::string(cpu::bf16_gemm_path()).rfind("oneDNN bf16 matmul (", 0), 0u) << cpu::bf16_gemm_path();
    }
}

}  // namespace

// The operand conversion (cpu::convert_bf16) on every ISA path gives bf16_bits's bits exactly:
// ties to even both ways, the carry into the exponent, the largest finite values rounding to inf,
// subnormals, ±0, ±inf and NaNs (made quiet, sign kept, also those whose payload is only in the
// low 16 bits), and random bit patterns; lengths around the 8- and 16-lane vectors (tails). Both
// outputs: bf16 bits and rounded floats.
TEST(GemmBf16Kernels, ConversionGivesBf16BitsOnEveryIsa) {
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f7fffffu, 0x7f7fffffu, 0xff7fffffu,
                                0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x80008000u, 0x00018000u, 0x00000000u,
                                0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                                0xff800001u, 0x7fbfffffu, 0x3f800000u, 0xbf808000u};
    std::vector<uint32_t> pattern(std::begin(special), std::end(special));
    uint64_t state = 12345;
    for (int t = 0; t < 300; ++t) {  // random bit patterns (every class appears)
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        pattern.push_back(uint32_t(state >> 32));
    }
    for (int64_t n : std::vector<int64_t>{1, 7, 8, 9, 15, 16, 17, 37, int64_t(pattern.size())}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) std::memcpy(&x[size_t(i)], &pattern[size_t(i) % pattern.size()], 4);
        std::vector<uint16_t> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[size_t(i)] = qkv::bf16_bits(x[size_t(i)]);
        for (auto isa : qkv::test::available_isas()) {
            SCOPED_TRACE(::testing::Message() << cpu::isa_name(isa) << ", n " << n);
            const IsaGuard g(isa);
            std::vector<uint16_t> bits(size_t(n), 0xabcd);
            std::vector<float>    rounded(size_t(n), 7.0f);
            cpu::convert_bf16(x.data(), bits.data(), nullptr, n);
            cpu::convert_bf16(x.data(), nullptr, rounded.data(), n);
            EXPECT_EQ(bits, want);
            for (int64_t i = 0; i < n; ++i) {
                uint32_t u;
                std::memcpy(&u, &rounded[size_t(i)], 4);
                ASSERT_EQ(u, uint32_t(want[size_t(i)]) << 16) << "element " << i;
            }
        }
    }
}
