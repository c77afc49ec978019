// int8 linear layers (ops/quantize.h): the quantization by hand (per-channel scale, round half away
// from zero, all-zero rows); linear_int8 against the exact integer products of the same quantized
// operands (int64 in the test, then the two scales in float64: the kernel may differ only by its
// fp32 dequantization, at most 3 roundings); against the fp32 layer within the bound the
// quantization itself allows (derived below); the refusals; nn::Linear::quantize_int8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "kernels/cpu/gemm_int8.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/parallel.h"
#include "qkv/nn/layers.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/reduce.h"
#include "support/test_util.h"

using namespace qkv;
using namespace qkv::test;

namespace {

namespace cpu = qkv::kernels::cpu;

/// Sets the int8 GEMM path for a scope.
struct Int8PathGuard {
    cpu::Int8GemmPath old;
    explicit Int8PathGuard(cpu::Int8GemmPath p) : old(cpu::set_int8_gemm_path(p)) {}
    ~Int8PathGuard() { cpu::set_int8_gemm_path(old); }
};

/// Every int8 GEMM path this machine has: the GEMM API always, the prepacked matmul where oneDNN
/// has a VNNI / AMX-INT8 one. (ctest also runs these tests with oneDNN capped below VNNI:
/// ONEDNN_MAX_CPU_ISA=AVX2, the 7-bit activation path.)
std::vector<cpu::Int8GemmPath> int8_paths() {
    std::vector<cpu::Int8GemmPath> p = {cpu::Int8GemmPath::gemm_api};
    if (cpu::int8_matmul_available()) p.push_back(cpu::Int8GemmPath::matmul_prepacked);
    return p;
}

TEST(Quantize, WeightPerChannelByHand) {
    const Tensor w = from_vector(std::vector<float>{1.0f, -0.5f, 0.25f, 0, 0, 0, -2.0f, 2.0f, 1.0f}, {3, 3});
    const Int8Weight q = quantize_int8(w);
    ASSERT_EQ(q.scale.size(), 3u);
    EXPECT_EQ(q.scale[0], 1.0f / 127.0f);
    EXPECT_EQ(q.scale[1], 0.0f);                   // an all-zero row
    EXPECT_EQ(q.scale[2], 2.0f / 127.0f);
    EXPECT_EQ(std::vector<int8_t>(q.q.begin(), q.q.begin() + 3), (std::vector<int8_t>{127, -64, 32}));  // -63.5 -> -64
    EXPECT_EQ(std::vector<int8_t>(q.q.begin() + 3, q.q.begin() + 6), (std::vector<int8_t>{0, 0, 0}));
    EXPECT_EQ(std::vector<int8_t>(q.q.begin() + 6, q.q.end()), (std::vector<int8_t>{-127, 127, 64}));    // 63.5 -> 64
    std::vector<float> bad = {1, std::numeric_limits<float>::quiet_NaN()};
    try {
        quantize_int8(from_vector(bad, {1, 2}));
        FAIL() << "NaN weight accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("weight[0, 1] is nan"), std::string::npos) << e.what();
    }
}

void check_exact(int64_t N, int64_t K, int64_t O);

TEST(Quantize, LinearInt8IsTheExactIntegerProductDequantized) {
    for (const cpu::Int8GemmPath p : int8_paths()) {
        Int8PathGuard g(p);
        SCOPED_TRACE(cpu::int8_gemm_path());
        check_exact(37, 70, 45);
        check_exact(600, 64, 80);  // N·K and N·O above the threading threshold: the parallel loops
        check_exact(1, 300, 1000);  // one row (greedy decoding of one sentence), K not a multiple of 4
        check_exact(5, 256, 3);
        check_exact(40, 32, 7000);  // N·O int32 sums over 1 MB: column blocks (1,600 + a partial one)
    }
}

TEST(Quantize, DequantizedBlocksEqualTheWholeProduct) {
    // gemm_int8_nt_dequant's column blocks (made and dequantized per thread) give the same bits as
    // one whole-width product, for any block width (full, partial last block, one column), with
    // and without bias, on 1 and 2 threads; and the whole-width result is float(acc)·sx·sw + b
    // with acc from gemm_int8_nt.
    const int64_t N = 13, K = 40, O = 150;
    std::vector<int8_t> x(size_t(N * K)), q(size_t(O * K));
    const int A = cpu::int8_activation_max();
    for (size_t i = 0; i < x.size(); ++i) x[i] = int8_t(int(i * 37 % (2 * A + 1)) - A);
    for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int(i * 53 % 255) - 127);
    const std::vector<float> sx = random_floats(N, 5, 0.001f, 0.1f), sw = random_floats(O, 6, 0.001f, 0.1f),
                             bias = random_floats(O, 7);
    const auto packed = cpu::make_int8_packed_weight(q.data(), O, K);
    const int saved = get_num_threads();
    for (const cpu::Int8GemmPath p : int8_paths()) {
        Int8PathGuard g(p);
        std::vector<int32_t> acc(size_t(N * O));
        cpu::gemm_int8_nt(x.data(), N, K, O, *packed, acc.data());
        for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
            std::vector<float> want(size_t(N * O));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t o = 0; o < O; ++o)
                    want[size_t(n * O + o)] = float(acc[size_t(n * O + o)]) * sx[size_t(n)] * sw[size_t(o)] + (b ? b[o] : 0.0f);
            for (int threads : {1, 2}) {
                set_num_threads(threads);
                for (int64_t block : {int64_t(0), O, int64_t(64), int64_t(7), int64_t(1)}) {
                    std::vector<float> y(size_t(N * O), std::nanf(""));
                    cpu::gemm_int8_nt_dequant({x.data(), N, K, O, packed.get(), sx.data(), sw.data(), b, y.data(), block});
                    EXPECT_EQ(y, want) << cpu::int8_gemm_path() << " block " << block << " threads " << threads
                                       << (b ? " bias" : " no bias");
                }
            }
        }
    }
    set_num_threads(saved);
    std::vector<float> y(size_t(N * O));
    EXPECT_THROW(cpu::gemm_int8_nt_dequant({x.data(), N, K, O + 1, packed.get(), sx.data(), sw.data(), nullptr, y.data()}), Error);
    EXPECT_THROW(cpu::gemm_int8_nt_dequant({x.data(), N, K, O, packed.get(), sx.data(), sw.data(), nullptr, y.data(), -1}), Error);
    // An epilogue's exception comes out of the (parallel) blocks as it was thrown, once.
    set_num_threads(2);
    try {
        cpu::gemm_int8_nt_blocks(x.data(), N, K, O, *packed, 16, [](int64_t o0, int64_t, int64_t, int64_t, const int32_t*) {
            if (o0 >= 64) throw Error("block at column " + std::to_string(o0));
        });
        ADD_FAILURE() << "the epilogue's exception was lost";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("block at column ", 0), 0u) << e.what();
    }
    set_num_threads(saved);
}

TEST(Quantize, BlockWidthsKeepTheSumsInCache) {
    EXPECT_EQ(cpu::int8_block_columns(100, 17496), 640);    // 100 × 640 int32 sums: 250 KB
    EXPECT_EQ(cpu::int8_block_columns(20, 17496), 3264);
    EXPECT_EQ(cpu::int8_block_columns(256, 17496), 256);
    EXPECT_EQ(cpu::int8_block_columns(257, 17496), 17496);  // more rows: one product
    EXPECT_EQ(cpu::int8_block_columns(1, 17496), 17496);    // 70 KB of sums: one product
    EXPECT_EQ(cpu::int8_block_columns(100, 2000), 2000);
    EXPECT_EQ(cpu::int8_block_columns(100, 17496, 7), 7);
    EXPECT_EQ(cpu::int8_block_columns(100, 17496, 1 << 20), 17496);
    EXPECT_THROW(cpu::int8_block_columns(100, 17496, -1), Error);
}

TEST(Quantize, ExtremeProductsStayExactOnEveryPath) {
    // Every activation at ±A (int8_activation_max) and weight at ±127: int8 kernels that sum pairs
    // of u8·s8 products in int16 (vpmaddubsw without VNNI) on 8-bit activations saturate at
    // 32,767 here; the int32 sums must be exact: acc[n, o] = Σ_k (±A)(±127), |acc| up to
    // 4096·127² = 66,064,384.
    NoGradGuard ng;
    const int64_t N = 9, K = 4096, O = 40;
    std::vector<float> xv(size_t(N * K)), wv(size_t(O * K));
    for (int64_t i = 0; i < N * K; ++i) xv[size_t(i)] = (i % 7 == 3) ? -1.0f : 1.0f;
    for (int64_t i = 0; i < O * K; ++i) wv[size_t(i)] = ((i / 5) % 3 == 0) ? -2.0f : 2.0f;
    for (int64_t o = 0; o < O; o += 4)  // some rows all +: every product +127·127
        for (int64_t k = 0; k < K; ++k) wv[size_t(o * K + k)] = 2.0f;
    const Tensor x = from_vector(xv, {N, K}), w = from_vector(wv, {O, K});
    const Int8Weight q = quantize_int8(w);
    for (const cpu::Int8GemmPath p : int8_paths()) {
        Int8PathGuard g(p);
        const int64_t A = cpu::int8_activation_max();
        const auto y = linear_int8(x, q, Tensor()).to_vector<float>();
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < O; ++o) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; ++k)
                    acc += (xv[size_t(n * K + k)] < 0 ? -A : A) * (wv[size_t(o * K + k)] < 0 ? -127 : 127);
                // float(acc)·sx·sw in fp32: three roundings (|acc| > 2^24 is not exact in fp32).
                const double want = double(acc) * double(1.0f / float(A)) * double(2.0f / 127.0f);
                ASSERT_NEAR(y[size_t(n * O + o)], want, 3 * 0x1p-24 * 2 * std::fabs(want))
                    << cpu::int8_gemm_path() << " n " << n << " o " << o << " exact sum " << acc;
            }
    }
}

TEST(Quantize, CopiesOfAWeightAndManyRowCountsShareOnePackedWeight) {
    // The prepacked copies belong to the weight's cache, not to the Int8Weight struct: a copy
    // outliving the original still multiplies by the same numbers; row counts that make oneDNN pick
    // other layouts each get theirs.
    NoGradGuard ng;
    const int64_t K = 64, O = 33;
    const Tensor w = from_vector(random_floats(O * K, 21), {O, K});
    for (const cpu::Int8GemmPath p : int8_paths()) {
        Int8PathGuard g(p);
        Int8Weight copy;
        std::vector<std::vector<float>> first;
        {
            const Int8Weight q = quantize_int8(w);
            copy = q;
            for (int64_t N : {1, 2, 16, 300}) {
                const Tensor x = from_vector(random_floats(N * K, 22 + uint64_t(N)), {N, K});
                first.push_back(linear_int8(x, q, Tensor()).to_vector<float>());
            }
        }
        size_t i = 0;
        for (int64_t N : {1, 2, 16, 300}) {
            const Tensor x = from_vector(random_floats(N * K, 22 + uint64_t(N)), {N, K});
            EXPECT_EQ(linear_int8(x, copy, Tensor()).to_vector<float>(), first[i++]) << cpu::int8_gemm_path() << " N " << N;
        }
        Int8Weight by_hand = copy;  // no cache: a copy and a reorder per call, same numbers
        by_hand.packed.reset();
        const Tensor x = from_vector(random_floats(16 * K, 38), {16, K});
        EXPECT_EQ(linear_int8(x, by_hand, Tensor()).to_vector<float>(), first[2]) << cpu::int8_gemm_path();
    }
}

TEST(Quantize, ThreadsShareOneWeightAndItsPackedCopies) {
    // Decoding threads (qkv serve) share a model: concurrent first calls at several row counts
    // fill the packed-weight cache under its lock; every thread gets the single-thread numbers.
    NoGradGuard ng;
    const int64_t K = 96, O = 70;
    const Tensor w = from_vector(random_floats(O * K, 41), {O, K});
    const std::vector<int64_t> rows = {1, 3, 8, 33, 120};
    for (const cpu::Int8GemmPath p : int8_paths()) {
        Int8PathGuard g(p);
        std::vector<Tensor> xs;
        std::vector<std::vector<float>> want;
        {
            const Int8Weight alone = quantize_int8(w);
            for (int64_t N : rows) {
                xs.push_back(from_vector(random_floats(N * K, 42 + uint64_t(N)), {N, K}));
                want.push_back(linear_int8(xs.back(), alone, Tensor()).to_vector<float>());
            }
        }
        const Int8Weight shared = quantize_int8(w);  // a fresh cache: the threads fill it
        std::vector<std::vector<std::vector<float>>> got(4);
        std::vector<std::thread> threads;
        for (size_t t = 0; t < got.size(); ++t)
            threads.emplace_back([&, t] {
                NoGradGuard ngt;
                for (int rep = 0; rep < 3; ++rep)
                    for (size_t i = 0; i < rows.size(); ++i) {
                        const size_t j = (i + t) % rows.size();  // different row counts first
                        const auto y = linear_int8(xs[j], shared, Tensor()).to_vector<float>();
                        if (rep == 0) got[t].resize(rows.size());
                        got[t][j] = y;
                    }
            });
        for (auto& th : threads) th.join();
        for (size_t t = 0; t < got.size(); ++t)
            for (size_t i = 0; i < rows.size(); ++i)
                EXPECT_EQ(got[t][i], want[i]) << cpu::int8_gemm_path() << " thread " << t << " rows " << rows[i];
    }
}

TEST(Quantize, PathNamesTheKernel) {
    const std::string automatic = cpu::int8_gemm_path();
    if (const char* want = std::getenv("QKV_TEST_EXPECT_INT8_PATH")) {  // set by a ctest variant
        EXPECT_EQ(automatic.rfind(want, 0), 0u) << automatic << " (expected " << want << ")";
    }
    if (cpu::int8_matmul_available()) {
        const bool amx = automatic.find("amx") != std::string::npos;
        EXPECT_EQ(automatic.rfind(amx ? "oneDNN s8 matmul on prepacked weights (" : "oneDNN dnnl_gemm_s8s8s32 (VNNI", 0),
                  0u) << automatic;
        {
            Int8PathGuard g(cpu::Int8GemmPath::matmul_prepacked);
            EXPECT_EQ(std::string(cpu::int8_gemm_path()).rfind("oneDNN s8 matmul on prepacked weights (", 0), 0u);
        }
        Int8PathGuard g(cpu::Int8GemmPath::gemm_api);
        EXPECT_EQ(std::string(cpu::int8_gemm_path()), "oneDNN dnnl_gemm_s8s8s32 (set_int8_gemm_path)");
        EXPECT_EQ(cpu::int8_activation_max(), 127);
    } else {
        EXPECT_EQ(automatic.rfind("oneDNN dnnl_gemm_u8s8s32, 7-bit activations (", 0), 0u) << automatic;
        EXPECT_EQ(cpu::int8_activation_max(), 63);
        Int8PathGuard g(cpu::Int8GemmPath::matmul_prepacked);  // falls back
        EXPECT_EQ(std::string(cpu::int8_gemm_path()), automatic);
    }
}

TEST(Quantize, ArgmaxEqualsTheArgmaxOfTheOutput) {
    NoGradGuard ng;
    // (200 × 1,400: linear_int8 takes column blocks, the argmax one product)
    for (const auto& [N, O] : {std::pair<int64_t, int64_t>{7, 90}, {700, 90}, {200, 1400}}) {
        const int64_t K = 48;
        const Tensor x = from_vector(random_floats(N * K, 11), {N, K});
        const Tensor w = from_vector(random_floats(O * K, 12), {O, K});
        const Tensor b = from_vector(random_floats(O, 13), {O});
        const Int8Weight q = quantize_int8(w);
        std::vector<char> banned(size_t(O), 0);
        for (int64_t o = 0; o < O; o += 3) banned[size_t(o)] = 1;
        for (const auto& ban : {std::vector<char>{}, banned})
            EXPECT_EQ(linear_int8_argmax(x, q, b, ban).to_vector<int64_t>(),
                      argmax_allowed(linear_int8(x, q, b), ban).to_vector<int64_t>())
                << N << " banned " << ban.size();
        EXPECT_EQ(linear_int8_argmax(x, q, b, std::vector<char>(size_t(O), 1)).to_vector<int64_t>(),
                  std::vector<int64_t>(size_t(N), -1));
    }
}

void check_exact(int64_t N, int64_t K, int64_t O) {
    NoGradGuard ng;
    const Tensor x = from_vector(random_floats(N * K, 1, -3.f, 3.f), {N, K});
    const Tensor w = from_vector(random_floats(O * K, 2), {O, K});
    const Tensor b = from_vector(random_floats(O, 3), {O});
    const Int8Weight q = quantize_int8(w);
    const auto y = linear_int8(x, q, b).to_vector<float>();
    const auto xv = x.to_vector<float>();
    const auto bv = b.to_vector<float>();
    for (int64_t n = 0; n < N; ++n) {
        float m = 0;
        for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(xv[size_t(n * K + k)]));
        const long A = cpu::int8_activation_max();
        const float sx = m / float(A), inv = 1.0f / sx;
        std::vector<int64_t> xq(K);
        for (int64_t k = 0; k < K; ++k)  // the documented rule: fp32 product, ties away from zero
            xq[size_t(k)] = std::clamp(std::lround(xv[size_t(n * K + k)] * inv), -A, A);
        for (int64_t o = 0; o < O; ++o) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += xq[size_t(k)] * int64_t(q.q[size_t(o * K + k)]);
            const double want = double(acc) * double(sx) * double(q.scale[size_t(o)]) + double(bv[size_t(o)]);
            // fp32: acc·sx, ·scale, +bias: three roundings of values no larger than |want| + |b| + |acc·sx·s|.
            const double mag = std::fabs(double(acc) * double(sx) * double(q.scale[size_t(o)])) + std::fabs(bv[size_t(o)]);
            ASSERT_NEAR(y[size_t(n * O + o)], want, 3 * 0x1p-24 * 2 * mag + 1e-30) << n << " " << o;
        }
    }
}

TEST(Quantize, LinearInt8StaysWithinTheQuantizationBound) {
    // |x̃·w̃ - x·w| <= Σ_k (|x_k|·sw/2 + |w_k|·sx/2 + sx·sw/4) per output (each rounding moves a
    // value by at most half its scale), plus the fp32 rounding of both sums (1e-5 relative).
    NoGradGuard ng;
    const int64_t N = 20, K = 64, O = 30;
    const Tensor x = from_vector(random_floats(N * K, 4), {N, K});
    const Tensor w = from_vector(random_floats(O * K, 5), {O, K});
    const Int8Weight q = quantize_int8(w);
    const auto yq = linear_int8(x, q, Tensor()).to_vector<float>();
    const auto yf = linear(x, w, Tensor()).to_vector<float>();
    const auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
    double worst = 0;
    for (int64_t n = 0; n < N; ++n) {
        float m = 0;
        for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(xv[size_t(n * K + k)]));
        const double sx = m / double(cpu::int8_activation_max());
        for (int64_t o = 0; o < O; ++o) {
            const double sw = q.scale[size_t(o)];
            double bound = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = std::fabs(xv[size_t(n * K + k)]), c = std::fabs(wv[size_t(o * K + k)]);
                bound += a * sw / 2 + c * sx / 2 + sx * sw / 4;
                mag += a * c;
            }
            const double err = std::fabs(double(yq[size_t(n * O + o)]) - yf[size_t(n * O + o)]);
            ASSERT_LE(err, bound + 1e-5 * mag) << n << " " << o;
            worst = std::max(worst, err / bound);
        }
    }
    EXPECT_GT(worst, 0.0) << "int8 gave the fp32 result exactly: no quantization happened";
}

TEST(Quantize, RefusalsAndZeroRows) {
    const Int8Weight q = quantize_int8(from_vector(random_floats(4 * 3, 6), {4, 3}));
    {
        NoGradGuard ng;
        const auto y = linear_int8(zeros({2, 3}), q, Tensor()).to_vector<float>();
        EXPECT_EQ(y, std::vector<float>(8, 0.0f));  // an all-zero row: scale 0, output 0
        // in_features 0: no products, each of the 2 rows is the bias (was: rows never written)
        const Int8Weight empty = quantize_int8(zeros({3, 0}));
        const Tensor b3 = from_vector(std::vector<float>{1, -2, 3}, {3});
        EXPECT_EQ(linear_int8(zeros({2, 0}), empty, b3).to_vector<float>(), (std::vector<float>{1, -2, 3, 1, -2, 3}));
        EXPECT_EQ(linear_int8_argmax(zeros({2, 0}), empty, b3, {}).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
        EXPECT_THROW(linear_int8(zeros({2, 5}), q, Tensor()), Error);
        std::vector<float> inf = {1, std::numeric_limits<float>::infinity(), 0};
        EXPECT_THROW(linear_int8(from_vector(inf, {1, 3}), q, Tensor()), Error);
    }
    Tensor xg = from_vector(random_floats(3, 7), {1, 3}).requires_grad_(true);
    try {
        linear_int8(xg, q, Tensor());
        FAIL() << "a gradient-tracking input was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("int8 layers are for inference"), std::string::npos) << e.what();
    }
}

TEST(Quantize, LinearModuleUsesItsInt8WeightUntilDropped) {
    NoGradGuard ng;
    nn::Linear l(16, 8);
    const Tensor x = from_vector(random_floats(5 * 16, 8), {5, 16});
    const auto fp32 = l.forward(x).to_vector<float>();
    EXPECT_EQ(nn::quantize_linears_int8(l), 1);
    ASSERT_TRUE(l.is_int8());
    EXPECT_EQ(l.forward(x).to_vector<float>(), linear_int8(x, quantize_int8(l.weight), l.bias).to_vector<float>());
    EXPECT_NE(l.forward(x).to_vector<float>(), fp32);
    l.drop_int8();
    EXPECT_EQ(l.forward(x).to_vector<float>(), fp32);
}

}  // namespace
