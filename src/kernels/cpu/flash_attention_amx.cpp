// AMX build of the flash attention forward and backward (flash_amx_forward.h, flash_amx_backward.h
// on simd_amx.h's TilesHw): the amx row of the entry table (flash_kernels.h), called only where the
// tier is amx and amx_permitted(). Compiled with AVX-512-BF16 as well: a call whose K or V holds a
// non-finite bf16 value runs this build's vdpbf16ps forward and rounded fp32 backward.
#define QKV_FLASH_NS flash_amx
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::amx>() {
    FlashKernels k;
    k.forward_amx  = flash_amx::forward_amx_or_dot<flash_amx::TilesHw>;
    k.backward_amx = flash_amx::backward_amx_or_fp32<flash_amx::TilesHw>;
    return k;
}

}  // namespace qkv::kernels::cpu::detail
