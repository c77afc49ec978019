#pragma once
// The flash attention kernels, written once over a SIMD traits struct S (flash_traits.h) and
// compiled per ISA tier by the builds that include this header after defining QKV_FLASH_NS (their
// namespace): flash_attention.cpp (portable), flash_attention_avx2.cpp, flash_attention_avx512.cpp,
// flash_attention_avx512bf16.cpp, flash_attention_amx.cpp. Each build fills its row of the entry
// table (flash_kernels.h). Math: docs/kernels/flash_attention.md. The parts, by concern:
//   flash_traits.h        the SIMD traits (vector ops from the SIMD layer, block sizes)
//   flash_gemm.h          GEMM micro-kernels and tiles, packing, dropout tiles, bf16 words
//   flash_masks.h         key ranges, masks, score modifiers, the masked online softmax
//   flash_forward.h       the forward (fp32 tiles, vdpbf16ps words)
//   flash_backward.h      the backward
//   flash_amx_forward.h   the AMX forward   (AVX-512-BF16 builds only)
//   flash_amx_backward.h  the AMX backward  (AVX-512-BF16 builds only)
#include "kernels/cpu/flash_kernels.h"

#ifdef QKV_FLASH_NS
#include "kernels/cpu/flash_backward.h"
#include "kernels/cpu/flash_forward.h"
#if defined(__AVX512BF16__)
#include "kernels/cpu/flash_amx_backward.h"
#include "kernels/cpu/flash_amx_forward.h"
#endif
#endif
