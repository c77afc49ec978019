// Tensor basics that need no autograd: storage, metadata, element access, factories, printing.
// Views, copies and backward() are defined in src/ops/views.cpp and src/autograd/engine.cpp.
#include "qkv/core/tensor.h"

#include <cmath>
#include <cstring>
#include <ostream>

#include "core/parallel_for.h"
#include "core/strided.h"
#include "qkv/core/allocator.h"
#include "qkv/core/generator.h"
#include "qkv/core/philox.h"

namespace qkv {

Storage::Storage(int64_t n) : data(allocate(n)), nbytes(n) {}
Storage::~Storage() { deallocate(data, nbytes); }

Tensor Tensor::empty(const Shape& shape, DType dtype) {
    // The strides multiply every dim (a 0 counting as 1): their product and the byte count must fit.
    int64_t span = 1, nbytes = 0;
    for (int64_t d : shape) {
        QKV_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
        QKV_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span), "empty: shape ", shape,
                  " has more elements than int64 can count");
    }
    QKV_CHECK(!__builtin_mul_overflow(shape_numel(shape), int64_t(dtype_size(dtype)), &nbytes),
              "empty: shape ", shape, " of ", dtype_name(dtype), " needs more bytes than int64 can count");
    auto impl     = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(nbytes);
    impl->shape   = shape;
    impl->strides = contiguous_strides(shape);
    impl->dtype   = dtype;
    return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
    return shape()[size_t(normalize_axis(d, dim(), "size"))];
}

bool Tensor::is_contiguous() const {
    if (numel() == 0) return true;
    int64_t expect = 1;
    for (int64_t i = dim() - 1; i >= 0; --i) {
        const int64_t s = shape()[size_t(i)];
        if (s != 1 && strides()[size_t(i)] != expect) return false;
        expect *= s;
    }
    return true;
}

template <class T>
T* Tensor::data() const {
    QKV_CHECK(dtype() == dtype_of<T>::value, "data: tensor has dtype ", dtype_name(dtype()),
              ", requested ", dtype_name(dtype_of<T>::value));
    return static_cast<T*>(impl().storage->data) + offset();
}
template float*   Tensor::data<float>() const;
template double*  Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bfloat16* Tensor::data<bfloat16>() const;
template float16* Tensor::data<float16>() const;
template <>
bool* Tensor::data<bool>() const {
    QKV_CHECK(dtype() == DType::b8, "data: tensor has dtype ", dtype_name(dtype()),
              ", requested bool");
    return static_cast<bool*>(impl().storage->data) + offset();
}

void* Tensor::raw_data() const {
    return static_cast<char*>(impl().storage->data) + offset() * dtype_size(dtype());
}

namespace {
double load_as_double(const void* base, DType t, int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(base)[i];
        case DType::f64: return static_cast<const double*>(base)[i];
        case DType::i64: return double(static_cast<const int64_t*>(base)[i]);
        case DType::b8: return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
        case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
        case DType::f16: return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    }
    return 0;
}
}  // namespace

double Tensor::item() const {
    QKV_CHECK(numel() == 1, "item: tensor of shape ", shape(), " has ", numel(),
              " elements, expected 1");
    return load_as_double(raw_data(), dtype(), 0);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
    QKV_CHECK(dtype() == dtype_of<T>::value, "to_vector: tensor has dtype ", dtype_name(dtype()),
              ", requested ", dtype_name(dtype_of<T>::value));
    std::vector<T> out(static_cast<size_t>(numel()));
    const T* base = static_cast<const T*>(impl().storage->data);
    const Shape& st = strides();
    int64_t pos = 0;
    detail::for_each_strided<1>(shape(), {&st}, {offset()},
                                [&](int64_t n, std::array<int64_t, 1> o, std::array<int64_t, 1> s) {
                                    for (int64_t i = 0; i < n; ++i) out[size_t(pos++)] = base[o[0] + i * s[0]];
                                });
    return out;
}
template std::vector<float>   Tensor::to_vector<float>() const;
template std::vector<double>  Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
template std::vector<float16> Tensor::to_vector<float16>() const;
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
    QKV_CHECK(dtype() == DType::b8, "to_vector: tensor has dtype ", dtype_name(dtype()),
              ", requested bool");
    std::vector<bool> out;
    out.reserve(static_cast<size_t>(numel()));
    const uint8_t* base = static_cast<const uint8_t*>(impl().storage->data);
    const Shape& st = strides();
    detail::for_each_strided<1>(shape(), {&st}, {offset()},
                                [&](int64_t n, std::array<int64_t, 1> o, std::array<int64_t, 1> s) {
                                    for (int64_t i = 0; i < n; ++i) out.push_back(base[o[0] + i * s[0]] != 0);
                                });
    return out;
}

// ---- factories ----

Tensor full(const Shape& shape, double value, DType dtype) {
    Tensor t = Tensor::empty(shape, dtype);
    const int64_t n = t.numel();
    // Threads split large fills: a backward's zeros (index_select's) were a serial ~1.7 % of a
    // 2-thread training step.
    auto fill = [n](auto* p, auto v) { detail::parallel_for(n, n > (int64_t(1) << 15), [&](int64_t i) { p[i] = v; }); };
    switch (dtype) {
        case DType::f32: fill(t.data<float>(), float(value)); break;
        case DType::f64: fill(t.data<double>(), value); break;
        case DType::i64: fill(t.data<int64_t>(), int64_t(value)); break;
        case DType::b8: fill(static_cast<uint8_t*>(t.raw_data()), uint8_t(value != 0 ? 1 : 0)); break;
        case DType::bf16: fill(static_cast<uint16_t*>(t.raw_data()), bf16_bits(value)); break;
        case DType::f16: fill(static_cast<uint16_t*>(t.raw_data()), fp16_bits(value)); break;
    }
    return t;
}
Tensor zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
    QKV_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step) && step != 0,
              "arange(start ", start, ", end ", end, ", step ", step,
              "): start, end and step must be finite and step non-zero");
    const double len = std::ceil((end - start) / step);
    QKV_CHECK(len < 9.2e18, "arange(start ", start, ", end ", end, ", step ", step, "): ", len,
              " elements are more than int64 can count");
    const int64_t n = len > 0 ? int64_t(len) : 0;
    Tensor t = Tensor::empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
        const double v = start + double(i) * step;
        switch (dtype) {
            case DType::f32: t.data<float>()[i] = float(v); break;
            case DType::f64: t.data<double>()[i] = v; break;
            case DType::i64: t.data<int64_t>()[i] = int64_t(v); break;
            case DType::b8: QKV_CHECK(false, "arange: bool dtype is not supported");
            case DType::bf16: t.data<bfloat16>()[i] = bfloat16{bf16_bits(v)}; break;
            case DType::f16: t.data<float16>()[i] = float16{fp16_bits(v)}; break;
        }
    }
    return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    QKV_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
              " values do not fill shape ", shape);
    Tensor t = Tensor::empty(shape, dtype_of<T>::value);
    if constexpr (std::is_same_v<T, bool>) {
        uint8_t* p = static_cast<uint8_t*>(t.raw_data());
        for (size_t i = 0; i < values.size(); ++i) p[i] = values[i] ? 1 : 0;
    } else {
        std::copy(values.begin(), values.end(), t.data<T>());
    }
    return t;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&);
template Tensor from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&);
template Tensor from_vector<float16>(const std::vector<float16>&, const Shape&);

namespace {
template <class T, class F>
void fill_random(Tensor& t, F&& f) {
    T* p = t.data<T>();
    const int64_t n = t.numel();
    detail::parallel_for(n, n > 65536, [&](int64_t i) { p[i] = T(f(i)); });
}

/// A new float tensor whose element i is f(seed, c) with c = start + k·i: k Philox counters per
/// element from the generator's reservation, so values do not depend on the thread count.
template <class F>
Tensor philox_tensor(const Shape& shape, Generator* gen, DType dtype, uint64_t k, F&& f) {
    Generator& g = gen ? *gen : default_generator();
    Tensor t = Tensor::empty(shape, dtype);
    const uint64_t seed = g.seed(), start = g.reserve(k * uint64_t(t.numel()));
    auto at = [&](int64_t i) { return f(seed, start + k * uint64_t(i)); };
    if (dtype == DType::f32) fill_random<float>(t, at);
    else fill_random<double>(t, at);
    return t;
}
}  // namespace

Tensor rand(const Shape& shape, Generator* gen, double low, double high, DType dtype) {
    QKV_CHECK(is_floating(dtype), "rand: dtype must be float32 or float64");
    QKV_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
              "rand: need finite low <= high, got low ", low, ", high ", high);
    return philox_tensor(shape, gen, dtype, 2, [&](uint64_t seed, uint64_t c) {
        return low + (high - low) * philox::uniform01d(philox::bits(seed, 0, c), philox::bits(seed, 0, c + 1));
    });
}

Tensor randn(const Shape& shape, Generator* gen, double mean, double std, DType dtype) {
    QKV_CHECK(is_floating(dtype), "randn: dtype must be float32 or float64");
    QKV_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "randn: need a finite mean and a finite "
              "std >= 0, got mean ", mean, ", std ", std);
    // Box–Muller on two 53-bit uniforms per element (the cosine branch only): simple and
    // independent of the thread count.
    return philox_tensor(shape, gen, dtype, 4, [&](uint64_t seed, uint64_t c) {
        double u1 = philox::uniform01d(philox::bits(seed, 0, c), philox::bits(seed, 0, c + 1));
        const double u2 = philox::uniform01d(philox::bits(seed, 0, c + 2), philox::bits(seed, 0, c + 3));
        if (u1 < 1e-300) u1 = 1e-300;
        return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    });
}

// ---- printing ----

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
    if (!t.defined()) return os << "tensor(undefined)";
    os << "tensor(" << dtype_name(t.dtype()) << " " << shape_str(t.shape());
    const int64_t n = t.numel();
    const Shape& st = t.strides();
    const void* base = t.impl().storage->data;
    // Integer dtypes print as integers, exactly; floats as the stream formats a double. (Through a
    // double, 1234567 printed as 1.23457e+06, 2^53 + 1 lost its last digit, std::fixed added ".000000".)
    auto print = [&](int64_t i) {
        switch (t.dtype()) {
            case DType::i64: os << static_cast<const int64_t*>(base)[i]; break;
            case DType::b8: os << (static_cast<const uint8_t*>(base)[i] ? 1 : 0); break;
            default: os << load_as_double(base, t.dtype(), i);
        }
    };
    os << " [";
    int64_t printed = 0, row = 0;
    detail::for_each_strided<1>(t.shape(), {&st}, {t.offset()},
                                [&](int64_t cnt, std::array<int64_t, 1> o, std::array<int64_t, 1> s) {
                                    if (row++ >= 6) return;
                                    os << (printed ? "; " : "");
                                    for (int64_t i = 0; i < std::min<int64_t>(cnt, 6); ++i) {
                                        os << (i ? ", " : "");
                                        print(o[0] + i * s[0]);
                                    }
                                    if (cnt > 6) os << ", ...";
                                    printed += cnt;
                                });
    if (n > printed) os << "; ...";
    return os << "])";
}

}  // namespace qkv
