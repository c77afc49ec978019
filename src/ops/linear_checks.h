#pragma once
// Private: the argument checks that linear, linear_argmax (ops/matmul.cpp) and linear_cross_entropy
// share, for y = x·weightᵀ + bias with x (..., in), weight (out, in), bias (out).
#include "qkv/core/error.h"
#include "qkv/core/tensor.h"

namespace qkv::detail {

/// How an op's messages name its shapes: linear says "(out, in)", "input", "in_features ",
/// "out_features "; linear_cross_entropy "(V, C)", "x", "C = ", "V = ".
struct LinearArgNames {
    const char* weight_shape;
    const char* x;
    const char* in;
    const char* out;
};

/// Throws qkv::Error "<op>: ..." unless x and weight are defined, weight is 2-D with x's last dim as
/// its second, weight has an output row (when need_rows), bias is (out) or undefined, and all
/// have one dtype.
inline void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const LinearArgNames& n, bool need_rows) {
    QKV_CHECK(x.defined() && weight.defined(), op, ": undefined tensor argument");
    QKV_CHECK(weight.dim() == 2, op, ": weight must be ", n.weight_shape, ", got ", weight.shape());
    QKV_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], op, ": ", n.x, " of shape ", x.shape(),
              " does not match weight of shape ", weight.shape(), " (", n.in, weight.shape()[1], ")");
    const int64_t out = weight.shape()[0];
    QKV_CHECK(!need_rows || out > 0, op, ": weight has no output rows: ", weight.shape());
    QKV_CHECK(!bias.defined() || bias.shape() == Shape{out}, op, ": bias of shape ",
              bias.defined() ? bias.shape() : Shape{}, " does not match ", n.out, out);
    QKV_CHECK(x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), op,
              ": dtypes differ: x ", dtype_name(x.dtype()), ", weight ", dtype_name(weight.dtype()),
              bias.defined() ? ", bias " : "", bias.defined() ? dtype_name(bias.dtype()) : "");
}

/// linear's and linear_argmax's wording.
constexpr LinearArgNames kLinearNames{"(out, in)", "input", "in_features ", "out_features "};

}  // namespace qkv::detail
