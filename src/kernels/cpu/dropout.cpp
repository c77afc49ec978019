// Dropout kernels (see cpu/dropout.h). Elements whose counters fill whole groups of Philox blocks
// run through the ISA's vector body (cpu/dropout_simd.h, through QKV_ISA_DISPATCH); the unaligned
// head, the tail, and CPUs without AVX2 use the scalar Philox of core/philox.h.
#include "kernels/cpu/dropout.h"

#include <algorithm>

#include "core/parallel_for.h"
#include "kernels/cpu/variants.h"
#include "qkv/core/philox.h"

namespace qkv::kernels::cpu {
namespace {

// Scalar path for elements [i0, i1): one Philox call per block of 4 counters.
void apply_scalar(const float* x, float* y, uint8_t* mask, int64_t i0, int64_t i1, float p, float scale, uint64_t seed,
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

/// The vector body's share of a span (0 on the scalar tier).
int64_t forward_groups(const detail::DropoutSpan& a) {
    QKV_ISA_DISPATCH(simd::dropout_forward_groups, int64_t(0), a);
}

void backward_masked(float* dx, const float* dy, const uint8_t* mask, int64_t groups, float scale) {
    QKV_ISA_DISPATCH(simd::dropout_backward_masked, void(), dx, dy, mask, groups, scale);
}

}  // namespace

void dropout_forward(const float* x, float* y, uint8_t* mask_or_null, int64_t n, float p, uint64_t seed,
                     uint64_t offset) {
    if (n <= 0) return;
    const float scale = 1.0f / (1.0f - p);
    // Head up to the first counter that is a multiple of 4, then whole groups through the ISA's
    // body, then the scalar tail.
    const int64_t head = std::min<int64_t>(n, int64_t((4 - (offset & 3)) & 3));
    apply_scalar(x, y, mask_or_null, 0, head, p, scale, seed, offset);
    const int64_t done = forward_groups({x + head, y + head, mask_or_null ? mask_or_null + head : nullptr, n - head, p,
                                         scale, seed, (offset + uint64_t(head)) >> 2});
    apply_scalar(x, y, mask_or_null, head + done, n, p, scale, seed, offset);
}

void dropout_backward(const float* dy, float* dx, const uint8_t* mask_or_null, int64_t n, float p, uint64_t seed,
                      uint64_t offset) {
    if (!mask_or_null) return dropout_forward(dy, dx, nullptr, n, p, seed, offset);
    const float scale = 1.0f / (1.0f - p);
    // The vector body takes whole 32-element groups: the scalar loop, compiled for the baseline
    // ISA, is a branch per element (a mispredict for most dropped ones).
    const int64_t done = fp32_variant_isa() == Isa::scalar ? 0 : (n / 32) * 32;
    if (done > 0) backward_masked(dx, dy, mask_or_null, done / 32, scale);
    ::qkv::detail::parallel_for(n - done, n - done >= 32 * detail::kDropoutMinParallelGroups, [&](int64_t j) {
        const int64_t i = done + j;
        dx[i] = mask_or_null[i] ? dy[i] * scale : 0.0f;
    });
}

}  // namespace qkv::kernels::cpu
