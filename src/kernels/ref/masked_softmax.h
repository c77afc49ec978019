#pragma once
// Reference masked softmax kernels (float/double), also used as the fast path: the op is
// memory-bound and only runs on (B·H·Tq, Tk) score matrices of the math attention path.
#include <cstdint>

namespace qkv::kernels::ref {

/// Row r keeps its first min(lens[r], cols) entries (all when lens is null) and entries that
/// are not -inf; y = softmax over kept entries, 0 elsewhere; a row with nothing kept is all 0.
/// A NaN among the kept entries makes the row NaN (like softmax), never 0.
template <class T>
void masked_softmax_forward(const T* x, T* y, const int64_t* lens, int64_t rows, int64_t cols);

/// dx = y ∘ (dy − rowsum(dy ∘ y)); masked entries have y = 0 so their gradient is 0.
template <class T>
void masked_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols);

}  // namespace qkv::kernels::ref
