#pragma once
// Element types of qkv tensors.
#include <cstdint>
#include <string>

namespace qkv {

/// f32: default for activations and parameters; f64: references and gradcheck;
/// i64: token ids, indices, valid_lens; b8: masks (one byte per element, 0 or 1).
enum class DType : uint8_t { f32, f64, i64, b8 };

/// Bytes per element.
inline int64_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f64: return 8;
        case DType::i64: return 8;
        case DType::b8: return 1;
    }
    return 0;
}
/// "float32", "float64", "int64", "bool" (PyTorch's names).
const char* dtype_name(DType t);
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

/// C++ type -> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };

}  // namespace qkv
