#pragma once
// Reference embedding lookup (torch.nn.functional.embedding) and its backward, templated on
// float/double.
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::ref {

/// out[i, :] = weight[ids[i], :]. weight: (V, C), ids: (n) in [0, V) (checked by the op),
/// out: (n, C); all contiguous.
template <class T>
void embedding_forward(T* out, const T* weight, const int64_t* ids, int64_t n, int64_t C);

/// dweight = Σ_i onehot(ids[i]) ⊗ dout[i, :]: dweight (V, C) is overwritten (zeroed, then rows
/// accumulated in increasing i). dout: (n, C).
template <class T>
void embedding_backward(
    T* dweight, const T* dout, const int64_t* ids, int64_t n, int64_t V, int64_t C);

}  // namespace qkv::kernels::ref
