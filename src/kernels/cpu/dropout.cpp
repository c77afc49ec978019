// Dropout kernels (see cpu/dropout.h). Elements whose counters fill whole groups of 16 (8) Philox
// blocks run through the AVX-512 (AVX2) body (dropout_avx512.cpp, dropout_avx2.cpp); the
// unaligned head, the tail, and CPUs without AVX2 use scalar Philox.
#include "core/parallel_for.h"
#include "kernels/cpu/dropout.h"

#include <algorithm>

#include "kernels/cpu/dropout_simd.h"
#include "kernels/cpu/isa.h"
#include "qkv/core/philox.h"

namespace qkv::kernels::cpu {
namespace {

// Scalar path for elements [i0, i1): one Philox call per block of 4 counters.
void apply_scalar(const float* x,
                  float* y,
                  uint8_t* mask,
                  int64_t i0,
                  int64_t i1,
                  float p,
                  float scale,
                  uint64_t seed,
                  uint64_t offset) {
    for (int64_t i = i0; i < i1;) {
        const uint64_t c      = offset + uint64_t(i);
        const uint64_t blk    = c >> 2;
        const philox::U32x4 r = philox::philox4x32(uint32_t(blk), uint32_t(blk >> 32), 0u, 0u,
                                                   uint32_t(seed), uint32_t(seed >> 32));
        for (uint64_t w = c & 3; w < 4 && i < i1; ++w, ++i) {
            const bool keep = philox::uniform01(r.v[w]) >= p;
            if (mask) mask[i] = uint8_t(keep);
            y[i] = keep ? x[i] * scale : 0.0f;
        }
    }
}

void apply(
    const float* x, float* y, uint8_t* mask, int64_t n, float p, uint64_t seed, uint64_t offset) {
    if (n <= 0) return;
    const float scale = 1.0f / (1.0f - p);
    if (simd_isa() == Isa::scalar) return apply_scalar(x, y, mask, 0, n, p, scale, seed, offset);
    // Head up to the first counter that is a multiple of 4, then whole 64-element groups
    // (AVX-512) and 32-element groups (AVX2), then the scalar tail.
    int64_t i = std::min<int64_t>(n, int64_t((4 - (offset & 3)) & 3));
    apply_scalar(x, y, mask, 0, i, p, scale, seed, offset);
    if (simd_isa() >= Isa::avx512) {
        const int64_t groups = (n - i) / 64;
        if (groups > 0)
            detail::dropout_apply_avx512({x + i, y + i, mask ? mask + i : nullptr, groups, p, scale, seed,
                                          (offset + uint64_t(i)) >> 2});
        i += groups * 64;
    }
    const int64_t groups = (n - i) / 32;
    if (groups > 0)
        detail::dropout_apply_avx2({x + i, y + i, mask ? mask + i : nullptr, groups, p, scale, seed,
                                    (offset + uint64_t(i)) >> 2});
    apply_scalar(x, y, mask, i + groups * 32, n, p, scale, seed, offset);
}

}  // namespace

void dropout_forward(const float* x,
                     float* y,
                     uint8_t* mask_or_null,
                     int64_t n,
                     float p,
                     uint64_t seed,
                     uint64_t offset) {
    apply(x, y, mask_or_null, n, p, seed, offset);
}

void dropout_backward(const float* dy,
                      float* dx,
                      const uint8_t* mask_or_null,
                      int64_t n,
                      float p,
                      uint64_t seed,
                      uint64_t offset) {
    if (!mask_or_null) return apply(dy, dx, nullptr, n, p, seed, offset);
    const float scale = 1.0f / (1.0f - p);
    // The AVX2 body takes whole 32-element groups: the scalar loop, compiled for the baseline
    // ISA, is a branch per element (a mispredict for most dropped ones); 1.0 % of an anchor
    // training step's samples before.
    const int64_t done =
        simd_isa() == Isa::scalar ? 0 : (n / 32) * 32;
    if (done > 0) detail::dropout_backward_mask_avx2(dy, dx, mask_or_null, done / 32, scale);
    ::qkv::detail::parallel_for(n - done, n - done >= 32 * detail::kDropoutMinParallelGroups, [&](int64_t j) {
        const int64_t i = done + j;
        dx[i] = mask_or_null[i] ? dy[i] * scale : 0.0f;
    });
}

}  // namespace qkv::kernels::cpu
