// Tensor adapters of safetensors: save/load round trip of every qkv dtype (incl. 0-d, empty and
// non-contiguous tensors), BF16 widening, and errors for dtypes qkv cannot load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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
    const std::vector<uint16_t> f16 = {0x3C00};
    write_safetensors(dir / "bf.safetensors", {{"w", "BF16", {3}, bf.data(), 6}});
    const auto m = load_safetensors(dir / "bf.safetensors");
    EXPECT_EQ(m.at("w").dtype(), DType::f32);
    const auto v = m.at("w").to_vector<float>();
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], -2.5f);
    EXPECT_TRUE(std::isinf(v[2]));
    write_safetensors(dir / "h.safetensors", {{"h", "F16", {1}, f16.data(), 2}});
    try {
        load_safetensors(dir / "h.safetensors");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'h' has dtype F16"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace qkv::io
