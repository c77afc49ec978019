// Element-wise ops with broadcasting, their backward closures, and in-place helpers.
// Forward: contiguous same-shape (or scalar) operands take a flat loop (omp simd: relu's select
// was a mispredicted branch per element), others a strided loop.
#include "qkv/ops/elementwise.h"

#include <cmath>
#include <type_traits>

#include "core/strided.h"
#include "kernels/cpu/fp16.h"
#include "ops/dispatch.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/reduce.h"

namespace qkv {

using detail::ptr;

namespace {

/// out(T_out) = f(a, b) over the broadcast shape.
template <class T, class TO, class F>
Tensor binary_map(const Tensor& a, const Tensor& b, DType out_dtype, const char* op, F f) {
    const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
    Tensor out = Tensor::empty(shape, out_dtype);
    const T* pa = ptr<T>(a);
    const T* pb = ptr<T>(b);
    TO* po = ptr<TO>(out);
    const int64_t n = out.numel();
    if (a.shape() == shape && b.shape() == shape && a.is_contiguous() && b.is_contiguous()) {
#pragma omp parallel for simd if (parallel : n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
        return out;
    }
    if (a.shape() == shape && a.is_contiguous() && b.numel() == 1) {
        const T s = pb[0];
#pragma omp parallel for simd if (parallel : n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], s);
        return out;
    }
    const Shape sa = detail::broadcast_strides(a.shape(), a.strides(), shape);
    const Shape sb = detail::broadcast_strides(b.shape(), b.strides(), shape);
    const Shape so = out.strides();
    detail::for_each_strided<3>(shape, {&sa, &sb, &so}, {0, 0, 0}, [&](int64_t m, auto o, auto s) {
        for (int64_t i = 0; i < m; ++i) po[o[2] + i * s[2]] = f(pa[o[0] + i * s[0]], pb[o[1] + i * s[1]]);
    });
    return out;
}

template <class T, class F>
Tensor unary_map(const Tensor& a, F f) {
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    T* po = ptr<T>(out);
    const T* pa = ptr<T>(a);
    const int64_t n = out.numel();
    if (a.is_contiguous()) {
#pragma omp parallel for simd if (parallel : n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i]);
        return out;
    }
    const Shape so = out.strides();
    detail::for_each_strided<2>(a.shape(), {&a.strides(), &so}, {0, 0}, [&](int64_t m, auto o, auto s) {
        for (int64_t i = 0; i < m; ++i) po[o[1] + i * s[1]] = f(pa[o[0] + i * s[0]]);
    });
    return out;
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
    QKV_CHECK(a.defined() && b.defined(), op, ": undefined tensor argument");
    QKV_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ",
              a.shape(), " vs ", dtype_name(b.dtype()), " ", b.shape());
}

template <class F>
Tensor float_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
    check_same_dtype(a, b, op);
    Tensor out;
    QKV_DISPATCH_FLOAT(a.dtype(), op, out = binary_map<scalar_t, scalar_t>(a, b, a.dtype(), op, f));
    return out;
}

template <class F>
Tensor float_unary(const Tensor& a, const char* op, F f) {
    QKV_CHECK(a.defined(), op, ": undefined tensor argument");
    Tensor out;
    QKV_DISPATCH_FLOAT(a.dtype(), op, out = unary_map<scalar_t>(a, f));
    return out;
}

}  // namespace

// ---- binary ----
// add: d/da = g, d/db = g (each summed over its broadcast dims)
Tensor add(const Tensor& a, const Tensor& b) {
    Tensor out = float_binary(a, b, "add", [](auto x, auto y) { return x + y; });
    const Shape sa = a.shape(), sb = b.shape();
    record(out, "AddBackward", {a, b}, [sa, sb](const Tensor& g) {
        return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(g, sb)};
    });
    return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
    Tensor out = float_binary(a, b, "sub", [](auto x, auto y) { return x - y; });
    const Shape sa = a.shape(), sb = b.shape();
    record(out, "SubBackward", {a, b}, [sa, sb](const Tensor& g) {
        return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(neg(g), sb)};
    });
    return out;
}

// mul: d/da = g·b, d/db = g·a
Tensor mul(const Tensor& a, const Tensor& b) {
    Tensor out = float_binary(a, b, "mul", [](auto x, auto y) { return x * y; });
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    Tensor sa = gb ? a.detach() : Tensor(), sb = ga ? b.detach() : Tensor();
    const Shape sha = a.shape(), shb = b.shape();
    record(out, "MulBackward", {a, b}, [sa, sb, sha, shb](const Tensor& g) {
        return std::vector<Tensor>{sb.defined() ? sum_to_shape(mul(g, sb), sha) : Tensor(),
                                   sa.defined() ? sum_to_shape(mul(g, sa), shb) : Tensor()};
    });
    return out;
}

// div: d/da = g / b, d/db = -g·a / b²  = -g·out / b
Tensor div(const Tensor& a, const Tensor& b) {
    Tensor out = float_binary(a, b, "div", [](auto x, auto y) { return x / y; });
    Tensor sb = b.detach(), so = out.detach();
    const Shape sha = a.shape(), shb = b.shape();
    record(out, "DivBackward", {a, b}, [sb, so, sha, shb](const Tensor& g) {
        Tensor gb = neg(div(mul(g, so), sb));
        return std::vector<Tensor>{sum_to_shape(div(g, sb), sha), sum_to_shape(gb, shb)};
    });
    return out;
}

Tensor add(const Tensor& a, double s) {
    Tensor out = float_unary(a, "add", [s](auto x) { return x + decltype(x)(s); });
    record(out, "AddScalarBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
    return out;
}

Tensor mul(const Tensor& a, double s) {
    Tensor out = float_unary(a, "mul", [s](auto x) { return x * decltype(x)(s); });
    record(out, "MulScalarBackward", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
    return out;
}

Tensor neg(const Tensor& a) {
    Tensor out = float_unary(a, "neg", [](auto x) { return -x; });
    record(out, "NegBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
    return out;
}

// ---- unary ----
// exp: d = g·out
Tensor exp(const Tensor& a) {
    Tensor out = float_unary(a, "exp", [](auto x) { return std::exp(x); });
    Tensor so = out.detach();
    record(out, "ExpBackward", {a}, [so](const Tensor& g) { return std::vector<Tensor>{mul(g, so)}; });
    return out;
}

// log: d = g / a
Tensor log(const Tensor& a) {
    Tensor out = float_unary(a, "log", [](auto x) { return std::log(x); });
    Tensor sa = a.detach();
    record(out, "LogBackward", {a}, [sa](const Tensor& g) { return std::vector<Tensor>{div(g, sa)}; });
    return out;
}

// tanh: d = g·(1 - out²)
Tensor tanh(const Tensor& a) {
    Tensor out = float_unary(a, "tanh", [](auto x) { return std::tanh(x); });
    Tensor so = out.detach();
    record(out, "TanhBackward", {a}, [so](const Tensor& g) {
        Tensor d = float_binary(g, so, "tanh_backward", [](auto gg, auto y) { return gg * (1 - y * y); });
        return std::vector<Tensor>{d};
    });
    return out;
}

// sigmoid: d = g·out·(1 - out)
Tensor sigmoid(const Tensor& a) {
    Tensor out = float_unary(a, "sigmoid", [](auto x) {
        using T = decltype(x);
        return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
    });
    Tensor so = out.detach();
    record(out, "SigmoidBackward", {a}, [so](const Tensor& g) {
        Tensor d = float_binary(g, so, "sigmoid_backward", [](auto gg, auto y) { return gg * y * (1 - y); });
        return std::vector<Tensor>{d};
    });
    return out;
}

// relu: d = g·[a > 0]
Tensor relu(const Tensor& a) {
    Tensor out = float_unary(a, "relu", [](auto x) { return x > 0 ? x : decltype(x)(0); });
    Tensor so = out.detach();
    record(out, "ReluBackward", {a}, [so](const Tensor& g) {
        Tensor d = float_binary(g, so, "relu_backward", [](auto gg, auto y) { return y > 0 ? gg : decltype(gg)(0); });
        return std::vector<Tensor>{d};
    });
    return out;
}

// gelu(x) = x·Φ(x); d = g·(Φ(x) + x·φ(x))
Tensor gelu(const Tensor& a) {
    Tensor out = float_unary(a, "gelu", [](auto x) {
        using T = decltype(x);
        return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    });
    Tensor sa = a.detach();
    record(out, "GeluBackward", {a}, [sa](const Tensor& g) {
        Tensor d = float_binary(g, sa, "gelu_backward", [](auto gg, auto x) {
            using T = decltype(x);
            const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
            const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
            return gg * (cdf + x * pdf);
        });
        return std::vector<Tensor>{d};
    });
    return out;
}

// pow: d = g·p·a^(p-1)
Tensor pow(const Tensor& a, double p) {
    Tensor out = float_unary(a, "pow", [p](auto x) { return std::pow(x, decltype(x)(p)); });
    Tensor sa = a.detach();
    record(out, "PowBackward", {a}, [sa, p](const Tensor& g) {
        Tensor d = float_binary(g, sa, "pow_backward", [p](auto gg, auto x) {
            using T = decltype(x);
            return p == 0 ? T(0) : gg * T(p) * std::pow(x, T(p - 1));
        });
        return std::vector<Tensor>{d};
    });
    return out;
}

// sqrt: d = g / (2·out)
Tensor sqrt(const Tensor& a) {
    Tensor out = float_unary(a, "sqrt", [](auto x) { return std::sqrt(x); });
    Tensor so = out.detach();
    record(out, "SqrtBackward", {a}, [so](const Tensor& g) {
        Tensor d = float_binary(g, so, "sqrt_backward", [](auto gg, auto y) { return gg / (2 * y); });
        return std::vector<Tensor>{d};
    });
    return out;
}

// sin: d = g·cos(a); cos: d = -g·sin(a)
Tensor sin(const Tensor& a) {
    Tensor out = float_unary(a, "sin", [](auto x) { return std::sin(x); });
    Tensor sa = a.detach();
    record(out, "SinBackward", {a}, [sa](const Tensor& g) { return std::vector<Tensor>{mul(g, cos(sa))}; });
    return out;
}

Tensor cos(const Tensor& a) {
    Tensor out = float_unary(a, "cos", [](auto x) { return std::cos(x); });
    Tensor sa = a.detach();
    record(out, "CosBackward", {a}, [sa](const Tensor& g) { return std::vector<Tensor>{neg(mul(g, sin(sa)))}; });
    return out;
}

// ---- masks ----

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
    QKV_CHECK(mask.dtype() == DType::b8, "where: mask must be bool, got ", dtype_name(mask.dtype()));
    check_same_dtype(a, b, "where");
    const Shape shape = broadcast_shapes(broadcast_shapes(mask.shape(), a.shape(), "where"), b.shape(), "where");
    Tensor out = Tensor::empty(shape, a.dtype());
    const Shape sm = detail::broadcast_strides(mask.shape(), mask.strides(), shape);
    const Shape sa = detail::broadcast_strides(a.shape(), a.strides(), shape);
    const Shape sb = detail::broadcast_strides(b.shape(), b.strides(), shape);
    const Shape so = out.strides();
    const uint8_t* pm = ptr<uint8_t>(mask);
    QKV_DISPATCH_STORAGE(a.dtype(), "where", {
        const scalar_t* pa = ptr<scalar_t>(a);
        const scalar_t* pb = ptr<scalar_t>(b);
        scalar_t* po = ptr<scalar_t>(out);
        detail::for_each_strided<4>(shape, {&sm, &sa, &sb, &so}, {0, 0, 0, 0}, [&](int64_t m, auto o, auto s) {
            for (int64_t i = 0; i < m; ++i)
                po[o[3] + i * s[3]] = pm[o[0] + i * s[0]] ? pa[o[1] + i * s[1]] : pb[o[2] + i * s[2]];
        });
    });
    const Shape sha = a.shape(), shb = b.shape();
    Tensor mk = mask.detach();
    record(out, "WhereBackward", {a, b}, [mk, sha, shb](const Tensor& g) {
        Tensor z = zeros({}, g.dtype());
        return std::vector<Tensor>{sum_to_shape(where(mk, g, z), sha),
                                   sum_to_shape(where(mk, z, g), shb)};
    });
    return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
    QKV_CHECK(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got ", dtype_name(mask.dtype()));
    QKV_CHECK(broadcasts_to(mask.shape(), a.shape()),
              "masked_fill: mask of shape ", mask.shape(), " does not broadcast to ", a.shape());
    return where(mask, full({}, value, a.dtype()), a);
}

namespace {
template <class F>
Tensor compare(const Tensor& a, const Tensor& b, const char* op, F f) {
    check_same_dtype(a, b, op);
    Tensor out;
    QKV_DISPATCH_ALL(a.dtype(), op, out = binary_map<scalar_t, uint8_t>(a, b, DType::b8, op, f));
    return out;
}
}  // namespace

Tensor lt(const Tensor& a, const Tensor& b) {
    return compare(a, b, "lt", [](auto x, auto y) { return uint8_t(x < y); });
}
Tensor eq(const Tensor& a, const Tensor& b) {
    return compare(a, b, "eq", [](auto x, auto y) { return uint8_t(x == y); });
}
Tensor logical_not(const Tensor& mask) {
    QKV_CHECK(mask.dtype() == DType::b8, "logical_not: expected bool, got ", dtype_name(mask.dtype()));
    return unary_map<uint8_t>(mask, [](uint8_t x) { return uint8_t(!x); });
}

// ---- in-place (never recorded) ----

namespace {
/// One element of copy_ converted from S to D (bool as uint8_t). To b8: nonzero (PyTorch's rule;
/// a plain uint8_t cast made 0.5 false and 256 UB). To bf16 / f16: RNE, rounded once from f32, f64
/// or the integer (bf16_bits, fp16_bits, *_from_int); between bf16 and f16 through the exact float
/// (one rounding). From bf16 / f16: exact to f32/f64, to i64 through the exact float (truncates
/// toward zero, as PyTorch), to b8 nonzero (NaN true, -0 false). Otherwise a C++ conversion
/// (float -> i64 truncates toward zero).
template <class D, class S>
inline D convert_element(S s) {
    constexpr bool s_half = std::is_same_v<S, bfloat16> || std::is_same_v<S, float16>;
    if constexpr (std::is_same_v<S, D>) {
        return s;
    } else if constexpr (s_half) {
        if constexpr (std::is_same_v<D, uint8_t>) return uint8_t((s.bits & 0x7fffu) != 0);
        const float f = std::is_same_v<S, bfloat16> ? bf16_to_float(s.bits) : fp16_to_float(s.bits);
        if constexpr (std::is_same_v<D, bfloat16>) return bfloat16{bf16_bits(f)};
        else if constexpr (std::is_same_v<D, float16>) return float16{fp16_bits(f)};
        else return D(f);
    } else if constexpr (std::is_same_v<D, bfloat16>) {
        if constexpr (std::is_floating_point_v<S>) return bfloat16{bf16_bits(s)};
        else return bfloat16{bf16_bits_from_int(int64_t(s))};
    } else if constexpr (std::is_same_v<D, float16>) {
        if constexpr (std::is_floating_point_v<S>) return float16{fp16_bits(s)};
        else return float16{fp16_bits_from_int(int64_t(s))};
    } else if constexpr (std::is_same_v<D, uint8_t> && !std::is_same_v<S, uint8_t>) {
        return uint8_t(s != 0);
    } else {
        return D(s);
    }
}

template <class D, class S>
void copy_kernel(Tensor& dst, const Tensor& src, const Shape& ss) {
    D* pd = static_cast<D*>(dst.impl().storage->data);
    const S* ps = static_cast<const S*>(src.impl().storage->data);
    const int64_t n = dst.numel();
    if (dst.is_contiguous() && src.is_contiguous() && src.shape() == dst.shape()) {
        pd += dst.offset();
        ps += src.offset();
        // float32 <-> float16 on F16C vectors (the same bits as convert_element's fp16_bits).
        if constexpr (std::is_same_v<D, float16> && std::is_same_v<S, float>) {
            return kernels::cpu::convert_to_fp16(ps, reinterpret_cast<uint16_t*>(pd), n);
        } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float16>) {
            return kernels::cpu::convert_from_fp16(reinterpret_cast<const uint16_t*>(ps), pd, n);
        }
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) pd[i] = convert_element<D>(ps[i]);
        return;
    }
    const Shape& sd = dst.strides();
    auto row = [&](int64_t m, auto o, auto s) {
        if (s[0] == 1 && s[1] == 1) {  // a contiguous run on both sides (e.g. a head split's D)
            D* d = pd + o[0];
            const S* p = ps + o[1];
            for (int64_t i = 0; i < m; ++i) d[i] = convert_element<D>(p[i]);
        } else {
            for (int64_t i = 0; i < m; ++i) pd[o[0] + i * s[0]] = convert_element<D>(ps[o[1] + i * s[1]]);
        }
    };
    // Threads only into a contiguous destination: its rows are disjoint memory. A destination
    // view with overlapping elements (an expand) keeps the serial walk's last-write-wins order.
    if (dst.is_contiguous())
        detail::parallel_for_each_strided<2>(dst.shape(), {&sd, &ss}, {dst.offset(), src.offset()},
                                             detail::kParallelGrain, row);
    else
        detail::for_each_strided<2>(dst.shape(), {&sd, &ss}, {dst.offset(), src.offset()}, row);
}

template <class T>
void add_kernel(Tensor& a, const Tensor& b, double alpha) {
    T* pa = ptr<T>(a);
    const T al = T(alpha);
    const int64_t n = a.numel();
    const T* pb = ptr<T>(b);
    if (b.is_contiguous() && b.shape() == a.shape()) {
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) pa[i] += al * pb[i];
        return;
    }
    const Shape sb = detail::broadcast_strides(b.shape(), b.strides(), a.shape());
    const Shape& sa = a.strides();
    detail::for_each_strided<2>(a.shape(), {&sa, &sb}, {0, 0}, [&](int64_t m, auto o, auto s) {
        for (int64_t i = 0; i < m; ++i) pa[o[0] + i * s[0]] += al * pb[o[1] + i * s[1]];
    });
}
/// copy_ for a destination of type D: dispatches on the source's dtype (a function rather than a
/// nested QKV_DISPATCH_STORAGE, whose inner scalar_t would shadow the outer one).
template <class D>
void copy_to(Tensor& dst, const Tensor& src, const Shape& ss) {
    QKV_DISPATCH_STORAGE(src.dtype(), "copy_", (copy_kernel<D, scalar_t>(dst, src, ss)));
}
}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
    QKV_CHECK(broadcasts_to(src.shape(), dst.shape()), "copy_: source of shape ",
              src.shape(), " does not broadcast to ", dst.shape());
    const Shape ss = detail::broadcast_strides(src.shape(), src.strides(), dst.shape());
    QKV_DISPATCH_STORAGE(dst.dtype(), "copy_", (copy_to<scalar_t>(dst, src, ss)));
}

void fill_(Tensor& a, double value) { copy_(a, full({}, value, DType::f64)); }

void add_(Tensor& a, const Tensor& b, double alpha) {
    QKV_CHECK(a.is_contiguous(), "add_: destination must be contiguous");
    check_same_dtype(a, b, "add_");
    QKV_CHECK(broadcasts_to(b.shape(), a.shape()), "add_: shape ", b.shape(),
              " does not broadcast to ", a.shape());
    QKV_DISPATCH_FLOAT(a.dtype(), "add_", add_kernel<scalar_t>(a, b, alpha));
}

void mul_(Tensor& a, double s) {
    QKV_CHECK(a.is_contiguous(), "mul_: destination must be contiguous");
    QKV_DISPATCH_FLOAT(a.dtype(), "mul_", {
        scalar_t* pa = ptr<scalar_t>(a);
        const int64_t n = a.numel();
        for (int64_t i = 0; i < n; ++i) pa[i] *= scalar_t(s);
    });
}

}  // namespace qkv
