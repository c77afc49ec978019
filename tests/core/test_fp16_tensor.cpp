// DType::f16 tensors (IEEE float16, storage only): conversions on the tensor path (the contiguous
// float32 <-> float16 copies take the F16C kernels, the strided ones the scalar conversions: both
// must give core/fp16.h's bits), f64 and integers rounded once, all 65,536 patterns back to f32,
// bf16 <-> f16, views, factories, printing, the gradient refusal and the storage-only errors.
// The conversions themselves are tested exhaustively in tests/kernels/test_fp16_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/fp16.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/ops/softmax.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

std::vector<uint16_t> bits_of(const Tensor& t) {
    std::vector<uint16_t> out;
    for (float16 h : t.to_vector<float16>()) out.push_back(h.bits);
    return out;
}

Tensor f16_from_bits(const std::vector<uint16_t>& bits, const Shape& shape) {
    std::vector<float16> v;
    for (uint16_t b : bits) v.push_back(float16{b});
    return from_vector(v, shape);
}

}  // namespace

TEST(Fp16Tensor, DTypeBasics) {
    EXPECT_EQ(dtype_size(DType::f16), 2);
    EXPECT_STREQ(dtype_name(DType::f16), "float16");
    EXPECT_FALSE(is_floating(DType::f16));  // not a compute dtype
    EXPECT_TRUE(is_float_storage(DType::f16));
    EXPECT_TRUE(is_half_storage(DType::f16));
    EXPECT_TRUE(is_half_storage(DType::bf16));
    EXPECT_FALSE(is_half_storage(DType::f32));
    EXPECT_EQ(int(DType::bf16), 4);  // the existing dtypes keep their numbers (f16 is appended)
    EXPECT_EQ(int(DType::f16), 5);
    const Tensor t = Tensor::empty({3, 5}, DType::f16);
    EXPECT_EQ(t.impl().storage->nbytes, 30);
    EXPECT_NO_THROW(t.data<float16>());
    EXPECT_THROW(t.data<bfloat16>(), Error);
    EXPECT_THROW(t.to_vector<float>(), Error);
}

// float32 -> float16 on the tensor path: the edge cases of core/fp16.h, contiguous (F16C) and
// strided (scalar), give the same hand-checked bits.
TEST(Fp16Tensor, F32ToF16RoundsToNearestEven) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x = {1.0f, 65504.0f, 65519.99f, 65520.0f, -1e5f, std::ldexp(1.0f, -24),
                                  std::ldexp(1.0f, -25), 3 * std::ldexp(1.0f, -25), 1.0f + std::ldexp(1.0f, -11),
                                  1.0f + 3 * std::ldexp(1.0f, -11), -0.0f, inf, -inf, 0.1f, 300.0f, 1e-8f};
    const std::vector<uint16_t> want = {0x3c00, 0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x0001, 0x0000, 0x0002,
                                        0x3c00, 0x3c02, 0x8000, 0x7c00, 0xfc00, 0x2e66, 0x5cb0, 0x0000};
    const Tensor c = from_vector(x, {int64_t(x.size())});
    EXPECT_EQ(bits_of(c.to(DType::f16)), want);
    // Strided: every other element of an interleaved copy (the scalar loop of copy_).
    std::vector<float> wide;
    for (float f : x) wide.insert(wide.end(), {f, 7.0f});
    const Tensor s = from_vector(wide, {int64_t(x.size()), 2}).select(1, 0);
    ASSERT_FALSE(s.is_contiguous());
    EXPECT_EQ(bits_of(s.to(DType::f16)), want);
    // NaN stays NaN through the tensor path.
    const Tensor n = from_vector(std::vector<float>{std::nanf("")}, {1}).to(DType::f16);
    EXPECT_TRUE(std::isnan(n.to(DType::f32).item()));
}

TEST(Fp16Tensor, F64IntegersBoolAndBf16ToF16) {
    // 1 + 2^-11 + 2^-40 is just above the tie: rounded once it goes up (via a float it would tie).
    const Tensor d = from_vector(std::vector<double>{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 65520.0 - 1e-9},
                                 {2});
    EXPECT_EQ(bits_of(d.to(DType::f16)), (std::vector<uint16_t>{0x3c01, 0x7bff}));
    const Tensor i = from_vector(std::vector<int64_t>{2049, -3, 70000}, {3});
    EXPECT_EQ(bits_of(i.to(DType::f16)), (std::vector<uint16_t>{0x6800, 0xc200, 0x7c00}));
    const Tensor b = from_vector(std::vector<bool>{true, false}, {2});
    EXPECT_EQ(bits_of(b.to(DType::f16)), (std::vector<uint16_t>{0x3c00, 0x0000}));
    // bf16 <-> f16 through the exact float, rounded once: bf16 1 + 2^-7 is exact in half; half
    // 1 + 2^-10 rounds to bf16 1.0; bf16 2^20 overflows half.
    const Tensor bf = from_vector(std::vector<float>{1.0f + 1.0f / 128, 1048576.0f}, {2}).to(DType::bf16);
    EXPECT_EQ(bits_of(bf.to(DType::f16)), (std::vector<uint16_t>{0x3c08, 0x7c00}));
    EXPECT_EQ(f16_from_bits({0x3c01}, {1}).to(DType::bf16).to(DType::f32).item(), 1.0);
    // f16 -> i64 truncates toward zero, -> bool nonzero (-0 false).
    const Tensor h = f16_from_bits({0x4100, 0xc100, 0x8000, 0x3c00}, {4});  // 2.5, -2.5, -0, 1
    EXPECT_EQ(h.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, 0, 1}));
    EXPECT_EQ(h.to(DType::b8).to_vector<bool>(), (std::vector<bool>{true, true, false, true}));
}

// Every pattern widens to its exact value, contiguous (F16C) and strided (scalar) alike, and a
// contiguous f32 -> f16 copy of the widened values gives the pattern back (NaNs: quiet NaNs).
TEST(Fp16Tensor, F16ToF32IsExactForAll65536Patterns) {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = uint16_t(h);
    const Tensor t = f16_from_bits(all, {65536});
    const std::vector<float> wide = t.to(DType::f32).to_vector<float>();
    const std::vector<double> wide64 = t.to(DType::f64).to_vector<double>();
    const std::vector<float> strided = t.reshape({256, 256}).transpose(0, 1).to(DType::f32).transpose(0, 1)
                                           .contiguous().reshape({65536}).to_vector<float>();
    const std::vector<uint16_t> back = bits_of(t.to(DType::f32).to(DType::f16));
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const float want = fp16_to_float(uint16_t(h));
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(wide[h]) && std::isnan(strided[h]) && std::isnan(wide64[h])) << h;
            ASSERT_EQ(back[h] | 0x0200, h | 0x0200) << h;
            continue;
        }
        ASSERT_EQ(wide[h], want) << h;
        ASSERT_EQ(strided[h], want) << h;
        ASSERT_EQ(wide64[h], double(want)) << h;
        ASSERT_EQ(back[h], h) << h;
    }
}

TEST(Fp16Tensor, ViewsFactoriesAndPrinting) {
    const Tensor a = arange(0, 12, 1, DType::f16).reshape({3, 4});
    EXPECT_EQ(a.dtype(), DType::f16);
    EXPECT_EQ(a.transpose(0, 1).contiguous().to(DType::f32).to_vector<float>(),
              (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
    EXPECT_EQ(a.select(0, 2).select(0, 3).item(), 11.0);
    EXPECT_EQ(full({}, 0.1, DType::f16).item(), double(fp16_to_float(0x2e66)));
    EXPECT_EQ(full({2}, 1e6, DType::f16).to(DType::f32).to_vector<float>()[1], std::numeric_limits<float>::infinity());
    EXPECT_EQ(zeros({2}, DType::f16).to_vector<float16>(), (std::vector<float16>{{0}, {0}}));
    std::ostringstream os;
    os << a.slice(0, 0, 2);
    EXPECT_EQ(os.str(), "tensor(float16 (2, 4) [0, 1, 2, 3; 4, 5, 6, 7])");
    Tensor dst = zeros({2, 2}, DType::f16);
    copy_(dst, from_vector(std::vector<float>{1.5f, -2.0f}, {2}));  // broadcast copy into f16
    EXPECT_EQ(bits_of(dst), (std::vector<uint16_t>{0x3e00, 0xc000, 0x3e00, 0xc000}));
    const Tensor w = where(from_vector(std::vector<bool>{true, false}, {2}), ones({2}, DType::f16), zeros({2}, DType::f16));
    EXPECT_EQ(bits_of(w), (std::vector<uint16_t>{0x3c00, 0x0000}));
}

// No gradient flows through float16: converting a tensor that requires grad throws while
// gradients are enabled; a float16 tensor cannot be made to require grad.
TEST(Fp16Tensor, GradientsAreRefused) {
    Tensor x = from_vector(std::vector<float>{1.0f, 2.0f}, {2}).requires_grad_(true);
    EXPECT_NE(test::error_of([&] { (void)x.to(DType::f16); }).find("to(float16): the tensor requires grad"),
              std::string::npos);
    EXPECT_EQ(x.detach().to(DType::f16).dtype(), DType::f16);
    {
        NoGradGuard ng;
        EXPECT_EQ(x.to(DType::f16).dtype(), DType::f16);
    }
    EXPECT_NE(test::error_of([&] { ones({2}, DType::f16).requires_grad_(); }).find("float16"), std::string::npos);
}

TEST(Fp16Tensor, ComputingOpsThrowStorageOnly) {
    const Tensor h = ones({2, 2}, DType::f16);
    const auto storage_only = [](const std::string& msg, const std::string& op) {
        EXPECT_NE(msg.find(op + ": float16 tensors are storage only"), std::string::npos) << msg;
        EXPECT_NE(msg.find(".to(DType::f32)"), std::string::npos) << msg;
    };
    storage_only(test::error_of([&] { add(h, h); }), "add");
    storage_only(test::error_of([&] { exp(h); }), "exp");
    storage_only(test::error_of([&] { sum(h); }), "sum");
    storage_only(test::error_of([&] { lt(h, h); }), "lt");
    storage_only(test::error_of([&] { softmax(h, -1); }), "softmax");
    EXPECT_NE(test::error_of([&] { matmul(h, h); }).find("float16"), std::string::npos);
    EXPECT_EQ(add(h.to(DType::f32), h.to(DType::f32)).to_vector<float>(), std::vector<float>(4, 2.f));
}
