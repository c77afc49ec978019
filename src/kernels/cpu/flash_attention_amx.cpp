// AMX build of the flash attention forward (flash_attention_impl.h: forward_amx with the AMX tiles
// of amx_tiles.h). Called only after the CPU checks in flash_attention.cpp (cpu/isa.h: amx tier,
// amx_permitted). Compiled with AVX-512-BF16 as well: inputs with a non-finite bf16 value in K or
// V take this build's vdpbf16ps forward.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QKV_FLASH_NS flash_amx
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

void flash_forward_amx(const AttentionParams<float>& p) {
    QKV_ASSERT(p.bf16);
    using namespace flash_amx;
    if (!forward_amx<SimdAvx512Dot, TilesHw>(p)) forward<SimdAvx512Dot>(p);
}

}  // namespace qkv::kernels::cpu::detail
