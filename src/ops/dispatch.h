#pragma once
// Private: dtype dispatch for ops. QKV_DISPATCH_FLOAT(dtype, "op", body) runs body with
// `scalar_t` = float or double, and throws naming the op for other dtypes.
#include "qkv/core/tensor.h"

#define QKV_DISPATCH_FLOAT(DT, OP, ...)                                                         \
    do {                                                                                        \
        switch (DT) {                                                                           \
            case ::qkv::DType::f32: { using scalar_t = float; __VA_ARGS__; break; }             \
            case ::qkv::DType::f64: { using scalar_t = double; __VA_ARGS__; break; }            \
            default:                                                                            \
                throw ::qkv::Error(::qkv::detail::str(OP, ": expected a float tensor, got ",    \
                                                      ::qkv::dtype_name(DT)));                  \
        }                                                                                       \
    } while (0)

#define QKV_DISPATCH_ALL(DT, OP, ...)                                                           \
    do {                                                                                        \
        switch (DT) {                                                                           \
            case ::qkv::DType::f32: { using scalar_t = float; __VA_ARGS__; break; }             \
            case ::qkv::DType::f64: { using scalar_t = double; __VA_ARGS__; break; }            \
            case ::qkv::DType::i64: { using scalar_t = int64_t; __VA_ARGS__; break; }           \
            case ::qkv::DType::b8: { using scalar_t = uint8_t; __VA_ARGS__; break; }            \
        }                                                                                       \
    } while (0)

namespace qkv::detail {
/// Pointer to element 0 of any dtype (bool as uint8_t).
template <class T>
inline T* ptr(const Tensor& t) {
    return static_cast<T*>(t.raw_data());
}
/// Work size above which element-wise loops use OpenMP threads.
constexpr int64_t kParallelGrain = 32768;
}  // namespace qkv::detail
