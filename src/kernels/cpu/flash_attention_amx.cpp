// AMX build of the flash attention forward and backward (flash_attention_impl.h: forward_amx and
// backward_amx on amx_tiles.h's TilesHw). Called only after the CPU checks in flash_attention.cpp
// (cpu/isa.h: amx tier, amx_permitted). Compiled with AVX-512-BF16 as well: a call whose K or V
// holds a non-finite bf16 value runs this build's vdpbf16ps forward and rounded fp32 backward.
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

void flash_backward_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    QKV_ASSERT(p.bf16);
    using namespace flash_amx;
    // non-finite bf16 K or V: the rounded fp32 tiles, which never read hidden rows
    if (!backward_amx<SimdAvx512Dot, TilesHw>(p, g)) backward<SimdAvx512>(p, g);
}

}  // namespace qkv::kernels::cpu::detail
