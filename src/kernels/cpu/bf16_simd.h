#pragma once
// float -> bf16 conversion of arrays (the operand copies of kernels/cpu/gemm_bf16.cpp), one body
// for every ISA tier (cpu/variants.inc instantiates it per tier). Every tier gives the bits of
// core/bf16.h's bf16_bits: round to nearest even on the bit pattern, NaN made quiet with its sign
// kept; explicit vectors of the SIMD layer (cpu/simd.h: bf16_bits_high), since the compiler keeps
// the NaN branch of the plain loop scalar.
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"
#include "qkv/core/bf16.h"

namespace qkv::kernels::cpu::simd {

/// dst[i] = bf16_bits(src[i]) for i < n when dst is non-null, else dst32[i] = round_to_bf16(src[i])
/// as floats (the fp32 GEMM on rounded copies).
template <Isa I>
void convert_bf16(uint16_t* dst, float* dst32, const float* src, int64_t n) {
    int64_t i = 0;
    if constexpr (I != Isa::scalar) {
        using V = Vec<I>;
        for (; i + V::W <= n; i += V::W) {
            const auto r = V::bf16_bits_high(V::load(src + i));
            if (dst) V::store_high16(dst + i, r);
            else V::store_high_bits(dst32 + i, r);
        }
    }
    for (; i < n; ++i) {
        if (dst) dst[i] = bf16_bits(src[i]);
        else dst32[i] = round_to_bf16(src[i]);
    }
}

}  // namespace qkv::kernels::cpu::simd
