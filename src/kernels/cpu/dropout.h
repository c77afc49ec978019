#pragma once
// Inverted dropout (Srivastava et al. 2014) from Philox counters (core/philox.h): element i keeps
// iff uniform01(philox::bits(seed, 0, offset + i)) >= p, and kept elements are scaled by 1/(1−p).
// Each element's decision is a pure function of (seed, offset + i): results never depend on the
// thread count, and the backward can regenerate the mask instead of storing it.
// No reference twin: the Philox formula above is the reference (tests compute it directly).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::cpu {

/// y[i] = keep_i ? x[i]·(1/(1−p)) : 0 for i < n, p in [0, 1) (checked by the op; p = 0 copies
/// x exactly). mask_or_null: (n) bytes, 1 = kept, written when not null. y may alias x.
/// offset: the first Philox counter (Generator::reserve(n) hands it out).
void dropout_forward(const float* x, float* y, uint8_t* mask_or_null, int64_t n, float p, uint64_t seed,
                     uint64_t offset);

/// dx[i] = keep_i ? dy[i]·(1/(1−p)) : 0, keep_i read from mask_or_null, or regenerated from
/// (seed, offset) when it is null (same seed and offset as the forward). dx may alias dy.
void dropout_backward(const float* dy, float* dx, const uint8_t* mask_or_null, int64_t n, float p, uint64_t seed,
                      uint64_t offset);

namespace detail {
/// Groups of 32 elements (8 Philox blocks) at and above this count use OpenMP.
constexpr int64_t kDropoutMinParallelGroups = 256;

/// n elements of a dropout forward for the per-ISA body (cpu/dropout_simd.h): element i has
/// Philox counter 4·block0 + i; mask may be null; scale = 1/(1−p).
struct DropoutSpan {
    const float* x     = nullptr;
    float*       y     = nullptr;
    uint8_t*     mask  = nullptr;
    int64_t      n     = 0;
    float        p     = 0.f;
    float        scale = 1.f;
    uint64_t     seed = 0, block0 = 0;
};
}  // namespace detail

}  // namespace qkv::kernels::cpu
