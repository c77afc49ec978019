// Tensor basics: factories, views, strides, broadcasting, printing, errors.
#include <gtest/gtest.h>

#include <iomanip>
#include <sstream>

#include "qkv/core/allocator.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "support/test_util.h"

using namespace qkv;

TEST(Tensor, FactoriesAndItem) {
    Tensor z = zeros({2, 3});
    EXPECT_EQ(z.shape(), (Shape{2, 3}));
    EXPECT_EQ(z.numel(), 6);
    EXPECT_TRUE(z.is_contiguous());
    EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
    EXPECT_EQ(full({2}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
    EXPECT_EQ(arange(0, 5, 1, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(arange(0, 0.5, 0.1, DType::f64).numel(), 5);
    EXPECT_DOUBLE_EQ(scalar_tensor(3.0).item(), 3.0);
    EXPECT_THROW(zeros({2}).item(), Error);
    EXPECT_THROW(from_vector<float>({1, 2, 3}, {2, 2}), Error);
    EXPECT_THROW(zeros({2}).data<double>(), Error);
}

TEST(Tensor, ViewsShareStorage) {
    Tensor a = arange(0, 6).reshape({2, 3});
    Tensor t = a.transpose(0, 1);
    EXPECT_EQ(t.shape(), (Shape{3, 2}));
    EXPECT_FALSE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(t.contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
    Tensor s = a.slice(1, 1, 3);
    EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
    EXPECT_EQ(a.select(0, 1).to_vector<float>(), (std::vector<float>{3, 4, 5}));
    EXPECT_EQ(a.select(1, -1).to_vector<float>(), (std::vector<float>{2, 5}));
    EXPECT_EQ(a.slice(1, 0, 3, 2).to_vector<float>(), (std::vector<float>{0, 2, 3, 5}));
    EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 2, 3}));
    EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
    EXPECT_EQ(a.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
    EXPECT_EQ(a.reshape({-1}).shape(), (Shape{6}));
    EXPECT_EQ(t.reshape({6}).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
    Tensor row = arange(0, 3).reshape({1, 3});
    EXPECT_EQ(row.expand({2, 3}).to_vector<float>(), (std::vector<float>{0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(a.permute({1, 0}).to_vector<float>(), t.to_vector<float>());
    // writing through a view changes the base
    Tensor v = a.select(0, 0);
    fill_(v, 7);
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{7, 7, 7, 3, 4, 5}));
}

TEST(Tensor, ViewErrorsNameShapes) {
    Tensor a = zeros({2, 3});
    try {
        a.reshape({4, 2});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("reshape: cannot reshape (2, 3)"), std::string::npos) << e.what();
    }
    EXPECT_THROW(a.squeeze(0), Error);
    EXPECT_THROW(a.transpose(0, 2), Error);
    EXPECT_THROW(a.expand({3, 3}), Error);
    EXPECT_THROW(a.permute({0, 0}), Error);
    EXPECT_THROW(a.select(0, 2), Error);
}

// contiguous_strides counts a 0 dim as 1, so zeros({3, 0}) has strides (1, 1); is_contiguous said
// no, contiguous() copied into the same layout and reshape copied and retried until the stack
// overflowed (linear with in_features 0 crashed this way).
TEST(Tensor, EmptyTensorsAreContiguousAndReshape) {
    const Tensor a = zeros({3, 0});
    EXPECT_TRUE(a.is_contiguous());
    EXPECT_TRUE(a.contiguous().is_same(a));
    EXPECT_EQ(a.reshape({0, 3}).shape(), (Shape{0, 3}));
    EXPECT_EQ(zeros({2, 0, 4}).reshape({-1, 4}).shape(), (Shape{0, 4}));
    EXPECT_EQ(zeros({3, 0, 2}).transpose(0, 2).reshape({6, 0}).shape(), (Shape{6, 0}));
    Tensor x = zeros({2, 0, 5}, DType::f64).requires_grad_(true);
    sum(x.reshape({5, 0, 2})).backward();
    EXPECT_EQ(x.grad().shape(), (Shape{2, 0, 5}));
}

TEST(Tensor, BroadcastingArithmetic) {
    Tensor a = arange(0, 6).reshape({2, 3});
    Tensor b = from_vector<float>({10, 20, 30}, {3});
    EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{10, 21, 32, 13, 24, 35}));
    Tensor c = from_vector<float>({1, 2}, {2, 1});
    EXPECT_EQ((a * c).to_vector<float>(), (std::vector<float>{0, 1, 2, 6, 8, 10}));
    EXPECT_EQ((a.transpose(0, 1) + 1.0).to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
    try {
        (void)(a + zeros({2}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "add: shapes (2, 3) and (2,) do not broadcast");
    }
    EXPECT_THROW((void)(a + zeros({3}, DType::f64)), Error);
}

TEST(Tensor, Reductions) {
    Tensor a = arange(0, 6).reshape({2, 3});
    EXPECT_DOUBLE_EQ(sum(a).item(), 15.0);
    EXPECT_EQ(sum(a, {0}).to_vector<float>(), (std::vector<float>{3, 5, 7}));
    EXPECT_EQ(sum(a, {1}, true).shape(), (Shape{2, 1}));
    EXPECT_EQ(sum(a, {-1}).to_vector<float>(), (std::vector<float>{3, 12}));
    EXPECT_EQ(mean(a, {1}).to_vector<float>(), (std::vector<float>{1, 4}));
    Tensor m = from_vector<float>({1, 5, 5, 2, -1, 0}, {2, 3});
    EXPECT_EQ(max(m, 1).to_vector<float>(), (std::vector<float>{5, 2}));
    EXPECT_EQ(argmax(m, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
    EXPECT_EQ(argmax(m, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
    EXPECT_EQ(sum_to_shape(ones({4, 2, 3}), {2, 1}).to_vector<float>(), (std::vector<float>{12, 12}));
}

TEST(Tensor, ShapeOps) {
    Tensor a = arange(0, 4).reshape({2, 2});
    Tensor b = arange(4, 6).reshape({1, 2});
    EXPECT_EQ(concat({a, b}, 0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(stack({a, a}, 0).shape(), (Shape{2, 2, 2}));
    EXPECT_EQ(split(arange(0, 5), 2, 0).size(), 3u);
    EXPECT_EQ(chunk(arange(0, 6), 3, 0)[1].to_vector<float>(), (std::vector<float>{2, 3}));
    Tensor idx = from_vector<int64_t>({1, 1, 0}, {3});
    EXPECT_EQ(index_select(a, 0, idx).to_vector<float>(), (std::vector<float>{2, 3, 2, 3, 0, 1}));
    // scatter_rows puts packed rows back: rows 1 and 0 of a into rows 2 and 0 of 3, zeros in row 1.
    EXPECT_EQ(scatter_rows(a, from_vector<int64_t>({2, 0}, {2}), 3).to_vector<float>(),
              (std::vector<float>{2, 3, 0, 0, 0, 1}));
    EXPECT_EQ(scatter_rows(from_vector<int64_t>({7}, {1}), from_vector<int64_t>({1}, {1}), 2).to_vector<int64_t>(),
              (std::vector<int64_t>{0, 7}));
    EXPECT_THROW(scatter_rows(a, from_vector<int64_t>({1, 1}, {2}), 3), Error);  // repeated row
    EXPECT_THROW(scatter_rows(a, from_vector<int64_t>({0, 3}, {2}), 3), Error);  // out of range
    EXPECT_THROW(scatter_rows(a, from_vector<int64_t>({0}, {1}), 3), Error);     // one index per row
    EXPECT_THROW(scatter_rows(scalar_tensor(1.0), from_vector<int64_t>({0}, {1}), 3), Error);
    Tensor gi = from_vector<int64_t>({1, 0}, {2, 1});
    EXPECT_EQ(gather(a, 1, gi).to_vector<float>(), (std::vector<float>{1, 2}));
    EXPECT_EQ(repeat_interleave(from_vector<int64_t>({3, 2}, {2}), 2, 0).to_vector<int64_t>(),
              (std::vector<int64_t>{3, 3, 2, 2}));
    try {
        index_select(a, 0, from_vector<int64_t>({2}, {1}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("index 2 at position 0 out of range"), std::string::npos) << e.what();
    }
    EXPECT_THROW(concat({a, zeros({2, 3})}, 0), Error);
}

TEST(Tensor, MasksAndWhere) {
    Tensor a = arange(0, 4).reshape({2, 2});
    Tensor m = from_vector<bool>({true, false}, {1, 2});
    EXPECT_EQ(masked_fill(a, m, -1).to_vector<float>(), (std::vector<float>{-1, 1, -1, 3}));
    EXPECT_EQ(lt(arange(0, 3), full({}, 1.5)).to_vector<bool>(), (std::vector<bool>{true, true, false}));
}

TEST(Generator, SameSeedSameNumbersAnyThreads) {
    Generator g1(42), g2(42);
    Tensor x = randn({1000}, &g1);
    Tensor y = randn({1000}, &g2);
    EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
    Tensor z = randn({1000}, &g1);
    EXPECT_NE(x.to_vector<float>(), z.to_vector<float>());
    // mean/std of 100k normals
    Generator g3(7);
    std::vector<double> v = randn({100000}, &g3, 0, 1, DType::f64).to_vector<double>();
    double m = 0, s = 0;
    for (double e : v) m += e;
    m /= double(v.size());
    for (double e : v) s += (e - m) * (e - m);
    s = std::sqrt(s / double(v.size()));
    EXPECT_NEAR(m, 0.0, 0.02);
    EXPECT_NEAR(s, 1.0, 0.02);
    std::vector<float> u = rand({10000}, &g3).to_vector<float>();
    for (float e : u) ASSERT_TRUE(e >= 0.f && e < 1.f);
}

TEST(Allocator, SteadyStateReusesBlocks) {
    { Tensor warm = zeros({1 << 20}); }
    reset_allocator_stats();
    for (int i = 0; i < 10; ++i) {
        Tensor t = zeros({1 << 20});
        Tensor u = t + 1.0;
    }
    const AllocatorStats s = allocator_stats();
    EXPECT_EQ(s.allocs, 20);
    EXPECT_LE(s.system_allocs, 1);
}

TEST(Tensor, Printing) {
    std::ostringstream os;
    os << arange(0, 3);
    EXPECT_EQ(os.str(), "tensor(float32 (3,) [0, 1, 2])");
}

TEST(Tensor, PrintingShowsIntegersExactlyAndFloatsAsTheStreamFormatsThem) {
    // Integers used to go through a double: 1234567 printed as 1.23457e+06, 2^53 + 1 lost its
    // last digit and std::fixed printed 3 as 3.0000.
    auto str = [](const Tensor& t, bool fixed) {
        std::ostringstream os;
        if (fixed) os << std::fixed << std::setprecision(4);
        os << t;
        return os.str();
    };
    const Tensor i = from_vector<int64_t>({3, -7, 1234567, 9007199254740993}, {4});
    for (bool fixed : {false, true}) {
        EXPECT_EQ(str(i, fixed), "tensor(int64 (4,) [3, -7, 1234567, 9007199254740993])");
        EXPECT_EQ(str(from_vector<bool>({true, false}, {2}), fixed), "tensor(bool (2,) [1, 0])");
    }
    EXPECT_EQ(str(arange(0, 6, 1, DType::i64).reshape({2, 3}).transpose(0, 1), false),
              "tensor(int64 (3, 2) [0, 3; 1, 4; 2, 5])");
    // Floats are unchanged: the stream's default format, or its std::fixed precision.
    const Tensor f = from_vector<float>({3.f, -0.5f, 1234567.f}, {3});
    EXPECT_EQ(str(f, false), "tensor(float32 (3,) [3, -0.5, 1.23457e+06])");
    EXPECT_EQ(str(f, true), "tensor(float32 (3,) [3.0000, -0.5000, 1234567.0000])");
    EXPECT_EQ(str(from_vector<double>({0.1, 1e-7}, {2}), false), "tensor(float64 (2,) [0.1, 1e-07])");
}

namespace qkv {
namespace {

TEST(Parallel, ThreadCountOutsideOneToMaxThrowsAndKeepsTheCount) {
    const int before = get_num_threads();
    EXPECT_THROW(set_num_threads(0), Error);
    EXPECT_THROW(set_num_threads(kMaxThreads + 1), Error);  // libgomp would crash instead
    EXPECT_EQ(get_num_threads(), before);
    set_num_threads(1);
    EXPECT_EQ(get_num_threads(), 1);
    set_num_threads(before);
}

}  // namespace
}  // namespace qkv

TEST(Tensor, ScatterRowsZeroesSkippedRowsInReusedMemory) {
    // The output is taken from the caching allocator without a fill: a freed 2 MiB block full of
    // 7s is what the next same-size request gets, so every row no index names must be zeroed.
    const int64_t rows = 1024, cols = 512;  // 2 MiB of float32: the large pool
    { Tensor dirty = full({rows, cols}, 7.0); }
    std::vector<int64_t> idx;
    for (int64_t r = 0; r < rows; r += 3) idx.push_back(r);
    const int64_t n = int64_t(idx.size());
    const Tensor src = full({n, cols}, 1.0);
    const std::vector<float> out = scatter_rows(src, from_vector(idx, {n}), rows).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; c += 97)
            ASSERT_EQ(out[size_t(r * cols + c)], r % 3 == 0 ? 1.f : 0.f) << "row " << r << " col " << c;
}

using test::error_of;

TEST(Tensor, ReshapeWithMinusOneNamesAnOverflowingShape) {
    // The known dims' product wrapped, and the error then blamed the element count.
    const int64_t p40 = int64_t(1) << 40;
    const std::string msg = error_of([&] { arange(0, 6).reshape({p40, p40, -1}); });
    EXPECT_NE(msg.find("reshape: the shape (" + std::to_string(p40) + ", " + std::to_string(p40) +
                       ", -1) has more elements than int64 can count"),
              std::string::npos)
        << msg;
}

TEST(Tensor, FactoriesThrowWhenTheElementOrByteCountOverflowsInt64) {
    // Once: numel 0 for (2^40, 2^40), negative for (3, 2^62), and (2^31, 2^31) f32 "succeeded" with
    // a wrapped byte count.
    const int64_t p40 = int64_t(1) << 40, p31 = int64_t(1) << 31, p62 = int64_t(1) << 62;
    for (const Shape& s : {Shape{p40, p40}, Shape{3, p62}, Shape{p31, p31}, Shape{p40, 0, p40, p40}}) {
        const std::string msg = error_of([&] { zeros(s); });
        EXPECT_NE(msg.find("shape " + shape_str(s)), std::string::npos) << msg;
        EXPECT_NE(msg.find("than int64 can count"), std::string::npos) << msg;
        EXPECT_THROW(Tensor::empty(s, DType::f64), Error);
        EXPECT_THROW(ones(s), Error);
        EXPECT_THROW(full(s, 2.0, DType::i64), Error);
        EXPECT_THROW(rand(s), Error);
        EXPECT_THROW(randn(s), Error);
    }
    EXPECT_THROW(shape_numel({p40, p40}), Error);
    EXPECT_EQ(shape_numel({p40, p40, 0}), 0);
    EXPECT_EQ(shape_numel({p31, p31}), int64_t(1) << 62);
    EXPECT_EQ(zeros({0, 3}).numel(), 0);

    std::string msg = error_of([] { arange(0, NAN); });
    EXPECT_NE(msg.find("arange(start 0, end nan, step 1)"), std::string::npos) << msg;
    EXPECT_THROW(arange(0, INFINITY), Error);
    EXPECT_THROW(arange(0, 1, NAN), Error);
    msg = error_of([] { arange(0, 1e300); });
    EXPECT_NE(msg.find("arange(start 0, end 1e+300, step 1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than int64 can count"), std::string::npos) << msg;
    EXPECT_EQ(arange(3, 1).numel(), 0);  // an empty range stays legal

    msg = error_of([] { randn({2}, nullptr, 0.0, -1.0); });
    EXPECT_NE(msg.find("randn: need a finite mean and a finite std >= 0, got mean 0, std -1"),
              std::string::npos) << msg;
    EXPECT_THROW(randn({2}, nullptr, NAN, 1.0), Error);
    EXPECT_THROW(randn({2}, nullptr, 0.0, INFINITY), Error);
    EXPECT_EQ(randn({3}, nullptr, 2.0, 0.0).to_vector<float>(), std::vector<float>(3, 2.f));
    msg = error_of([] { rand({2}, nullptr, 1.0, 0.0); });
    EXPECT_NE(msg.find("rand: need finite low <= high, got low 1, high 0"), std::string::npos) << msg;
    EXPECT_THROW(rand({2}, nullptr, 0.0, NAN), Error);
    EXPECT_EQ(rand({2}, nullptr, 1.5, 1.5).to_vector<float>(), std::vector<float>(2, 1.5f));
}

TEST(Tensor, UndefinedTensorMethodsThrowInsteadOfAborting) {
    // Once QKV_ASSERT in Tensor::impl() aborted the process.
    Tensor t;
    EXPECT_FALSE(t.defined());
    EXPECT_FALSE(t.requires_grad());
    const std::string msgs[] = {error_of([&] { (void)t.numel(); }), error_of([&] { t.requires_grad_(); }),
                                error_of([&] { (void)t.shape(); }), error_of([&] { (void)t.grad(); }),
                                error_of([&] { (void)t.contiguous(); }), error_of([&] { (void)t.dtype(); })};
    for (const std::string& msg : msgs) EXPECT_NE(msg.find("undefined tensor"), std::string::npos) << msg;
}
