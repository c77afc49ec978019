// AVX2 + FMA build of the flash attention kernels (flash_attention_impl.h): the avx2 row of the
// entry table (flash_kernels.h), called only when the capped CPU allows it.
#define QKV_FLASH_NS flash_avx2
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::avx2>() {
    using namespace flash_avx2;
    FlashKernels k;
    k.forward   = [](const AttentionParams<float>& p) { forward<SimdAvx2>(p); };
    k.backward  = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) { backward<SimdAvx2>(p, g); };
    k.tile_gemm = [](const TileGemmParams& t) {
        gemm<SimdAvx2, kStore, false, false>(t.M, t.N, t.K, t.A, t.lda, t.B, t.ldb, t.C, t.ldc);
    };
    return k;
}

}  // namespace qkv::kernels::cpu::detail
