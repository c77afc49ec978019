#pragma once
// Softmax kernel bodies written once as templates over the ISA (vector type simd::Vec<I>),
// instantiated per ISA by variants.inc (declared in variants.h).
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace qkv::kernels::cpu::detail {

/// Below this many elements the kernels stay on the calling thread: an OpenMP fork/join costs a
/// few µs, about the time one thread needs for ~10⁴ exps.
constexpr int64_t kSoftmaxMinParallel = 1 << 14;

}  // namespace qkv::kernels::cpu::detail

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {

template <Isa I>
void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    using V = Vec<I>;
#pragma omp parallel for schedule(static) if (rows * cols >= detail::kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr       = y + r * cols;
        const float m   = row_max<V>(xr, cols);
        const float s   = row_sum_exp<V, true>(yr, xr, cols, m);
        row_affine<V>(yr, yr, cols, 1.0f / s, 0.0f);
    }
}

// dx = y ∘ (dy − Σ dy∘y)
template <Isa I>
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    using V = Vec<I>;
    using R = typename V::R;
#pragma omp parallel for schedule(static) if (rows * cols >= detail::kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* dyr = dy + r * cols;
        const float* yr  = y + r * cols;
        float* dxr       = dx + r * cols;
        R d0 = V::zero(), d1 = V::zero();
        int64_t j = 0;
        for (; j + 2 * V::W <= cols; j += 2 * V::W) {
            d0 = V::fmadd(V::load(dyr + j), V::load(yr + j), d0);
            d1 = V::fmadd(V::load(dyr + j + V::W), V::load(yr + j + V::W), d1);
        }
        for (; j + V::W <= cols; j += V::W) d0 = V::fmadd(V::load(dyr + j), V::load(yr + j), d0);
        if (j < cols)
            d0 = V::fmadd(V::load_tail(dyr + j, cols - j, 0.f), V::load_tail(yr + j, cols - j, 0.f),
                          d0);
        const R dot = V::set1(V::reduce_add(V::add(d0, d1)));
        for (j = 0; j + V::W <= cols; j += V::W)
            V::store(dxr + j, V::mul(V::load(yr + j), V::sub(V::load(dyr + j), dot)));
        if (j < cols) {
            const R v = V::mul(V::load_tail(yr + j, cols - j, 0.f),
                               V::sub(V::load_tail(dyr + j, cols - j, 0.f), dot));
            V::store_tail(dxr + j, v, cols - j);
        }
    }
}


template <Isa I>
void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    using V = Vec<I>;
#pragma omp parallel for schedule(static) if (rows * cols >= detail::kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr   = x + r * cols;
        const float m     = row_max<V>(xr, cols);
        const float s     = row_sum_exp<V, false>(nullptr, xr, cols, m);
        const float shift = m + __builtin_logf(s);
        row_affine<V>(y + r * cols, xr, cols, 1.0f, -shift);
    }
}

// dx = dy − exp(y)·Σ dy
template <Isa I>
void log_softmax_backward(
    float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    using V = Vec<I>;
    using R = typename V::R;
#pragma omp parallel for schedule(static) if (rows * cols >= detail::kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* dyr = dy + r * cols;
        const float* yr  = y + r * cols;
        float* dxr       = dx + r * cols;
        R s0 = V::zero(), s1 = V::zero();
        int64_t j = 0;
        for (; j + 2 * V::W <= cols; j += 2 * V::W) {
            s0 = V::add(s0, V::load(dyr + j));
            s1 = V::add(s1, V::load(dyr + j + V::W));
        }
        for (; j + V::W <= cols; j += V::W) s0 = V::add(s0, V::load(dyr + j));
        if (j < cols) s0 = V::add(s0, V::load_tail(dyr + j, cols - j, 0.f));
        const R sum = V::set1(V::reduce_add(V::add(s0, s1)));
        for (j = 0; j + V::W <= cols; j += V::W)
            V::store(dxr + j, V::fnmadd(exp<V>(V::load(yr + j)), sum, V::load(dyr + j)));
        if (j < cols) {
            const R v = V::fnmadd(exp<V>(V::load_tail(yr + j, cols - j, 0.f)), sum,
                                  V::load_tail(dyr + j, cols - j, 0.f));
            V::store_tail(dxr + j, v, cols - j);
        }
    }
}

}  // namespace qkv::kernels::cpu::simd
#endif
