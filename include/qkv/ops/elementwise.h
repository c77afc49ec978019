#pragma once
// Element-wise ops with NumPy broadcasting; all differentiable for f32/f64.
// Binary ops require equal dtypes (no implicit promotion) and throw qkv::Error naming the op and
// both shapes when the shapes do not broadcast. bf16 and f16 are storage only: the arithmetic ops
// and the comparisons throw qkv::Error "<op>: bfloat16 (float16) tensors are storage only ...;
// convert with .to(DType::f32) first"; where, masked_fill, fill_ and copy_ (which only move or
// convert elements) accept them.
#include "qkv/core/tensor.h"

namespace qkv {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// a + s, a * s, ... with a scalar (keeps a's dtype).
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
/// Natural log; log(0) = -inf as in IEEE.
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
/// max(a, 0); gradient 0 at a == 0 (PyTorch's choice).
Tensor relu(const Tensor& a);
/// GELU with the exact erf form: x·Φ(x) (Hendrycks & Gimpel 2016), PyTorch's default.
Tensor gelu(const Tensor& a);
/// a^p for a scalar exponent p.
Tensor pow(const Tensor& a, double p);
Tensor sqrt(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
/// Where mask (b8, broadcast to a) is true, the result is `value` (in a's dtype: bf16 rounds it
/// once, RNE); gradient 0 there.
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
/// mask ? a : b (b8 mask; all three broadcast; a and b of one dtype, any, bf16 included).
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);

// comparisons (not differentiable): b8 results, broadcasting
Tensor lt(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& mask);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }

// in-place, never recorded (optimizers, under NoGradGuard): a must be contiguous.
/// a += alpha * b (b broadcast to a).
void add_(Tensor& a, const Tensor& b, double alpha = 1.0);
void mul_(Tensor& a, double s);
/// Sets every element of a to value (converted as copy_ converts an f64).
void fill_(Tensor& a, double value);
/// Copies src (broadcast) into dst's elements (any layout), converting between any two dtypes:
/// PyTorch's rules. To b8: nonzero (NaN true). Float -> i64 truncates toward zero (NaN, inf or
/// out of range: undefined, as in C++). To bf16: round to nearest even, once, from f32, f64 or
/// the integer (NaN stays NaN, finite values past 3.3895e38 become ±inf, -0 stays -0). From
/// bf16: exact to f32/f64. Other pairs as C++ converts (i64 -> f32 rounds to nearest).
void copy_(Tensor& dst, const Tensor& src);

}  // namespace qkv
