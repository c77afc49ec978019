#pragma once
// Reference layer normalisation over the last dim (Ba et al. 2016, "Layer Normalization"; D2L
// 11.7 AddNorm), forward and backward, templated on float/double.
// Kernels assume valid input (the op checks shapes and ranges); they throw only std::bad_alloc
// (scratch buffers).
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// Forward (LayerNormParams has the formula, with the fused residual); eps is rounded to T.
template <class T>
void layer_norm_forward(const LayerNormParams<T>& p);

/// Backward, with x̂ = (x − μ)·r and g = dy∘γ (derivation in the .cpp):
///   dx = r·(g − mean(g) − x̂·mean(g∘x̂)),  dγ = Σ_rows dy∘x̂,  dβ = Σ_rows dy.
template <class T>
void layer_norm_backward(const LayerNormParams<T>& p, const LayerNormGradParams<T>& g);

}  // namespace qkv::kernels::ref
