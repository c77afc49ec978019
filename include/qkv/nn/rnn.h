#pragma once
// Gated recurrent unit layers (Cho et al. 2014; D2L 10.2 "Gated Recurrent Units") with PyTorch
// nn.GRU's equations, gate order (r, z, n), parameter names and initialisation, so state_dicts
// map one to one. Time-major, as nn.GRU with batch_first=False (D2L's RNN encoders).
// Dim legend: T time steps, B batch, I input size, H hidden size, L layers.
#include <cstdint>
#include <utility>
#include <vector>

#include "qkv/nn/module.h"

namespace qkv::nn {

/// How GRU runs its recurrence (all three compute the same function; see bench/RESULTS_gru.md
/// for the measurements behind the default).
enum class GRUImpl {
    sequence,   // one gru_sequence op per layer: BPTT in one node, one GEMM for dW_hh (default)
    cell,       // per step: linear for h·W_hhᵀ + b_hh, then the fused gru_cell op
    composite,  // per step: linear, then sigmoid/tanh/mul/add ops (the plain autograd reference)
};

/// Multi-layer GRU (torch.nn.GRU(input_size, hidden_size, num_layers, dropout)). Layer l:
///   r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz),
///   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h,
/// where x is the input (l = 0) or layer l−1's output sequence after dropout(p) in training
/// mode (never after the last layer). Parameters (registered in this order):
///   weight_ih_l{l} (3H, I or H), weight_hh_l{l} (3H, H), bias_ih_l{l} (3H), bias_hh_l{l} (3H),
/// each [r; z; n] stacked along dim 0, all initialised U(±1/√H) from the default generator.
/// The input projections of a whole sequence are one GEMM per layer; the recurrence follows
/// `impl`. f32 or f64 (parameters converted by the caller).
class GRU : public Module {
public:
    /// Throws qkv::Error when a size is not positive or dropout is outside [0, 1).
    GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, double dropout = 0.0);

    /// X (T, B, I), h0 (L, B, H) or undefined (zeros) -> (output (T, B, H) = the last layer's
    /// states, state (L, B, H) = every layer's final state). T may be 0 (output (0, B, H),
    /// state h0). Throws qkv::Error naming the shapes when X or h0 do not fit.
    std::pair<Tensor, Tensor> forward(const Tensor& X, const Tensor& h0 = Tensor()) const;

    /// forward() given layer 0's input projection gi0 = X·W_ih_l0ᵀ + b_ih_l0 (T, B, 3H) instead of
    /// X (callers that can compute it more cheaply, e.g. as a lookup into a projected embedding
    /// table, do so). Same results and errors as forward.
    std::pair<Tensor, Tensor> forward_projected(const Tensor& gi0, const Tensor& h0 = Tensor()) const;

    /// Layer l's input projection x·W_ihᵀ + b_ih: x (..., I or H) -> (..., 3H).
    Tensor input_projection(int64_t layer, const Tensor& x) const;
    /// One step of layer l from its input projection gi (B, 3H) and state h (B, H) -> h' (B, H),
    /// computing h·W_hhᵀ + b_hh itself (`impl` composite: with elementwise ops, else gru_cell).
    Tensor cell(int64_t layer, const Tensor& gi, const Tensor& h) const;
    /// One time step through every layer (D2L's decoder calls nn.GRU on one step at a time):
    /// gi0 (B, 3H) is layer 0's input projection (callers that build the input from parts, such
    /// as the attention decoder, compute it themselves); h holds L states (B, H). Returns the L
    /// new states; the output is the last. Dropout between layers as in forward.
    std::vector<Tensor> step(const Tensor& gi0, const std::vector<Tensor>& h) const;

    std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;  // one per layer
    int64_t input_size, hidden_size, num_layers;
    double dropout;
    GRUImpl impl = GRUImpl::sequence;
};

}  // namespace qkv::nn
