#pragma once
// Entry points of the AVX2 and AVX-512 dropout bodies (dropout_avx2.cpp, dropout_avx512.cpp),
// called by dropout.cpp.
#include <cstdint>

namespace qkv::kernels::cpu::detail {

/// Groups of 32 elements (8 Philox blocks) at and above this count use OpenMP.
constexpr int64_t kDropoutMinParallelGroups = 256;

/// Whole 32-element groups of a dropout forward: element i < 32·groups has Philox counter
/// 4·block0 + i; mask may be null.
struct DropoutGroups {
    const float* x      = nullptr;
    float*       y      = nullptr;
    uint8_t*     mask   = nullptr;
    int64_t      groups = 0;
    float        p = 0.f, scale = 1.f;
    uint64_t     seed = 0, block0 = 0;
};

/// keep_i = uniform01(bits_i) >= p; y[i] = keep_i ? x[i]·scale : 0; mask[i] = keep_i.
void dropout_apply_avx2(const DropoutGroups& a);

/// The same for groups of 64 elements (16 Philox blocks; element i < 64·groups has counter
/// 4·block0 + i), on AVX-512F/BW (dropout_avx512.cpp).
void dropout_apply_avx512(const DropoutGroups& a);

/// For i < 32·groups: dx[i] = mask[i] ? dy[i]·scale : +0 (the masked backward of dropout).
void dropout_backward_mask_avx2(
    const float* dy, float* dx, const uint8_t* mask, int64_t groups, float scale);

}  // namespace qkv::kernels::cpu::detail
