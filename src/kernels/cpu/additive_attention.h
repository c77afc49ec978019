#pragma once
// Fast fp32 additive-attention scores: AVX-512 / AVX2 tanh (activation_simd.h) over the hidden
// width, OpenMP over the batch; dw is reduced from per-batch-row partials in a fixed order, so it
// does not depend on the thread count. Same semantics as ref/additive_attention.h.
#include <cstdint>

namespace qkv::kernels::cpu {

/// scores[b, i, j] = Σ_h w[h] · tanh(q[b, i, h] + k[b, j, h]); q (B, Tq, H), k (B, Tk, H), w (H).
void additive_scores_forward(float* scores, const float* q, const float* k, const float* w,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H);
/// ref::additive_scores_backward for fp32 (outputs nullable, overwritten).
void additive_scores_backward(float* dq, float* dk, float* dw, const float* dscores, const float* q,
                              const float* k, const float* w, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H);

}  // namespace qkv::kernels::cpu
