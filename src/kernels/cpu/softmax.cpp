// Fast softmax dispatch: AVX-512 or AVX2 bodies (softmax_simd.h), else the reference kernels.
#include "kernels/cpu/softmax.h"

#include "kernels/cpu/softmax_simd.h"
#include "kernels/ref/softmax.h"

namespace qkv::kernels::cpu {

void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::softmax_forward_avx512(y, x, rows, cols);
        case Isa::avx2:
            return detail::softmax_forward_avx2(y, x, rows, cols);
        case Isa::scalar:
            break;
    }
    ref::softmax_forward<float>(y, x, rows, cols);
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::softmax_backward_avx512(dx, dy, y, rows, cols);
        case Isa::avx2:
            return detail::softmax_backward_avx2(dx, dy, y, rows, cols);
        case Isa::scalar:
            break;
    }
    ref::softmax_backward<float>(dx, dy, y, rows, cols);
}

void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::log_softmax_forward_avx512(y, x, rows, cols);
        case Isa::avx2:
            return detail::log_softmax_forward_avx2(y, x, rows, cols);
        case Isa::scalar:
            break;
    }
    ref::log_softmax_forward<float>(y, x, rows, cols);
}

void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    switch (simd_isa()) {
        case Isa::avx512:
            return detail::log_softmax_backward_avx512(dx, dy, y, rows, cols);
        case Isa::avx2:
            return detail::log_softmax_backward_avx2(dx, dy, y, rows, cols);
        case Isa::scalar:
            break;
    }
    ref::log_softmax_backward<float>(dx, dy, y, rows, cols);
}

}  // namespace qkv::kernels::cpu
