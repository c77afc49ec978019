// Reference embedding gather / scatter-add (see ref/embedding.h).
#include "kernels/ref/embedding.h"

namespace qkv::kernels::ref {

template <class T>
void embedding_forward(T* out, const T* weight, const int64_t* ids, int64_t n, int64_t C) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) out[i * C + c] = weight[ids[i] * C + c];
}

template <class T>
void embedding_backward(
    T* dweight, const T* dout, const int64_t* ids, int64_t n, int64_t V, int64_t C) {
    for (int64_t k = 0; k < V * C; ++k) dweight[k] = 0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) dweight[ids[i] * C + c] += dout[i * C + c];
}

template decltype(embedding_forward<float>) embedding_forward<float>;
template decltype(embedding_forward<double>) embedding_forward<double>;
template decltype(embedding_backward<float>) embedding_backward<float>;
template decltype(embedding_backward<double>) embedding_backward<double>;

}  // namespace qkv::kernels::ref
