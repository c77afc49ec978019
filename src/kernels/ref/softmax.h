#pragma once
// Reference softmax / log_softmax over the last dim of a contiguous (rows, cols) array, forward
// and backward; templated on float/double (the spec for kernels::cpu, and gradcheck's path).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
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

}  // namespace qkv::kernels::ref
