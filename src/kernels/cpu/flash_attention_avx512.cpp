// AVX-512 build of the flash attention kernels (flash_attention_impl.h): the avx512 row of the
// entry table (flash_kernels.h; the avx512_bf16 and amx tiers run its fp32 kernels too), called
// only when the capped CPU allows it. Few queries take the backward's one-vector query blocks.
#define QKV_FLASH_NS flash_avx512
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::avx512>() {
    return flash_avx512::fp32_entries<flash_avx512::SimdAvx512, flash_avx512::SimdAvx512ShortQ>();
}

}  // namespace qkv::kernels::cpu::detail
