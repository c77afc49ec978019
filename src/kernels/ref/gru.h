#pragma once
// Reference GRU kernels (Cho et al. 2014; PyTorch nn.GRU equations and gate order r, z, n),
// templated on float/double: the gate arithmetic of one step (the "cell"), and a whole layer's
// recurrence over T steps given the input projections. Derivations in ref/gru.cpp.
// Dim legend: T time steps, B batch, H hidden size; every array is row-major and contiguous.
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::ref {

/// One step's gates from the projections gi = x·W_ihᵀ + b_ih and gh = h·W_hhᵀ + b_hh, both
/// (B, 3H) laid out [r | z | n] per row, and the previous state h (B, H):
///   r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n), h' = (1 − z) ⊙ n + z ⊙ h.
/// h_new (B, H) may alias h. ws (B, 4H) = [r | z | n | gh_n] per row, saved for the backward, or
/// nullptr.
template <class T>
void gru_cell_forward(const GruCellParams<T>& p);

/// Backward of gru_cell_forward given dh_new (B, H), the saved ws and h: writes dgi, dgh (B, 3H)
/// and dh (B, H) (overwritten, not accumulated; dh may be nullptr). dgi and dgh agree except in
/// the n block, where dgh_n = dgi_n ⊙ r.
template <class T>
void gru_cell_backward(const GruCellGradParams<T>& g);

/// A layer's recurrence: for t = 0..T-1, gh = h·W_hhᵀ + b_hh, h = cell(gi[t], gh, h), out[t] = h.
/// gi (T, B, 3H) holds every step's input projection (one GEMM outside); h0 (B, H) or nullptr
/// (zeros); w_hh (3H, H); b_hh (3H) or nullptr. out (T, B, H); ws (T, B, 4H) as in
/// gru_cell_forward per step, or nullptr.
template <class T>
void gru_sequence_forward(const GruSequenceParams<T>& p);

/// Backpropagation through time for gru_sequence_forward given dout (T, B, H) (the gradient of
/// every output, the last one included): dgi (T, B, 3H); dh0 (B, H) or nullptr; dw_hh (3H, H)
/// and db_hh (3H) or nullptr. All outputs are overwritten. ws and out come from the forward;
/// h0 is the forward's (nullptr = zeros).
template <class T>
void gru_sequence_backward(const GruSequenceGradParams<T>& g);

}  // namespace qkv::kernels::ref
