// Linear, Embedding, LayerNorm, Dropout modules (thin wrappers over ops).
#include "qkv/nn/layers.h"

#include "qkv/ops/dropout.h"
#include "qkv/ops/embedding.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/matmul.h"

namespace qkv::nn {

Linear::Linear(int64_t in, int64_t out, bool use_bias) : in_features(in), out_features(out) {
    QKV_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, ", ", out);
    weight = register_parameter("weight", uniform_init({out, in}, in));
    if (use_bias) bias = register_parameter("bias", uniform_init({out}, in));
}

Tensor Linear::forward(const Tensor& x) const { return int8_ ? linear_int8(x, *int8_, bias) : linear(x, weight, bias); }

void Linear::quantize_int8() { int8_ = std::make_shared<const Int8Weight>(qkv::quantize_int8(weight)); }

int64_t quantize_linears_int8(Module& m) {
    int64_t n = 0;
    m.for_each_module([&n](Module& x) {
        if (auto* l = dynamic_cast<Linear*>(&x)) l->quantize_int8(), ++n;
    });
    return n;
}

Embedding::Embedding(int64_t num, int64_t dim) {
    QKV_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, ", ", dim);
    weight = register_parameter("weight", normal_init({num, dim}));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(ids, weight); }

LayerNorm::LayerNorm(Shape shape, double e) : normalized_shape(std::move(shape)), eps(e) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias   = register_parameter("bias", zeros(normalized_shape));
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, normalized_shape, weight, bias, eps); }

Dropout::Dropout(double prob) : p(prob) {
    QKV_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, is_training()); }

}  // namespace qkv::nn
