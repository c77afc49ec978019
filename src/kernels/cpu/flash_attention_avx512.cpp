// AVX-512 build of the flash attention kernels (flash_attention_impl.h): the avx512 row of the
// entry table (flash_kernels.h; the avx512_bf16 and amx tiers run its fp32 kernels too), called
// only when the capped CPU allows it.
// GCC 12 reports its own AVX-512 intrinsics' undefined-vector starts as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QKV_FLASH_NS flash_avx512
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::avx512>() {
    using namespace flash_avx512;
    FlashKernels k;
    k.forward  = [](const AttentionParams<float>& p) { forward<SimdAvx512>(p); };
    k.backward = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        if (p.Tq <= SimdAvx512ShortQ::kBwdBlockQ) return backward<SimdAvx512ShortQ>(p, g);
        backward<SimdAvx512>(p, g);
    };
    k.tile_gemm = [](const TileGemmParams& t) {
        gemm<SimdAvx512, kStore, false, false>(t.M, t.N, t.K, t.A, t.lda, t.B, t.ldb, t.C, t.ldc);
    };
    return k;
}

}  // namespace qkv::kernels::cpu::detail
