#pragma once
// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", eq. 34), differentiable.
//
// Legend: B batch, H heads, T positions (the second-to-last dimension), D features per head (even).
// Each pair of features (a, b) of the row at position p = position_offset + t is rotated by the
// angle p·θ_i, θ_i = base^(−2i/D), i = 0 … D/2 − 1:
//   y_a = x_a cos(p θ_i) − x_b sin(p θ_i),   y_b = x_b cos(p θ_i) + x_a sin(p θ_i).
// The pairing is the layout:
//   rotate_half (GPT-NeoX, LLaMA, Hugging Face's rotate_half): a = i, b = i + D/2;
//   interleaved (the paper, GPT-J, Mesh-TensorFlow):            a = 2i, b = 2i + 1.
// Applied to queries and keys (not values), q·k then depends on positions only through their
// difference (the relative-position property the tests check).
#include <cstdint>

#include "qkv/core/tensor.h"

namespace qkv {

enum class RopeLayout { rotate_half, interleaved };

struct RopeOptions {
    RopeLayout layout = RopeLayout::rotate_half;
    /// θ base; 10000 in the paper and most models.
    double base = 10000.0;
    /// Position of row t is position_offset + t: decoding with a KV cache passes the number of
    /// positions already cached.
    int64_t position_offset = 0;
};

/// RoPE of x, shape (…, T, D) — usually (B, H, T, D) queries or keys — same shape and dtype
/// (float32 or float64). The cos/sin tables are computed in float64 from the integer positions
/// and rounded once to x's dtype, so long positions lose no accuracy in the angle. Backward: the
/// transposed rotation (the same rotation by −p θ_i). Non-contiguous x is copied.
/// Throws qkv::Error naming the argument: x undefined, of rank < 2, not floating point, or with an
/// odd or zero last dimension; base <= 0 or not finite; position_offset < 0.
Tensor rotary_embedding(const Tensor& x, const RopeOptions& options = {});

}  // namespace qkv
