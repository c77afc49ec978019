#pragma once
// Reference softmax / log_softmax over the last dim of a contiguous (rows, cols) array, forward
// and backward; templated on float/double (the spec for kernels::cpu, and gradcheck's path).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cmath>
#include <cstdint>

namespace qkv::kernels::ref {

/// y = softmax(x) per row: y_j = exp(x_j − m) / Σ_k exp(x_k − m), m = max_k x_k (subtracting the
/// row max keeps exp from overflowing). x, y: (rows, cols) contiguous; y may alias x. A row of
/// all −inf gives NaN, as in PyTorch. cols == 0 writes nothing.
template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);

/// Backward of y = softmax(x): dx = y ∘ (dy − rowsum(dy ∘ y)).
/// y: the forward output; dx, dy, y: (rows, cols) contiguous; dx may alias dy.
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

/// y = log_softmax(x) per row: y_j = x_j − m − log Σ_k exp(x_k − m). y may alias x.
template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);

/// Backward of y = log_softmax(x): dx = dy − exp(y)·rowsum(dy) (exp(y) is the softmax).
/// dx may alias dy.
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

/// The row steps of softmax_forward / softmax_backward, which masked_softmax (ref/masked_softmax.h)
/// runs on its kept entries. softmax_row_max: max_j x[j] over n >= 1 entries with a NaN winning
/// (std::max would drop it, and a NaN row must give NaN).
template <class T>
inline T softmax_row_max(const T* x, int64_t n) {
    T m = x[0];
    for (int64_t j = 1; j < n; ++j) m = x[j] > m || std::isnan(x[j]) ? x[j] : m;
    return m;
}

/// y[j] = exp(x[j] − m) / Σ_k exp(x[k] − m) for j < n (m: the row max); y may alias x.
template <class T>
inline void softmax_row(T* y, const T* x, int64_t n, T m) {
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) {
        y[j] = std::exp(x[j] - m);
        sum += y[j];
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

/// dx[j] = y[j] (dy[j] − Σ_k dy[k] y[k]) for j < n; dx may alias dy.
template <class T>
inline void softmax_backward_row(T* dx, const T* dy, const T* y, int64_t n) {
    T dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
    for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace qkv::kernels::ref
