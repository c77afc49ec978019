// Fast embedding kernels (see cpu/embedding.h): memcpy gathers, column-sliced scatter-add.
#include "kernels/cpu/embedding.h"

#include <omp.h>

#include <cstring>

namespace qkv::kernels::cpu {
namespace {

constexpr int64_t kMinParallel = 1 << 15;  // elements: below this one thread is faster
constexpr int64_t kColAlign    = 16;  // column slices start on 64-byte lines (no false sharing)

}  // namespace

void embedding_forward(float* out, const float* weight, const int64_t* ids, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static) if (n * C >= kMinParallel)
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(out + i * C, weight + ids[i] * C, sizeof(float) * static_cast<std::size_t>(C));
}

void embedding_backward(
    float* dweight, const float* dout, const int64_t* ids, int64_t n, int64_t V, int64_t C) {
    const bool par = (V + n) * C >= kMinParallel;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t v = 0; v < V; ++v)
        std::memset(dweight + v * C, 0, sizeof(float) * static_cast<std::size_t>(C));
#pragma omp parallel if (par)
    {
        // Thread k owns columns [c0, c1); every thread walks all ids in order.
        const int64_t nt    = omp_get_num_threads();
        const int64_t slice = ((C + nt - 1) / nt + kColAlign - 1) / kColAlign * kColAlign;
        const int64_t c0    = omp_get_thread_num() * slice;
        const int64_t c1    = c0 + slice < C ? c0 + slice : C;
        for (int64_t i = 0; i < n && c0 < c1; ++i) {
            float* dst       = dweight + ids[i] * C;
            const float* src = dout + i * C;
            for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
    }
}

}  // namespace qkv::kernels::cpu
