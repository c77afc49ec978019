#pragma once
// Fast fp32 GRU kernels: the cell's gates with AVX-512 / AVX2 exp (gru_simd.h), OpenMP over batch
// rows; the sequence recurrence with oneDNN GEMMs (cpu/gemm.h) and one GEMM for dW_hh over all
// steps. Same semantics as kernels::ref (ref/gru.h, derivations in ref/gru.cpp).
#include <cstdint>

namespace qkv::kernels::cpu {

/// ref::gru_cell_forward for fp32. h_new may alias h; ws (B, 4H) or nullptr.
void gru_cell_forward(float* h_new, float* ws, const float* gi, const float* gh, const float* h,
                      int64_t B, int64_t H);
/// ref::gru_cell_backward for fp32 (dh may be nullptr).
void gru_cell_backward(float* dgi, float* dgh, float* dh, const float* dh_new, const float* ws,
                       const float* h, int64_t B, int64_t H);
/// ref::gru_sequence_forward for fp32.
void gru_sequence_forward(float* out, float* ws, const float* gi, const float* h0,
                          const float* w_hh, const float* b_hh, int64_t Tn, int64_t B, int64_t H);
/// ref::gru_sequence_backward for fp32.
void gru_sequence_backward(float* dgi, float* dh0, float* dw_hh, float* db_hh, const float* dout,
                           const float* ws, const float* out, const float* h0, const float* w_hh,
                           int64_t Tn, int64_t B, int64_t H);

}  // namespace qkv::kernels::cpu
