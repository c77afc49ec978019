// Softmax kernels for avx512 (compiled with its ISA flags; called only after the run-time check).
#include "kernels/cpu/softmax_simd.h"

namespace qkv::kernels::cpu::detail {

using V = simd::V16;

void softmax_forward_avx512(float* y, const float* x, int64_t rows, int64_t cols) {
    simd::softmax_forward_t<V>(y, x, rows, cols);
}
void softmax_backward_avx512(
    float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    simd::softmax_backward_t<V>(dx, dy, y, rows, cols);
}
void log_softmax_forward_avx512(float* y, const float* x, int64_t rows, int64_t cols) {
    simd::log_softmax_forward_t<V>(y, x, rows, cols);
}
void log_softmax_backward_avx512(
    float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    simd::log_softmax_backward_t<V>(dx, dy, y, rows, cols);
}

}  // namespace qkv::kernels::cpu::detail
