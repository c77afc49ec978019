// Reference softmax / log_softmax (see ref/softmax.h): scalar, two passes, max subtraction.
#include "kernels/ref/softmax.h"

#include <cmath>

namespace qkv::kernels::ref {

template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
    if (cols == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        softmax_row(y + r * cols, xr, cols, softmax_row_max(xr, cols));
    }
}

// Forward y_j = e_j / S. dx_i = Σ_j dy_j ∂y_j/∂x_i = Σ_j dy_j y_j (δ_ij − y_i)
//                             = y_i (dy_i − Σ_j dy_j y_j).
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) softmax_backward_row(dx + r * cols, dy + r * cols, y + r * cols, cols);
}

template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
    if (cols == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr       = y + r * cols;
        const T m   = softmax_row_max(xr, cols);
        T sum       = 0;
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(xr[j] - m);
        const T shift = m + std::log(sum);
        for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] - shift;
    }
}

// Forward y_j = x_j − log S, ∂y_j/∂x_i = δ_ij − softmax_i. dx_i = dy_i − softmax_i Σ_j dy_j,
// and softmax_i = exp(y_i).
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* dyr = dy + r * cols;
        const T* yr  = y + r * cols;
        T* dxr       = dx + r * cols;
        T sum        = 0;
        for (int64_t j = 0; j < cols; ++j) sum += dyr[j];
        for (int64_t j = 0; j < cols; ++j) dxr[j] = dyr[j] - std::exp(yr[j]) * sum;
    }
}

#define QKV_INSTANTIATE(T)                                                       \
    template void softmax_forward<T>(T*, const T*, int64_t, int64_t);            \
    template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
    template void log_softmax_forward<T>(T*, const T*, int64_t, int64_t);        \
    template void log_softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv::kernels::ref
