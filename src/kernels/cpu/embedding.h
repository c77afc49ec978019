#pragma once
// Fast fp32 embedding gather and deterministic scatter-add backward (OpenMP). Semantics as
// kernels::ref (ref/embedding.h); the results are bit-identical to ref<float> on any thread count.
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::cpu {

/// out[i, :] = weight[ids[i], :]; weight (V, C), ids (n) valid, out (n, C). Rows copied in
/// parallel.
void embedding_forward(float* out, const float* weight, const int64_t* ids, int64_t n, int64_t C);

/// dweight (V, C) = scatter-add of dout (n, C) rows at ids, overwritten. Race-free and
/// deterministic: each thread owns a slice of the C columns and adds the rows in increasing i,
/// the reference's order, so repeated ids sum identically on any thread count.
void embedding_backward(
    float* dweight, const float* dout, const int64_t* ids, int64_t n, int64_t V, int64_t C);

}  // namespace qkv::kernels::cpu
