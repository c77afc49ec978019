#pragma once
// Basic layers with PyTorch's parameter names and default initialisation:
// Linear (weight, bias), Embedding (weight), LayerNorm (weight, bias), Dropout.
#include "qkv/nn/module.h"

namespace qkv::nn {

/// y = x·Wᵀ + b (torch.nn.Linear). x (..., in) -> (..., out). weight (out, in), bias (out).
/// Init: U(±1/√in) for both (PyTorch default; D2L EN keeps it).
class Linear : public Module {
public:
    Linear(int64_t in_features, int64_t out_features, bool bias = true);
    Tensor forward(const Tensor& x) const;
    Tensor weight, bias;  // bias undefined when bias == false
    int64_t in_features, out_features;
};

/// ids (...) int64 -> (..., C) (torch.nn.Embedding). weight (V, C), init N(0, 1).
class Embedding : public Module {
public:
    Embedding(int64_t num_embeddings, int64_t embedding_dim);
    Tensor forward(const Tensor& ids) const;
    Tensor weight;
};

/// Layer normalisation over the trailing normalized_shape (torch.nn.LayerNorm): weight = 1,
/// bias = 0, eps 1e-5, biased variance.
class LayerNorm : public Module {
public:
    explicit LayerNorm(Shape normalized_shape, double eps = 1e-5);
    Tensor forward(const Tensor& x) const;
    Tensor weight, bias;
    Shape normalized_shape;
    double eps;
};

/// Inverted dropout, active only in training mode (torch.nn.Dropout).
class Dropout : public Module {
public:
    explicit Dropout(double p);
    Tensor forward(const Tensor& x) const;
    double p;
};

}  // namespace qkv::nn
