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

/// Multi-layer, optionally bidirectional GRU (torch.nn.GRU(input_size, hidden_size, num_layers,
/// dropout, bidirectional); PyTorch's torch/nn/modules/rnn.py and its RNN docs). Layer l,
/// direction d (D = 2 directions when bidirectional, else 1):
///   r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz),
///   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h,
/// where x is the input (l = 0) or layer l−1's output sequence (D·H wide: [forward | reverse])
/// after dropout(p) in training mode (never after the last layer). The forward direction runs
/// t = 0 … T−1, the reverse one t = T−1 … 0 over the whole sequence (as nn.GRU on a padded,
/// unpacked tensor: pads included). Parameters (registered in this order, per layer l, the
/// forward direction's four, then, when bidirectional, the same with the suffix "_reverse"):
///   weight_ih_l{l} (3H, I or D·H), weight_hh_l{l} (3H, H), bias_ih_l{l} (3H), bias_hh_l{l} (3H),
/// each [r; z; n] stacked along dim 0, all initialised U(±1/√H) from the default generator in
/// that order. The input projections of a whole sequence are one GEMM per layer and direction;
/// the recurrence follows `impl`. f32 or f64 (parameters converted by the caller).
/// Dim legend (here): D directions (1 or 2).
class GRU : public Module {
public:
    /// Throws qkv::Error when a size is not positive or dropout is outside [0, 1).
    GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, double dropout = 0.0,
        bool bidirectional = false);

    /// X (T, B, I), h0 (D·L, B, H) or undefined (zeros) -> (output (T, B, D·H) = the last layer's
    /// states, [forward | reverse] along the features, state (D·L, B, H) = every layer's and
    /// direction's final state, ordered layer 0 forward, layer 0 reverse, layer 1 forward, ...;
    /// the reverse direction's final state is its state after t = 0). h0 is ordered the same way.
    /// T may be 0 (output (0, B, D·H), state h0). Throws qkv::Error naming the shapes when X or
    /// h0 do not fit.
    std::pair<Tensor, Tensor> forward(const Tensor& X, const Tensor& h0 = Tensor()) const;

    /// forward() given layer 0's input projection gi0 (T, B, D·3H) = [X·W_ih_l0ᵀ + b_ih_l0 |
    /// X·W_ih_l0_reverseᵀ + b_ih_l0_reverse] instead of X (callers that can compute it more
    /// cheaply, e.g. as a lookup into a projected embedding table, do so). Same results and
    /// errors as forward.
    std::pair<Tensor, Tensor> forward_projected(const Tensor& gi0, const Tensor& h0 = Tensor()) const;

    /// Layer l's input projection in direction d (0 forward, 1 reverse) x·W_ihᵀ + b_ih:
    /// x (..., I or D·H) -> (..., 3H). Throws qkv::Error when l or d is out of range.
    Tensor input_projection(int64_t layer, const Tensor& x, int64_t direction = 0) const;
    /// One step of layer l in direction d from its input projection gi (B, 3H) and state h
    /// (B, H) -> h' (B, H), computing h·W_hhᵀ + b_hh itself (`impl` composite: with elementwise
    /// ops, else gru_cell). Throws qkv::Error when l or d is out of range.
    Tensor cell(int64_t layer, const Tensor& gi, const Tensor& h, int64_t direction = 0) const;
    /// One time step through every layer (D2L's decoder calls nn.GRU on one step at a time):
    /// gi0 (B, 3H) is layer 0's input projection (callers that build the input from parts, such
    /// as the attention decoder, compute it themselves); h holds L states (B, H). Returns the L
    /// new states; the output is the last. Dropout between layers as in forward. Unidirectional
    /// only: a reverse direction needs the steps still to come, so a bidirectional GRU throws
    /// qkv::Error (as it does for a wrong number of states).
    std::vector<Tensor> step(const Tensor& gi0, const std::vector<Tensor>& h) const;

    /// Number of directions D: 2 when bidirectional, else 1.
    int64_t num_directions() const { return bidirectional ? 2 : 1; }

    /// One per layer and direction, in registration order: index l·D + d.
    std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;
    int64_t input_size, hidden_size, num_layers;
    double dropout;
    bool bidirectional;
    GRUImpl impl = GRUImpl::sequence;

private:
    /// Index l·D + d into the parameter vectors; throws qkv::Error naming l and d when out of range.
    size_t param_index(int64_t layer, int64_t direction) const;
    /// One layer and direction over a whole sequence: gi (T, B, 3H), h0 (B, H) or undefined ->
    /// outputs (T, B, H) in time order (the reverse direction runs t = T−1 … 0).
    Tensor run_direction(int64_t layer, int64_t direction, const Tensor& gi, const Tensor& h0) const;
    /// forward from layer 0's input projections, one (T, B, 3H) per direction (T >= 1).
    std::pair<Tensor, Tensor> run_layers(const std::vector<Tensor>& gi0, const Tensor& h0) const;
};

}  // namespace qkv::nn
