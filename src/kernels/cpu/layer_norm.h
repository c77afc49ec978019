#pragma once
// Fast fp32 layer norm over the last dim: AVX-512 / AVX2 rows, OpenMP over rows; dγ and dβ are
// reduced from fixed row-block partials, so they are race-free and do not depend on the thread
// count. Same semantics as kernels::ref (ref/layer_norm.h); the derivation is in
// src/kernels/ref/layer_norm.cpp.
// Kernels assume valid input (the op checks shapes and ranges); they throw only std::bad_alloc
// (scratch buffers).
#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// ref::layer_norm_forward for fp32 (LayerNormParams has the formula, with the fused residual:
/// one pass per row writes x + residual and normalises it). y may alias x.
void layer_norm_forward(const LayerNormParams<float>& p);

/// ref::layer_norm_backward for fp32: dx = r·(g − mean(g) − x̂·mean(g∘x̂)) with g = dy∘γ;
/// dγ = Σ_rows dy∘x̂; dβ = Σ_rows dy. Outputs nullable, overwritten; dx may alias dy.
void layer_norm_backward(const LayerNormParams<float>& p, const LayerNormGradParams<float>& g);

}  // namespace qkv::kernels::cpu
