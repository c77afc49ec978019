// AVX-512-BF16 build of the flash attention kernels (flash_attention_impl.h with SimdAvx512Dot):
// under AttentionParams::bf16 the forward's score and P·V products run as vdpbf16ps on bf16 word
// operands. Called only after the CPU checks in flash_attention.cpp (cpu/isa.h: avx512_bf16 tier).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QKV_FLASH_NS flash_avx512bf16
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

void flash_forward_avx512bf16(const AttentionParams<float>& p) {
    QKV_ASSERT(p.bf16);
    flash_avx512bf16::forward<flash_avx512bf16::SimdAvx512Dot>(p);
}

}  // namespace qkv::kernels::cpu::detail
