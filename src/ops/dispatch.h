#pragma once
// Private: dtype dispatch for ops. Each macro runs `body` with `scalar_t` set to the C++ type of
// the dtype, and throws qkv::Error naming the op for the dtypes it does not take:
//   QKV_DISPATCH_FLOAT   f32, f64 (computing ops)
//   QKV_DISPATCH_ALL     f32, f64, i64, b8 (uint8_t) (comparisons, argmax)
//   QKV_DISPATCH_STORAGE f32, f64, i64, b8 (uint8_t), bf16 (qkv::bfloat16), f16 (qkv::float16):
//                        ops that only move elements (copy_, where, gather); the body must not
//                        compute on scalar_t.
// bf16 and f16 are storage only: FLOAT and ALL throw "op: bfloat16 (float16) tensors are storage
// only ...". The
// switches list every dtype and have no default where they can, so -Wswitch flags a new one.
#include <string>

#include "qkv/core/tensor.h"

namespace qkv::detail {
/// Throws "<op>: <bfloat16|float16> tensors are storage only (...); convert to float32 first (...)".
[[noreturn]] inline void throw_storage_only(const std::string& op, DType dt) {
    throw Error(str(op, ": ", dtype_name(dt), " tensors are storage only (views, copies, conversions, "
                        "printing, safetensors); convert to float32 first (C++: .to(DType::f32), "
                        "Python: .to(\"float32\"))"));
}
}  // namespace qkv::detail

// One `case` per dtype running the body with scalar_t set: the float pair and the non-float pair,
// shared by the three switches below.
#define QKV_DISPATCH_CASES_FLOAT_(...)                                                          \
    case ::qkv::DType::f32: { using scalar_t = float; __VA_ARGS__; break; }                     \
    case ::qkv::DType::f64: { using scalar_t = double; __VA_ARGS__; break; }
#define QKV_DISPATCH_CASES_INT_(...)                                                            \
    case ::qkv::DType::i64: { using scalar_t = int64_t; __VA_ARGS__; break; }                   \
    case ::qkv::DType::b8: { using scalar_t = uint8_t; __VA_ARGS__; break; }

#define QKV_DISPATCH_FLOAT(DT, OP, ...)                                                         \
    do {                                                                                        \
        switch (DT) {                                                                           \
            QKV_DISPATCH_CASES_FLOAT_(__VA_ARGS__)                                              \
            case ::qkv::DType::bf16:                                                            \
            case ::qkv::DType::f16: ::qkv::detail::throw_storage_only(OP, DT);                  \
            default:                                                                            \
                throw ::qkv::Error(::qkv::detail::str(OP, ": expected a float tensor, got ",    \
                                                      ::qkv::dtype_name(DT)));                  \
        }                                                                                       \
    } while (0)

// ALL and STORAGE: every dtype, bf16 and f16 through HALF(DT, OP, body): a throw, or a body on
// bfloat16 / float16.
#define QKV_DISPATCH_EVERY_(DT, OP, HALF, ...)                                                  \
    do {                                                                                        \
        switch (DT) {                                                                           \
            QKV_DISPATCH_CASES_FLOAT_(__VA_ARGS__)                                              \
            QKV_DISPATCH_CASES_INT_(__VA_ARGS__)                                                \
            HALF(DT, OP, __VA_ARGS__)                                                           \
        }                                                                                       \
        (void)(OP);                                                                             \
    } while (0)
#define QKV_DISPATCH_HALF_THROW_(DT, OP, ...) \
    case ::qkv::DType::bf16:                  \
    case ::qkv::DType::f16: ::qkv::detail::throw_storage_only(OP, DT);
#define QKV_DISPATCH_HALF_STORAGE_(DT, OP, ...)                                                 \
    case ::qkv::DType::bf16: { using scalar_t = ::qkv::bfloat16; __VA_ARGS__; break; }          \
    case ::qkv::DType::f16: { using scalar_t = ::qkv::float16; __VA_ARGS__; break; }

#define QKV_DISPATCH_ALL(DT, OP, ...) QKV_DISPATCH_EVERY_(DT, OP, QKV_DISPATCH_HALF_THROW_, __VA_ARGS__)
#define QKV_DISPATCH_STORAGE(DT, OP, ...) QKV_DISPATCH_EVERY_(DT, OP, QKV_DISPATCH_HALF_STORAGE_, __VA_ARGS__)

namespace qkv::detail {
/// Pointer to element 0 of any dtype (bool as uint8_t).
template <class T>
inline T* ptr(const Tensor& t) {
    return static_cast<T*>(t.raw_data());
}
/// Work size above which element-wise loops use OpenMP threads.
constexpr int64_t kParallelGrain = 32768;
}  // namespace qkv::detail
