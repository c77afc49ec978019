#pragma once
// Fast fp32 softmax / log_softmax over the last dim of a contiguous (rows, cols) array:
// AVX-512 or AVX2 with the polynomial exp of cpu/simd.h, OpenMP over rows; on CPUs without
// AVX2 the reference kernels run. Same semantics and signatures as kernels::ref (ref/softmax.h).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::cpu {

/// y = softmax(x) per row (max-subtracted). x, y: (rows, cols) fp32 contiguous; y may alias x.
/// A row of all −inf, or with a NaN, gives a NaN row (as PyTorch).
void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols);
/// dx = y ∘ (dy − rowsum(dy ∘ y)), y the forward output. dx may alias dy.
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols);
/// y = x − max − log Σ exp(x − max) per row. y may alias x.
void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols);
/// dx = dy − exp(y)·rowsum(dy), y the forward output. dx may alias dy.
void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols);

}  // namespace qkv::kernels::cpu
