// Reference masked softmax: the row steps of ref/softmax.h on each row's kept entries, OpenMP over
// rows.
#include "kernels/ref/masked_softmax.h"

#include <algorithm>
#include <limits>

#include "kernels/ref/softmax.h"

namespace qkv::kernels::ref {

template <class T>
void masked_softmax_forward(const T* x, T* y, const int64_t* lens, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        const int64_t len = lens ? std::clamp<int64_t>(lens[r], 0, cols) : cols;
        // A NaN among the kept entries wins the max: an all-NaN row gives NaN, not the zeros of a
        // fully masked row.
        const T m = len > 0 ? softmax_row_max(xr, len) : -std::numeric_limits<T>::infinity();
        if (m == -std::numeric_limits<T>::infinity()) {
            std::fill(yr, yr + cols, T(0));
            continue;
        }
        softmax_row(yr, xr, len, m);
        std::fill(yr + len, yr + cols, T(0));
    }
}

template <class T>
void masked_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768) schedule(static)
    for (int64_t r = 0; r < rows; ++r) softmax_backward_row(dx + r * cols, dy + r * cols, y + r * cols, cols);
}

template decltype(masked_softmax_forward<float>) masked_softmax_forward<float>;
template decltype(masked_softmax_forward<double>) masked_softmax_forward<double>;
template decltype(masked_softmax_backward<float>) masked_softmax_backward<float>;
template decltype(masked_softmax_backward<double>) masked_softmax_backward<double>;

}  // namespace qkv::kernels::ref
