// AVX2 + FMA build of the flash attention kernels (flash_attention_impl.h); called only after
// __builtin_cpu_supports checks in flash_attention.cpp.
#define QKV_FLASH_NS flash_avx2
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

void flash_forward_avx2(const AttentionParams<float>& p) { flash_avx2::forward<flash_avx2::SimdAvx2>(p); }
void flash_backward_avx2(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    flash_avx2::backward<flash_avx2::SimdAvx2>(p, g);
}

void flash_tile_gemm_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float* C, int64_t ldc) {
    flash_avx2::gemm<flash_avx2::SimdAvx2, flash_avx2::kStore, false, false>(M, N, K, A, lda, B, ldb, C,
                                                                       ldc);
}

}  // namespace qkv::kernels::cpu::detail
