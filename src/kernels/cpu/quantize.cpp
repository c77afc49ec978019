// Per-row int8 quantization (cpu/quantize.h): rows split over the OpenMP threads, each block
// through the ISA's variant (or the portable build of the same body).
#include "kernels/cpu/quantize.h"

#include <omp.h>

#include <algorithm>

#include "kernels/cpu/quantize_simd.h"
#include "kernels/cpu/variants.h"

namespace qkv::kernels::cpu {
namespace {
void rows_block(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols, float qmax) {
    QKV_ISA_DISPATCH(simd::quantize_rows_int8, simd::quantize_rows_int8<Isa::scalar>(q, scale, x, rows, cols, qmax), q,
                     scale, x, rows, cols, qmax);
}
}  // namespace

void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols, float qmax) {
    if (rows * cols <= (1 << 15)) return rows_block(q, scale, x, rows, cols, qmax);
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t per = (rows + nt - 1) / nt, r0 = std::min<int64_t>(rows, per * t),
                      r1 = std::min<int64_t>(rows, r0 + per);
        if (r1 > r0) rows_block(q + r0 * cols, scale + r0, x + r0 * cols, r1 - r0, cols, qmax);
    }
}

}  // namespace qkv::kernels::cpu
