// DType::bf16 tensors (storage only): conversions on the tensor path (round to nearest even by
// hand-derived bit patterns, f64 rounded once, integers, all 65536 patterns back to f32), views
// and copies of non-contiguous bf16 tensors, factories, printing, and the storage-only errors of
// computing ops. The scalar conversions themselves are tested in test_bf16.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/bf16.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/ops/softmax.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

float float_of_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

/// The bf16 bit patterns of a bf16 tensor (any layout), row-major.
std::vector<uint16_t> bits_of(const Tensor& t) {
    std::vector<uint16_t> out;
    for (bfloat16 b : t.to_vector<bfloat16>()) out.push_back(b.bits);
    return out;
}

Tensor bf16_from_bits(const std::vector<uint16_t>& bits, const Shape& shape) {
    std::vector<bfloat16> v;
    for (uint16_t b : bits) v.push_back(bfloat16{b});
    return from_vector(v, shape);
}

// A gradient cannot flow through bf16 storage: converting a tensor that requires grad throws while
// gradients are enabled (instead of silently cutting the graph); detached or under NoGradGuard it works.
TEST(Bf16Tensor, ConvertingATensorThatRequiresGradIsRefused) {
    Tensor x = from_vector(std::vector<float>{1.0f, 2.0f}, {2}).requires_grad_(true);
    try {
        (void)x.to(DType::bf16);
        FAIL() << "to(bf16) of a tensor requiring grad was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("to(bfloat16): the tensor requires grad"), std::string::npos) << e.what();
    }
    EXPECT_EQ(x.detach().to(DType::bf16).dtype(), DType::bf16);
    NoGradGuard ng;
    EXPECT_EQ(x.to(DType::bf16).dtype(), DType::bf16);
}

}  // namespace

TEST(Bf16Tensor, DTypeBasics) {
    EXPECT_EQ(dtype_size(DType::bf16), 2);
    EXPECT_STREQ(dtype_name(DType::bf16), "bfloat16");
    EXPECT_FALSE(is_floating(DType::bf16));  // not a compute dtype
    EXPECT_TRUE(is_float_storage(DType::bf16));
    EXPECT_TRUE(is_float_storage(DType::f32));
    EXPECT_FALSE(is_float_storage(DType::i64));
    // The existing dtypes keep their numbers (bf16 is appended).
    EXPECT_EQ(int(DType::f32), 0);
    EXPECT_EQ(int(DType::b8), 3);
    EXPECT_EQ(int(DType::bf16), 4);
    const Tensor t = Tensor::empty({3, 5}, DType::bf16);
    EXPECT_EQ(t.impl().storage->nbytes, 30);
    EXPECT_NO_THROW(t.data<bfloat16>());
    EXPECT_THROW(t.data<float>(), Error);
    EXPECT_THROW(t.to_vector<float>(), Error);
}

TEST(Bf16Tensor, F32ToBf16RoundsToNearestEven) {
    // 1 = 0x3f800000; bf16 keeps the top 16 bits, so bit 15 of the float is the half-ulp bit.
    const float one_p8 = 1.0f + 0x1p-8f;          // halfway between 1 (0x3f80, even) and 1+2^-7
    const float one_3p8 = 1.0f + 3 * 0x1p-8f;     // halfway between 1+2^-7 (0x3f81, odd) and 1+2^-6
    const float above = 1.0f + 0x1p-8f + 0x1p-20f;  // just above the first tie
    const float below = float_of_bits(0x3f807fffu);  // just below the first tie
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x = {1.0f, one_p8, one_3p8, -one_p8, -one_3p8, above, below,
                                  inf, -inf, 3.4e38f, -3.4e38f, -0.0f, 0.0f,
                                  std::numeric_limits<float>::quiet_NaN(), float_of_bits(0xff800001u),
                                  float_of_bits(0x7f7f0000u) /* largest bf16: exact */};
    const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0xbf80, 0xbf82, 0x3f81, 0x3f80,
                                        0x7f80, 0xff80, 0x7f80, 0xff80, 0x8000, 0x0000};
    // A column of a (16, 2) tensor: the conversion of a non-contiguous source.
    const Tensor xs = from_vector(x, {16});
    const Tensor src = stack({xs, xs}, 1).select(1, 1);
    ASSERT_FALSE(src.is_contiguous());
    const Tensor b = src.to(DType::bf16);
    EXPECT_EQ(b.dtype(), DType::bf16);
    const std::vector<uint16_t> got = bits_of(b);
    for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << "element " << i << " (" << x[i] << ")";
    // NaN stays NaN (quiet, sign kept).
    EXPECT_EQ(got[13] & 0x7f80, 0x7f80);
    EXPECT_NE(got[13] & 0x007f, 0);
    EXPECT_EQ(got[14] & 0x7f80, 0x7f80);
    EXPECT_NE(got[14] & 0x007f, 0);
    EXPECT_EQ(got[14] >> 15, 1);
    EXPECT_EQ(got[15], 0x7f7f);
    // Widening back: -0 keeps its sign, the ties landed where RNE says.
    const std::vector<float> back = b.to(DType::f32).to_vector<float>();
    EXPECT_TRUE(std::signbit(back[11]));
    EXPECT_EQ(back[2], 1.0f + 0x1p-6f);
    EXPECT_TRUE(std::isnan(back[13]));
}

TEST(Bf16Tensor, F64ToBf16RoundsOnce) {
    // 1 + 2^-8 + 2^-30: above the tie between 1 and 1 + 2^-7, so RNE gives 1 + 2^-7 (0x3f81).
    // Through float first, 2^-30 is lost (float keeps 2^-23), leaving the tie, which goes to the
    // even 1 (0x3f80): the double rounding a once-rounded conversion must avoid.
    const double x = 1.0 + 0x1p-8 + 0x1p-30;
    const Tensor d = from_vector<double>({x, -x, 1.0 + 0x1p-8, 3.4e38, 1e300, -0.0}, {6});
    EXPECT_EQ(bits_of(d.to(DType::f32).to(DType::bf16))[0], 0x3f80);  // the wrong, twice-rounded value
    EXPECT_EQ(bits_of(d.to(DType::bf16)), (std::vector<uint16_t>{0x3f81, 0xbf81, 0x3f80, 0x7f80, 0x7f80, 0x8000}));
    // The factories and fill_ take the same route from their double value.
    EXPECT_EQ(bits_of(full({2}, x, DType::bf16)), (std::vector<uint16_t>{0x3f81, 0x3f81}));
    Tensor f = zeros({3}, DType::bf16);
    fill_(f, -x);
    EXPECT_EQ(bits_of(f), (std::vector<uint16_t>{0xbf81, 0xbf81, 0xbf81}));
    EXPECT_EQ(bits_of(scalar_tensor(x, DType::bf16))[0], 0x3f81);
}

TEST(Bf16Tensor, IntegersAndBoolToBf16) {
    const int64_t big = (int64_t(1) << 62) + (int64_t(1) << 54) + 1;  // above a tie by 1
    const Tensor i = from_vector<int64_t>({0, 1, -3, 255, 256, 257, 259, -259, big,
                                           std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min()},
                                          {11});
    const std::vector<float> got = i.to(DType::bf16).to(DType::f32).to_vector<float>();
    const std::vector<float> want = {0.f, 1.f, -3.f, 255.f, 256.f,
                                     256.f,   // 257: tie between 256 (even) and 258
                                     260.f,   // 259: tie between 258 (odd) and 260
                                     -260.f,
                                     std::ldexp(1.0f + 0x1p-7f, 62),  // once: up (via double: 2^62)
                                     0x1p63f, -0x1p63f};
    EXPECT_EQ(got, want);
    // The double route rounds `big` twice and lands on 2^62: the test tells the two apart.
    EXPECT_EQ(from_vector<int64_t>({big}, {1}).to(DType::f64).to(DType::bf16).to(DType::f32).item(), 0x1p62);
    EXPECT_EQ(from_vector<bool>({true, false}, {2}).to(DType::bf16).to(DType::f32).to_vector<float>(),
              (std::vector<float>{1.f, 0.f}));
    EXPECT_EQ(arange(0, 4, 1, DType::bf16).to(DType::f32).to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(Bf16Tensor, Bf16ToF32IsExactForAll65536Patterns) {
    std::vector<uint16_t> all(65536);
    for (uint32_t b = 0; b < 65536; ++b) all[b] = uint16_t(b);
    const Tensor b = bf16_from_bits(all, {256, 256});
    const std::vector<float> f = b.to(DType::f32).to_vector<float>();
    const std::vector<double> d = b.to(DType::f64).to_vector<double>();
    const std::vector<uint16_t> again = bits_of(b.to(DType::f32).to(DType::bf16));
    int bad = 0;
    for (uint32_t k = 0; k < 65536 && bad < 5; ++k) {
        uint32_t u;
        std::memcpy(&u, &f[k], 4);
        const bool nan = (k & 0x7f80) == 0x7f80 && (k & 0x7f) != 0;
        bool ok = u == k << 16;  // widening is exact: the pattern in the top half, zeros below
        ok = ok && (nan ? std::isnan(d[k]) : d[k] == double(f[k]));
        ok = ok && (nan ? std::isnan(bf16_to_float(again[k])) : again[k] == k);
        if (!ok) {
            ++bad;
            ADD_FAILURE() << "pattern 0x" << std::hex << k << ": f32 bits 0x" << u << ", f64 " << d[k]
                          << ", back 0x" << again[k];
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(Bf16Tensor, Bf16ToIntegersAndBoolFollowPyTorch) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const Tensor b = from_vector<float>({-2.5f, 2.75f, 0.5f, -0.0f, 0.0f, 300.f}, {6}).to(DType::bf16);
    EXPECT_EQ(b.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{-2, 2, 0, 0, 0, 300}));
    EXPECT_EQ(b.to(DType::b8).to_vector<bool>(), (std::vector<bool>{true, true, true, false, false, true}));
    EXPECT_EQ(from_vector<float>({nan}, {1}).to(DType::bf16).to(DType::b8).to_vector<bool>(),
              (std::vector<bool>{true}));
    // The other dtypes to bool are nonzero too (a uint8_t cast made 0.5 false, 256 undefined).
    EXPECT_EQ(from_vector<float>({0.5f, 256.f, 0.f, nan}, {4}).to(DType::b8).to_vector<bool>(),
              (std::vector<bool>{true, true, false, true}));
    EXPECT_EQ(from_vector<int64_t>({256, 0}, {2}).to(DType::b8).to_vector<bool>(), (std::vector<bool>{true, false}));
}

TEST(Bf16Tensor, ViewsAndCopiesOfNonContiguousTensors) {
    // 0..11 are exact in bf16; a (3, 4) bf16 tensor and its views.
    const Tensor b = arange(0, 12, 1, DType::f32).reshape({3, 4}).to(DType::bf16);
    auto values = [](const Tensor& t) { return t.to(DType::f32).to_vector<float>(); };
    const Tensor t = b.transpose(0, 1);  // (4, 3), a view
    EXPECT_EQ(t.dtype(), DType::bf16);
    EXPECT_FALSE(t.is_contiguous());
    EXPECT_EQ(t.raw_data(), b.raw_data());
    EXPECT_EQ(values(t), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
    const Tensor c = t.contiguous();
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.dtype(), DType::bf16);
    EXPECT_EQ(values(c), values(t));
    EXPECT_EQ(bits_of(t.clone()), bits_of(t));
    EXPECT_EQ(values(b.slice(1, 1, 4, 2)), (std::vector<float>{1, 3, 5, 7, 9, 11}));
    EXPECT_EQ(values(b.select(0, 2)), (std::vector<float>{8, 9, 10, 11}));
    EXPECT_EQ(values(t.reshape({12})), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
    EXPECT_EQ(b.reshape({2, 6}).raw_data(), b.raw_data());  // contiguous: a view
    EXPECT_EQ(values(b.select(1, 0).unsqueeze(1).expand({3, 2})), (std::vector<float>{0, 0, 4, 4, 8, 8}));
    EXPECT_EQ(values(b.permute({1, 0}).unsqueeze(0).squeeze(0)), values(t));
    // copy_ into a strided bf16 destination, from bf16 and from f32 (which rounds).
    Tensor dst = zeros({4, 3}, DType::bf16).transpose(0, 1);  // (3, 4) view, not contiguous
    copy_(dst, b);
    EXPECT_EQ(values(dst), values(b));
    copy_(dst, full({4}, 1.0 + 0x1p-8 + 0x1p-20, DType::f32));  // broadcast rows; rounds up
    EXPECT_EQ(bits_of(dst), std::vector<uint16_t>(12, 0x3f81));
    // Plain copies: concat, stack, index_select on either dim, gather, where, masked_fill.
    EXPECT_EQ(values(concat({b, b.slice(0, 0, 1)}, 0)).size(), 16u);
    EXPECT_EQ(values(concat({t, t}, 1)).back(), 11.f);
    EXPECT_EQ(stack({b, b}, 0).shape(), (Shape{2, 3, 4}));
    const Tensor idx = from_vector<int64_t>({2, 0}, {2});
    EXPECT_EQ(values(index_select(b, 0, idx)), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3}));
    EXPECT_EQ(values(index_select(t, 1, idx)), (std::vector<float>{8, 0, 9, 1, 10, 2, 11, 3}));
    EXPECT_EQ(values(gather(b, 1, from_vector<int64_t>({3, 0, 1}, {3, 1}))), (std::vector<float>{3, 4, 9}));
    const Tensor mask = from_vector<bool>({true, false, false, true}, {4});
    EXPECT_EQ(values(where(mask, b, zeros({}, DType::bf16)).select(0, 0)), (std::vector<float>{0, 0, 0, 3}));
    EXPECT_EQ(values(masked_fill(b, mask, -1.5).select(0, 1)), (std::vector<float>{-1.5, 5, 6, -1.5}));
    // Factories, item and printing.
    EXPECT_EQ(values(ones({2}, DType::bf16)), (std::vector<float>{1, 1}));
    EXPECT_EQ(bits_of(zeros({2}, DType::bf16)), (std::vector<uint16_t>{0, 0}));
    EXPECT_EQ(b.select(0, 2).select(0, 3).item(), 11.0);
    EXPECT_EQ(full({}, 3.140625, DType::bf16).item(), 3.140625);
    std::ostringstream os;
    os << b.slice(0, 0, 2);
    EXPECT_EQ(os.str(), "tensor(bfloat16 (2, 4) [0, 1, 2, 3; 4, 5, 6, 7])");
}

TEST(Bf16Tensor, ComputingOpsThrowStorageOnly) {
    const Tensor b = ones({2, 2}, DType::bf16);
    const auto storage_only = [](const std::string& msg, const std::string& op) {
        EXPECT_NE(msg.find(op + ": bfloat16 tensors are storage only"), std::string::npos) << msg;
        EXPECT_NE(msg.find(".to(DType::f32)"), std::string::npos) << msg;
    };
    storage_only(test::error_of([&] { add(b, b); }), "add");
    storage_only(test::error_of([&] { mul(b, 2.0); }), "mul");
    storage_only(test::error_of([&] { exp(b); }), "exp");
    storage_only(test::error_of([&] { sum(b); }), "sum");
    storage_only(test::error_of([&] { lt(b, b); }), "lt");
    storage_only(test::error_of([&] { argmax(b, 1); }), "argmax");
    storage_only(test::error_of([&] { softmax(b, -1); }), "softmax");
    storage_only(test::error_of([&] { Tensor a = b.clone(); add_(a, b); }), "add_");
    storage_only(test::error_of([&] { matmul(b, b); }), "matmul");
    EXPECT_NE(test::error_of([&] { Tensor a = b.clone(); a.requires_grad_(); }).find("bfloat16"), std::string::npos);
    EXPECT_NE(test::error_of([&] { rand({2}, nullptr, 0, 1, DType::bf16); }).find("float32 or float64"),
              std::string::npos);
    // Converted first, the same op runs.
    EXPECT_EQ(add(b.to(DType::f32), b.to(DType::f32)).to_vector<float>(), std::vector<float>(4, 2.f));
}
