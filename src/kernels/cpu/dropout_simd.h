#pragma once
// Entry point of the AVX2 dropout body (dropout_avx2.cpp), called by dropout.cpp.
#include <cstdint>

namespace qkv::kernels::cpu::detail {

/// Groups of 32 elements (8 Philox blocks) at and above this count use OpenMP.
constexpr int64_t kDropoutMinParallelGroups = 256;

/// For element i < 32·groups, with counter 4·block0 + i: keep = uniform01(bits) >= p,
/// y[i] = keep ? x[i]·scale : 0, mask[i] = keep (when mask is not null).
void dropout_apply_avx2(const float* x,
                        float* y,
                        uint8_t* mask,
                        int64_t groups,
                        float p,
                        float scale,
                        uint64_t seed,
                        uint64_t block0);

/// For i < 32·groups: dx[i] = mask[i] ? dy[i]·scale : +0 (the masked backward of dropout).
void dropout_backward_mask_avx2(
    const float* dy, float* dx, const uint8_t* mask, int64_t groups, float scale);

}  // namespace qkv::kernels::cpu::detail
