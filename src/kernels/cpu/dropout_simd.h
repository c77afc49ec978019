#pragma once
// The dropout kernel's vector body, one source for every ISA tier (cpu/variants.inc instantiates
// it per tier): whole groups of 4·W elements, each from W Philox blocks (simd_philox.h) reordered
// into element order. The avx512 tier runs 64-element groups (16 blocks, V16), then 32-element
// groups (8 blocks, V8) for what is left; the avx2 tier only the latter. dropout.cpp runs the
// unaligned head and the tail with the scalar Philox of core/philox.h.
#include <cstdint>

#include "core/parallel_for.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_philox.h"

namespace qkv::kernels::cpu::simd {

namespace dropout_detail {
#if defined(__AVX2__)
template <class V>
struct PhiloxOf;
template <>
struct PhiloxOf<V8> {
    using type = P8;
};
#if defined(__AVX512F__)
template <>
struct PhiloxOf<V16> {
    using type = P16;
};
#endif

/// Groups [0, groups) of 4·V::W elements of a (element i of group g has Philox counter
/// 4·(a.block0 + g·W) + i): keep_i = uniform01(bits_i) >= p; y = keep ? x·scale : +0; mask = keep.
template <class V>
static void forward_groups(const detail::DropoutSpan& a, int64_t groups) {
    using P            = typename PhiloxOf<V>::type;
    using R            = typename V::R;
    constexpr int64_t W = V::W, G = 4 * V::W;
    const R vp = V::set1(a.p), vs = V::set1(a.scale);
    // Groups of 8 blocks (32 elements) at and above kDropoutMinParallelGroups use OpenMP.
    ::qkv::detail::parallel_for(groups, groups * W >= 8 * detail::kDropoutMinParallelGroups, [&](int64_t g) {
        typename P::I r[4];
        R             bits[4];
        typename V::M keep[4];
        philox_blocks<P>(a.block0 + uint64_t(g * W), a.seed, r);
        P::to_elements(r, bits);
        for (int j = 0; j < 4; ++j) {
            const int64_t e = g * G + j * W;
            keep[j]         = V::ge(P::uniform01(bits[j]), vp);
            V::store(a.y + e, V::maskz_mul(keep[j], V::load(a.x + e), vs));
        }
        if (a.mask) V::store_bytes01(a.mask + g * G, keep);
    });
}
#endif
}  // namespace dropout_detail

/// Dropout forward of a.n elements whose first counter 4·a.block0 is a multiple of 4, in whole
/// groups; returns how many elements it did (a multiple of 32; the caller does the rest).
template <Isa I>
int64_t dropout_forward_groups(const detail::DropoutSpan& a) {
    int64_t done = 0;
#if defined(__AVX512F__)
    if constexpr (I == Isa::avx512) {
        const int64_t groups = a.n / 64;
        dropout_detail::forward_groups<V16>(a, groups);
        done = groups * 64;
    }
#endif
#if defined(__AVX2__)
    if constexpr (I == Isa::avx2 || I == Isa::avx512) {
        const detail::DropoutSpan rest{a.x + done, a.y + done, a.mask ? a.mask + done : nullptr, a.n - done,
                                       a.p,        a.scale,    a.seed, a.block0 + uint64_t(done / 4)};
        const int64_t groups = rest.n / 32;
        dropout_detail::forward_groups<V8>(rest, groups);
        done += groups * 32;
    }
#endif
    return done;
}

/// The masked backward, dx[i] = mask[i] ? dy[i]·scale : +0, for i < 32·groups. 8 lanes on every
/// tier (the loop is bound by memory; the AVX-512 tier runs it too).
template <Isa I>
void dropout_backward_masked(float* dx, const float* dy, const uint8_t* mask, int64_t groups, float scale) {
#if defined(__AVX2__)
    if constexpr (I == Isa::avx2 || I == Isa::avx512) {
        using V    = V8;
        const auto vs = V::set1(scale);
        ::qkv::detail::parallel_for(groups, groups >= detail::kDropoutMinParallelGroups, [&](int64_t g) {
            for (int j = 0; j < 4; ++j) {
                const int64_t e = g * 32 + j * 8;
                V::store(dx + e, V::maskz_mul(V::bytes_nonzero(mask + e), V::load(dy + e), vs));
            }
        });
    }
#endif
}

}  // namespace qkv::kernels::cpu::simd
