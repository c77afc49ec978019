// AMX build of the flash attention forward and backward (flash_amx_forward.h, flash_amx_backward.h
// on simd_amx.h's TilesHw): the amx row of the entry table (flash_kernels.h), called only where the
// tier is amx and amx_permitted(). Compiled with AVX-512-BF16 as well: a call whose K or V holds a
// non-finite bf16 value runs this build's vdpbf16ps forward and rounded fp32 backward.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QKV_FLASH_NS flash_amx
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::amx>() {
    using namespace flash_amx;
    FlashKernels k;
    k.forward_amx = [](const AttentionParams<float>& p) {
        QKV_ASSERT(p.bf16);
        if (!forward_amx<SimdAvx512Dot, TilesHw>(p)) forward<SimdAvx512Dot>(p);
    };
    k.backward_amx = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        QKV_ASSERT(p.bf16);
        // non-finite bf16 K or V: the rounded fp32 tiles, which never read hidden rows
        if (!backward_amx<SimdAvx512Dot, TilesHw>(p, g)) backward<SimdAvx512>(p, g);
    };
    return k;
}

}  // namespace qkv::kernels::cpu::detail
