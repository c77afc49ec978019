#pragma once
// Softmax kernel bodies written once as templates over the ISA (vector type simd::Vec<I>),
// instantiated per ISA by variants.inc (declared in variants.h).
#include <cstdint>

#include "kernels/cpu/simd.h"

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {

/// Below this many elements the kernels stay on the calling thread: an OpenMP fork/join costs a
/// few µs, about the time one thread needs for ~10⁴ exps.
constexpr int64_t kSoftmaxMinParallel = 1 << 14;

/// softmax (Log = false) or log_softmax of each row: the max m and Σ exp(x − m) (softmax keeps
/// the exps in y), then y = exp(x − m) / Σ or x − m − log Σ.
template <Isa I, bool Log>
void softmax_rows_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    using V = Vec<I>;
#pragma omp parallel for schedule(static) if (rows * cols >= kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float*       yr = y + r * cols;
        const float  m  = row_max<V>(xr, cols);
        const float  s  = row_sum_exp<V, !Log>(Log ? nullptr : yr, xr, cols, m);
        if constexpr (Log) row_affine<V>(yr, xr, cols, 1.0f, -(m + __builtin_logf(s)));
        else row_affine<V>(yr, yr, cols, 1.0f / s, 0.0f);
    }
}

template <Isa I>
void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    softmax_rows_forward<I, false>(y, x, rows, cols);
}

/// The backward of softmax and log_softmax: per row a reduction s = reduce(dy row, y row), then
/// dx = grad(y, dy, s) lane-wise.
template <class V, class Reduce, class Grad>
void softmax_rows_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols, Reduce reduce,
                           Grad grad) {
#pragma omp parallel for schedule(static) if (rows * cols >= kSoftmaxMinParallel)
    for (int64_t r = 0; r < rows; ++r) {
        const float*        dyr = dy + r * cols;
        const float*        yr  = y + r * cols;
        const typename V::R s   = V::set1(reduce(dyr, yr, cols));
        row_map<V>(dx + r * cols, cols, [=](int64_t j, auto k) {
            return grad(load_n<V>(yr + j, k, 0.f), load_n<V>(dyr + j, k, 0.f), s);
        });
    }
}

// dx = y ∘ (dy − Σ dy∘y)
template <Isa I>
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    using V = Vec<I>;
    using R = typename V::R;
    softmax_rows_backward<V>(
        dx, dy, y, rows, cols, [](const float* dyr, const float* yr, int64_t n) { return row_dot<V>(dyr, yr, n); },
        [](R yv, R dyv, R dot) { return V::mul(yv, V::sub(dyv, dot)); });
}

template <Isa I>
void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    softmax_rows_forward<I, true>(y, x, rows, cols);
}

// dx = dy − exp(y)·Σ dy
template <Isa I>
void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    using V = Vec<I>;
    using R = typename V::R;
    softmax_rows_backward<V>(
        dx, dy, y, rows, cols, [](const float* dyr, const float*, int64_t n) { return row_sum<V>(dyr, n); },
        [](R yv, R dyv, R sum) { return V::fnmadd(exp<V>(yv), sum, dyv); });
}

}  // namespace qkv::kernels::cpu::simd
#endif
