#pragma once
// int8 linear layers for inference (`qkv translate/eval --compute-type int8`): weights quantized
// once per output channel, activations per row at run time (dynamic), symmetric, products in int32
// through oneDNN (kernels/cpu/gemm_int8.h: its s8 matmul on weights prepacked once, with
// AVX-512-VNNI / AMX-INT8; on CPUs without VNNI its u8s8s32 GEMM on 7-bit activations, since its
// int16 pair sums would saturate on 8-bit ones), dequantized to fp32 with both scales, then the
// fp32 bias. As CTranslate2's int8 compute type and PyTorch's dynamic
// quantization of nn.Linear. Source: Jacob et al., "Quantization and Training of Neural Networks
// for Efficient Integer-Arithmetic-Only Inference" (CVPR 2018), symmetric per-channel variant.
// Dim legend: N rows (leading dims of x flattened), K in_features, O out_features.
#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::kernels::cpu {
class Int8PackedWeight;
}

namespace qkv {

/// A weight (O, K) as int8 rows with one fp32 scale per row: W[o, k] ≈ scale[o] · q[o·K + k],
/// scale[o] = max_k |W[o, k]| / 127 (0 for an all-zero row, whose q is all 0), q = W·(1/scale)
/// in fp32 rounded to nearest, ties away from zero, in [-127, 127] (activations the same way).
struct Int8Weight {
    int64_t out_features = 0, in_features = 0;
    std::vector<int8_t> q;       // (O, K) row-major
    std::vector<float> scale;    // (O)
    /// The weight as linear_int8 multiplies it (a copy of q made by quantize_int8, and oneDNN's
    /// reordered copies of it, made on first use; shared by copies of this struct): changing q
    /// afterwards has no effect unless this is reset. A struct built by hand, without it, works but
    /// pays a copy and a reorder per call.
    std::shared_ptr<const kernels::cpu::Int8PackedWeight> packed;
};

/// Quantizes a float32 (O, K) weight. Throws qkv::Error for another dtype or rank, or a
/// non-finite value (naming its row and column).
Int8Weight quantize_int8(const Tensor& weight);

/// y = dequant(quant(x) · qᵀ) + bias, x float32 (..., K) -> (..., O) float32. Each row of x is
/// quantized with its own scale max|x_row| / A, A = 127 where oneDNN's int8 kernels use VNNI or
/// AMX-INT8, else 63 (kernels::cpu::int8_activation_max; an all-zero row gives zeros), rounded as
/// the weights are, to [-A, A]; the int8 products
/// accumulate exactly in int32 (|sum| <= K·127², so K up to 133,000 cannot overflow), then
/// y[n, o] = sum · sx[n] · scale[o] + bias[o] in fp32. No gradient: throws qkv::Error when grad mode
/// is on and x requires grad, for shapes that do not match (naming them), and for K > 133,000.
Tensor linear_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias);

/// argmax_allowed(linear_int8(x, w, bias), banned) without the (..., O) output: each row's first
/// maximum (argmax's rule, ops/reduce.h), banned indices skipped, -1 when all are banned;
/// (..., K) -> i64 (...). Greedy decoding's output layer under --compute-type int8. Throws as
/// linear_int8, and when banned is neither empty nor O flags.
Tensor linear_int8_argmax(const Tensor& x, const Int8Weight& w, const Tensor& bias, const std::vector<char>& banned);

}  // namespace qkv
