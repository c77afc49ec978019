#pragma once
// Fused GRU ops (Cho et al. 2014 "Learning Phrase Representations using RNN Encoder–Decoder";
// PyTorch nn.GRU's equations and gate order r, z, n). The input projections are left to one GEMM
// outside (qkv::linear); these ops fuse what runs step by step. nn::GRU (nn/rnn.h) builds on them.
// Dim legend: T time steps, B batch, H hidden size. f32 (fast kernels) or f64 (reference).
#include "qkv/core/tensor.h"

namespace qkv {

/// One step's gate arithmetic from the two projections (one node, GruCellBackward):
///   gi = x·W_ihᵀ + b_ih (B, 3H), gh = h·W_hhᵀ + b_hh (B, 3H), both [r | z | n] along dim 1;
///   r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n),
///   h' = (1 − z) ⊙ n + z ⊙ h.
/// h (B, H) -> h' (B, H). Differentiable in gi, gh and h. Throws qkv::Error naming the shapes
/// when they do not fit or the dtypes differ or are not float.
Tensor gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h);

/// A whole layer's recurrence (one node, GruSequenceBackward, which runs backpropagation through
/// time with one GEMM for dW_hh over all steps): for t = 0..T−1,
///   h_t = gru_cell(gi[t], h_{t−1}·W_hhᵀ + b_hh, h_{t−1}),  h_{−1} = h0.
/// gi (T, B, 3H): every step's input projection; h0 (B, H) or undefined (zeros); w_hh (3H, H);
/// b_hh (3H) or undefined. Returns the outputs (T, B, H); h_{T−1} is the last row.
/// Differentiable in gi, h0, w_hh and b_hh. Throws qkv::Error naming the shapes when they do
/// not fit or the dtypes differ or are not float.
Tensor gru_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh);

}  // namespace qkv
