// AVX-512 build of the flash attention kernels (flash_attention_impl.h); called only after
// __builtin_cpu_supports checks in flash_attention.cpp.
// GCC 12 reports its own _mm512_undefined_ps() inside avx512fintrin.h as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QKV_FLASH_NS flash_avx512
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

void flash_forward_avx512(const AttentionParams<float>& p) { flash_avx512::forward<flash_avx512::SimdAvx512>(p); }
void flash_backward_avx512(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    if (p.Tq <= flash_avx512::SimdAvx512ShortQ::kBwdBlockQ) return flash_avx512::backward<flash_avx512::SimdAvx512ShortQ>(p, g);
    flash_avx512::backward<flash_avx512::SimdAvx512>(p, g);
}

void flash_tile_gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                            const float* B, int64_t ldb, float* C, int64_t ldc) {
    flash_avx512::gemm<flash_avx512::SimdAvx512, flash_avx512::kStore, false, false>(
        M, N, K, A, lda, B, ldb, C, ldc);
}

}  // namespace qkv::kernels::cpu::detail
