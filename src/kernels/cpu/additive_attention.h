#pragma once
// Fast fp32 additive-attention scores: AVX-512 / AVX2 tanh (activation_simd.h) over the hidden
// width, OpenMP over the batch; dw is reduced from per-batch-row partials in a fixed order, so it
// does not depend on the thread count. Same semantics as ref/additive_attention.h.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// scores[b, i, j] = Σ_h w[h] · tanh(q[b, i, h] + k[b, j, h]) (params.h: AdditiveScoresParams).
void additive_scores_forward(const AdditiveScoresParams<float>& p);
/// ref::additive_scores_backward for fp32 (outputs nullable, overwritten).
void additive_scores_backward(const AdditiveScoresParams<float>& p, const AdditiveScoresGradParams<float>& g);

}  // namespace qkv::kernels::cpu
