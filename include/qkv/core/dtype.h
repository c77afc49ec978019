#pragma once
// Element types of qkv tensors: the DType enum, sizes, names, and the C++ type of each.
// bf16 and f16 are storage dtypes only (core/bf16.h, core/fp16.h hold the conversions); ops
// compute in f32/f64.
#include <cstdint>
#include <string>

#include "qkv/core/bf16.h"
#include "qkv/core/fp16.h"

namespace qkv {

/// f32: default for activations and parameters; f64: references and gradcheck;
/// i64: token ids, indices, valid_lens; b8: masks (one byte per element, 0 or 1);
/// bf16: bfloat16 storage (2 bytes; weights kept or exchanged in bf16). bf16 tensors can be
/// viewed, copied, converted (.to), printed, saved and loaded; every other op throws qkv::Error
/// naming the op and asking for .to(DType::f32) first (PyTorch computes in bf16; qkv does not).
/// f16: IEEE float16 storage (2 bytes), storage only like bf16; scaled_dot_product_attention
/// takes it (ops/attention.h).
/// New values go last so the numbers of the others stay fixed.
enum class DType : uint8_t { f32, f64, i64, b8, bf16, f16 };

/// Bytes per element.
inline int64_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f64: return 8;
        case DType::i64: return 8;
        case DType::b8: return 1;
        case DType::bf16: return 2;
        case DType::f16: return 2;
    }
    return 0;
}
/// "float32", "float64", "int64", "bool", "bfloat16", "float16" (PyTorch's names).
const char* dtype_name(DType t);
/// The compute float dtypes, f32 and f64: the ones ops, gradients and optimizers accept.
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
/// Every dtype that stores floating-point numbers: f32, f64 and the storage-only bf16 and f16.
inline bool is_float_storage(DType t) { return is_floating(t) || t == DType::bf16 || t == DType::f16; }
/// The 16-bit storage-only float dtypes, bf16 and f16.
inline bool is_half_storage(DType t) { return t == DType::bf16 || t == DType::f16; }

/// C++ type -> DType (bf16 and f16 are the bit-pattern structs qkv::bfloat16 of core/bf16.h and
/// qkv::float16 of core/fp16.h).
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::f16; };

}  // namespace qkv
