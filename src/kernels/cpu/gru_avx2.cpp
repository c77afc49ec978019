// GRU cell kernels for avx2 (compiled with its ISA flags; called only after the run-time check).
#include "kernels/cpu/gru_simd.h"

namespace qkv::kernels::cpu::detail {

using V = simd::V8;

void gru_cell_forward_avx2(float* h_new, float* ws, const float* gi, const float* gh,
                           const float* h, int64_t B, int64_t H) {
    simd::gru_cell_forward_t<V>(h_new, ws, gi, gh, h, B, H);
}
void gru_cell_backward_avx2(float* dgi, float* dgh, float* dh, const float* dh_new,
                            const float* ws, const float* h, int64_t B, int64_t H) {
    simd::gru_cell_backward_t<V>(dgi, dgh, dh, dh_new, ws, h, B, H);
}

}  // namespace qkv::kernels::cpu::detail
