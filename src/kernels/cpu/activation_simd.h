#pragma once
// SIMD σ and tanh over a vector type V (simd::V8 / simd::V16 of simd.h), for the ISA
// translation units of the GRU and additive-attention kernels:
//   σ(x) = 1 / (1 + e^−x),  tanh(x) = 1 − 2 / (1 + e^2x),
// with the polynomial exp. Both saturate correctly (e^x = +inf or 0 gives exactly 0, 1 or ±1,
// never NaN; NaN propagates) and are accurate to a few fp32 ulps of 1 in absolute terms (tanh
// near 0 is absolute-, not relative-accurate: |error| <= ~1.2e-7 there).
#include "kernels/cpu/simd.h"

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {
namespace {

template <class V>
inline typename V::R sigmoid(typename V::R x) {
    const auto one = V::set1(1.0f);
    return V::div(one, V::add(one, exp<V>(V::sub(V::zero(), x))));
}

template <class V>
inline typename V::R tanh(typename V::R x) {
    const auto one = V::set1(1.0f);
    return V::sub(one, V::div(V::set1(2.0f), V::add(one, exp<V>(V::add(x, x)))));
}

}  // namespace
}  // namespace qkv::kernels::cpu::simd
#endif
