// Fast softmax dispatch: the per-ISA bodies (softmax_simd.h), else the reference kernels.
#include "kernels/cpu/softmax.h"

#include "kernels/cpu/variants.h"
#include "kernels/ref/softmax.h"

namespace qkv::kernels::cpu {

void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    QKV_ISA_DISPATCH(simd::softmax_forward, ref::softmax_forward<float>(y, x, rows, cols), y, x,
                     rows, cols);
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    QKV_ISA_DISPATCH(simd::softmax_backward, ref::softmax_backward<float>(dx, dy, y, rows, cols),
                     dx, dy, y, rows, cols);
}

void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    QKV_ISA_DISPATCH(simd::log_softmax_forward, ref::log_softmax_forward<float>(y, x, rows, cols),
                     y, x, rows, cols);
}

void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    QKV_ISA_DISPATCH(simd::log_softmax_backward,
                     ref::log_softmax_backward<float>(dx, dy, y, rows, cols), dx, dy, y, rows, cols);
}

}  // namespace qkv::kernels::cpu
