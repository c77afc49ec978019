#pragma once
// float <-> float16 conversion of arrays (cpu/fp16.h), one body for every ISA tier
// (cpu/variants.inc instantiates it per tier): the SIMD layer's F16C conversions (V8::load_fp16 /
// store_fp16 on AVX2 + F16C, V16's on AVX-512), whole vectors first, the tail through the scalar
// reference of core/fp16.h, which every vector lane matches bit for bit (tests/core/test_fp16.cpp).
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"
#include "qkv/core/fp16.h"

namespace qkv::kernels::cpu::simd {

/// dst[i] = fp16_bits(src[i]) for i < n, one thread.
template <Isa I>
void convert_to_fp16(uint16_t* dst, const float* src, int64_t n) {
    int64_t i = 0;
    if constexpr (I != Isa::scalar) {
        using V = Vec<I>;
        for (; i + V::W <= n; i += V::W) V::store_fp16(dst + i, V::load(src + i));
    }
    for (; i < n; ++i) dst[i] = fp16_bits(src[i]);
}

/// dst[i] = fp16_to_float(src[i]) for i < n, one thread.
template <Isa I>
void convert_from_fp16(float* dst, const uint16_t* src, int64_t n) {
    int64_t i = 0;
    if constexpr (I != Isa::scalar) {
        using V = Vec<I>;
        for (; i + V::W <= n; i += V::W) V::store(dst + i, V::load_fp16(src + i));
    }
    for (; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

}  // namespace qkv::kernels::cpu::simd
