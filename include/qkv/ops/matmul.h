#pragma once
// Matrix products. fp32 goes to oneDNN's sgemm (chosen by measurement: bench/RESULTS.md);
// f64 uses the reference kernel (gradcheck).
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

/// a: (..., M, K), b: (..., K, N) -> (..., M, N). 2-D × 2-D is a plain GEMM; batch dims broadcast
/// (NumPy rules); a 1-D operand is treated as a row/column vector and that dim is dropped, as in
/// torch.matmul. Zero sizes as in torch.matmul: K == 0 gives zeros, a zero M, N or batch dim an
/// empty result. Throws naming both shapes when K differs.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x: (..., in), weight: (out, in), bias: (out) or undefined -> (..., out) = x·weightᵀ + bias
/// (torch.nn.functional.linear). One GEMM over all leading dims. Zero sizes as in PyTorch:
/// in == 0 gives the bias on every row (zeros without one), out == 0 or no rows an empty result;
/// the gradients keep the inputs' shapes.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

/// Greedy decoding's output layer: for each row of x, the index of the largest entry of
/// x·weightᵀ + bias, i.e. argmax(linear(x, weight, bias), -1), without materialising the logits.
/// x: (..., in) f32 or f64, weight: (out, in), bias: (out) or undefined, all of one dtype;
/// banned: empty, or `out` flags (non-zero = never chosen) -> i64 (...), values in [0, out).
/// Tie rule as argmax: the first maximum; a NaN logit counts as the largest (the first NaN wins).
/// A row whose every id is banned gets -1. No autograd history (argmax has no gradient).
/// f32 in KernelMode::fast: the output columns go through oneDNN's sgemm in blocks small enough
/// that each block's logits are still in L2 when the bias is added and the row maxima are taken,
/// blocks spread over the OpenMP threads (bench/RESULTS_anchor.md §5 has the decode timings);
/// otherwise the reference (linear, then a scan). Throws on shape/dtype mismatch, a banned list of
/// the wrong length, or out == 0.
Tensor linear_argmax(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                     const std::vector<char>& banned = {});

}  // namespace qkv
