// AVX2 + FMA build of the flash attention kernels (flash_attention_impl.h): the avx2 row of the
// entry table (flash_kernels.h), called only when the capped CPU allows it.
#define QKV_FLASH_NS flash_avx2
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {

template <>
FlashKernels flash_build<Isa::avx2>() {
    return flash_avx2::fp32_entries<flash_avx2::SimdAvx2>();
}

}  // namespace qkv::kernels::cpu::detail
