#pragma once
// Fast fp32 GRU kernels: the cell's gates with AVX-512 / AVX2 exp (gru_simd.h), OpenMP over batch
// rows; the sequence recurrence with oneDNN GEMMs (cpu/gemm.h) and one GEMM for dW_hh over all
// steps. Same semantics as kernels::ref (ref/gru.h, derivations in ref/gru.cpp).
#include <cstdint>

#include "kernels/params.h"

namespace qkv::kernels::cpu {

/// ref::gru_cell_forward for fp32. p.h_new may alias p.h; p.ws may be null.
void gru_cell_forward(const GruCellParams<float>& p);
/// ref::gru_cell_backward for fp32 (g.dh may be null).
void gru_cell_backward(const GruCellGradParams<float>& g);
/// ref::gru_sequence_forward for fp32.
void gru_sequence_forward(const GruSequenceParams<float>& p);
/// ref::gru_sequence_backward for fp32.
void gru_sequence_backward(const GruSequenceGradParams<float>& g);

}  // namespace qkv::kernels::cpu
