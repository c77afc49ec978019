// Tensor adapters of safetensors: save/load round trip of every qkv dtype (incl. 0-d, empty and
// non-contiguous tensors), BF16 and F16 widening or kept as bf16 / f16 (bit exact), and errors for dtypes qkv
// cannot load and for truncated files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv::io {
namespace {

using qkv::test::TempDir;

TEST(SafeTensorsTensor, RoundTripEveryDtype) {
    TempDir dir;
    const Tensor f32 = from_vector<float>({1.5f, -2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
    const Tensor f64 = from_vector<double>({3.141592653589793}, {});
    const Tensor i64 = from_vector<int64_t>({-1, 0, int64_t(1) << 40}, {3});
    const Tensor b8  = from_vector<bool>({true, false, true, true}, {2, 2});
    const Tensor empty = Tensor::empty({0, 4}, DType::f32);
    const Tensor strided = f32.transpose(0, 1);  // (3, 2), not contiguous
    ASSERT_FALSE(strided.is_contiguous());
    save_safetensors(dir / "t.safetensors",
                     {{"f32", f32}, {"f64", f64}, {"i64", i64}, {"b8", b8}, {"empty", empty},
                      {"strided", strided}},
                     {{"step", "3"}});
    EXPECT_EQ(SafeTensorsFile(dir / "t.safetensors").metadata().at("step"), "3");
    const auto m = load_safetensors(dir / "t.safetensors");
    ASSERT_EQ(m.size(), 6u);
    EXPECT_EQ(m.at("f32").dtype(), DType::f32);
    EXPECT_EQ(m.at("f32").shape(), (Shape{2, 3}));
    EXPECT_EQ(m.at("f32").to_vector<float>(), f32.to_vector<float>());
    EXPECT_EQ(m.at("f64").dim(), 0);
    EXPECT_EQ(m.at("f64").item(), 3.141592653589793);
    EXPECT_EQ(m.at("i64").to_vector<int64_t>(), i64.to_vector<int64_t>());
    EXPECT_EQ(m.at("b8").dtype(), DType::b8);
    EXPECT_EQ(m.at("b8").to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
    EXPECT_EQ(m.at("empty").shape(), (Shape{0, 4}));
    EXPECT_EQ(m.at("strided").shape(), (Shape{3, 2}));
    EXPECT_EQ(m.at("strided").to_vector<float>(), (std::vector<float>{1.5f, 4.f, -2.f, 5.f, 3.f, 6.f}));
}

TEST(SafeTensorsTensor, Bf16WidensAndOtherDtypesAreRejected) {
    TempDir dir;
    const std::vector<uint16_t> bf = {0x3F80, 0xC020, 0x7F80};  // 1, -2.5, +inf
    const std::vector<int32_t> i32 = {7};
    write_safetensors(dir / "bf.safetensors", {{"w", "BF16", {3}, bf.data(), 6}});
    const auto m = load_safetensors(dir / "bf.safetensors");
    EXPECT_EQ(m.at("w").dtype(), DType::f32);
    const auto v = m.at("w").to_vector<float>();
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], -2.5f);
    EXPECT_TRUE(std::isinf(v[2]));
    write_safetensors(dir / "i.safetensors", {{"i", "I32", {1}, i32.data(), 4}});
    try {
        load_safetensors(dir / "i.safetensors");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'i' has dtype I32"), std::string::npos)
            << e.what();
    }
}

TEST(SafeTensorsTensor, Bf16TensorRoundTripIsBitExact) {
    TempDir dir;
    // Every kind of pattern: ±0, a subnormal, ±1, ±inf, the largest bf16, NaNs with payloads.
    const std::vector<uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x3f80, 0xbf80, 0x7f80,
                                        0xff80, 0x7f7f, 0x7fc0, 0xffc1, 0x7f81, 0x4049};
    std::vector<bfloat16> v;
    for (uint16_t b : bits) v.push_back(bfloat16{b});
    const Tensor t = from_vector(v, {3, 4});
    const Tensor strided = t.transpose(0, 1);  // written contiguous, as (4, 3)
    save_safetensors(dir / "b.safetensors", {{"t", t}, {"strided", strided}});
    const SafeTensorsFile f(dir / "b.safetensors");
    EXPECT_EQ(f.info("t").dtype, "BF16");
    EXPECT_EQ(f.info("t").end - f.info("t").begin, 24u);
    const auto raw = f.bytes("t");
    EXPECT_EQ(std::memcmp(raw.data(), bits.data(), 24), 0);  // little-endian uint16 patterns

    const auto kept = load_safetensors(dir / "b.safetensors", DType::bf16);
    EXPECT_EQ(kept.at("t").dtype(), DType::bf16);
    EXPECT_EQ(kept.at("t").shape(), (Shape{3, 4}));
    EXPECT_EQ(kept.at("t").to_vector<bfloat16>(), v);
    EXPECT_EQ(kept.at("strided").shape(), (Shape{4, 3}));
    EXPECT_EQ(kept.at("strided").to_vector<bfloat16>(), strided.to_vector<bfloat16>());
    // The default still widens to f32 (what model loaders want), exactly: pattern << 16.
    const auto wide = load_safetensors(dir / "b.safetensors");
    EXPECT_EQ(wide.at("t").dtype(), DType::f32);
    const std::vector<float> w = wide.at("t").to_vector<float>();
    for (size_t i = 0; i < bits.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &w[i], 4);
        EXPECT_EQ(u, uint32_t(bits[i]) << 16) << i;
    }
    EXPECT_THROW(load_safetensors(dir / "b.safetensors", DType::f64), Error);
}

// F16 (IEEE float16): saved as the patterns, kept bit exact with f16_as = f16, widened exactly to
// f32 by default (what model loaders want).
TEST(SafeTensorsTensor, F16TensorRoundTripIsBitExactAndWidensExactly) {
    TempDir dir;
    // ±0, the smallest subnormal, ±1, ±inf, 65504, a quiet NaN, 0.1's half, 300.
    const std::vector<uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x3c00, 0xbc00, 0x7c00,
                                        0xfc00, 0x7bff, 0x7e00, 0x2e66, 0x5cb0, 0x03ff};
    std::vector<float16> v;
    for (uint16_t b : bits) v.push_back(float16{b});
    const Tensor t = from_vector(v, {3, 4});
    save_safetensors(dir / "h.safetensors", {{"t", t}, {"strided", t.transpose(0, 1)}});
    const SafeTensorsFile f(dir / "h.safetensors");
    EXPECT_EQ(f.info("t").dtype, "F16");
    const auto raw = f.bytes("t");
    EXPECT_EQ(std::memcmp(raw.data(), bits.data(), 24), 0);

    const auto kept = load_safetensors(dir / "h.safetensors", DType::f32, DType::f16);
    EXPECT_EQ(kept.at("t").dtype(), DType::f16);
    EXPECT_EQ(kept.at("t").to_vector<float16>(), v);
    EXPECT_EQ(kept.at("strided").to_vector<float16>(), t.transpose(0, 1).to_vector<float16>());
    const auto wide = load_safetensors(dir / "h.safetensors");
    EXPECT_EQ(wide.at("t").dtype(), DType::f32);
    const std::vector<float> w = wide.at("t").to_vector<float>();
    for (size_t i = 0; i < bits.size(); ++i) {
        if (i == 8) {
            EXPECT_TRUE(std::isnan(w[i]));
            continue;
        }
        EXPECT_EQ(w[i], fp16_to_float(bits[i])) << i;
    }
    EXPECT_EQ(w[7], 65504.0f);
    EXPECT_THROW(load_safetensors(dir / "h.safetensors", DType::f32, DType::bf16), Error);
}

TEST(SafeTensorsTensor, TruncatedBf16FileThrows) {
    TempDir dir;
    const std::string path = dir / "b.safetensors";
    save_safetensors(path, {{"t", ones({8}, DType::bf16)}});
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
    try {
        load_safetensors(path, DType::bf16);
        FAIL() << "no error for a truncated file";
    } catch (const SafeTensorsError& e) {
        EXPECT_TRUE(e.truncated()) << e.what();
        EXPECT_NE(std::string(e.what()).find("the file is truncated"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace qkv::io
