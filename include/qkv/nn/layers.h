#pragma once
// Basic layers with PyTorch's parameter names and default initialisation:
// Linear (weight, bias), Embedding (weight), LayerNorm (weight, bias), Dropout.
#include "qkv/nn/module.h"
#include "qkv/ops/quantize.h"

namespace qkv::nn {

/// y = x·Wᵀ + b (torch.nn.Linear). x (..., in) -> (..., out). weight (out, in), bias (out).
/// Init: U(±1/√in) for both (PyTorch default; D2L EN keeps it).
class Linear : public Module {
public:
    Linear(int64_t in_features, int64_t out_features, bool bias = true);
    /// linear(x, weight, bias); after quantize_int8(), linear_int8 (ops/quantize.h) on the
    /// quantized weight (inference only: throws when x requires grad under grad mode).
    Tensor forward(const Tensor& x) const;
    /// Quantizes `weight` as it is now (per output channel, ops/quantize.h) for inference; later
    /// changes to `weight` are not seen until quantize_int8() runs again or drop_int8() drops it.
    void quantize_int8();
    void drop_int8() { int8_.reset(); }
    bool is_int8() const { return int8_ != nullptr; }
    /// The quantized weight (nullptr before quantize_int8()).
    const Int8Weight* int8_weight() const { return int8_.get(); }
    Tensor weight, bias;  // bias undefined when bias == false
    int64_t in_features, out_features;

private:
    std::shared_ptr<const Int8Weight> int8_;
};

/// Quantizes every Linear in `m` (Linear::quantize_int8); returns how many.
int64_t quantize_linears_int8(Module& m);

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
