#pragma once
// float <-> float16 array conversions on the capped tier's vectors (F16C vcvtps2ph / vcvtph2ps on
// the AVX2 and AVX-512 tiers, core/fp16.h's scalar reference otherwise). Every tier gives the bits
// of core/fp16.h: round to nearest even, overflow to ±inf at 65520, subnormals, NaN made quiet.
// Used by copy_ (Tensor::to) between float32 and float16 and so by float16 attention.
#include <cstdint>

namespace qkv::kernels::cpu {

/// dst[i] = fp16_bits(src[i]) for i < n; OpenMP threads above 64 Ki elements (blocks of 16 Ki).
void convert_to_fp16(const float* src, uint16_t* dst, int64_t n);
/// dst[i] = fp16_to_float(src[i]) for i < n (exact); threads as convert_to_fp16.
void convert_from_fp16(const uint16_t* src, float* dst, int64_t n);

}  // namespace qkv::kernels::cpu
