// Reference masked softmax: two passes per row (max, then exp/sum), OpenMP over rows.
#include "kernels/ref/masked_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qkv::kernels::ref {

template <class T>
void masked_softmax_forward(const T* x, T* y, const int64_t* lens, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        const int64_t len = lens ? std::clamp<int64_t>(lens[r], 0, cols) : cols;
        T m = -std::numeric_limits<T>::infinity();
        // NaN wins the max (std::max would drop it): an all-NaN row gives NaN, not the zeros of a
        // fully masked row.
        for (int64_t j = 0; j < len; ++j) m = xr[j] > m || std::isnan(xr[j]) ? xr[j] : m;
        if (len == 0 || m == -std::numeric_limits<T>::infinity()) {
            std::fill(yr, yr + cols, T(0));
            continue;
        }
        T s = 0;
        for (int64_t j = 0; j < len; ++j) {
            yr[j] = std::exp(xr[j] - m);
            s += yr[j];
        }
        const T inv = T(1) / s;
        for (int64_t j = 0; j < len; ++j) yr[j] *= inv;
        std::fill(yr + len, yr + cols, T(0));
    }
}

template <class T>
void masked_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* yr = y + r * cols;
        const T* gr = dy + r * cols;
        T* dr = dx + r * cols;
        T dot = 0;
        for (int64_t j = 0; j < cols; ++j) dot += yr[j] * gr[j];
        for (int64_t j = 0; j < cols; ++j) dr[j] = yr[j] * (gr[j] - dot);
    }
}

template decltype(masked_softmax_forward<float>) masked_softmax_forward<float>;
template decltype(masked_softmax_forward<double>) masked_softmax_forward<double>;
template decltype(masked_softmax_backward<float>) masked_softmax_backward<float>;
template decltype(masked_softmax_backward<double>) masked_softmax_backward<double>;

}  // namespace qkv::kernels::ref
