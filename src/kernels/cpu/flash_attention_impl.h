#pragma once
// The flash attention kernels, written once over a SIMD traits struct S (flash_traits.h) and
// compiled per ISA tier by the builds that include this header after defining QKV_FLASH_NS (their
// namespace): flash_attention.cpp (portable), flash_attention_avx2.cpp, flash_attention_avx512.cpp,
// flash_attention_avx512bf16.cpp, flash_attention_amx.cpp. Each build fills its row of the entry
// table (flash_kernels.h), from the entry sets at the end of this header. Math:
// docs/kernels/flash_attention.md. The parts, by concern:
//   flash_traits.h        the SIMD traits (vector ops from the SIMD layer, block sizes)
//   flash_gemm.h          GEMM micro-kernels and tiles, packing, dropout tiles, bf16 words
//   flash_masks.h         key ranges, masks, score modifiers, the masked online softmax
//   flash_forward.h       the forward (fp32 tiles, vdpbf16ps words)
//   flash_backward.h      the backward
//   flash_few_keys.h      forward and backward for few keys (Tk <= kFewKeysMax), fp32
//   flash_amx_forward.h   the AMX forward   (AVX-512-BF16 builds only)
//   flash_amx_backward.h  the AMX backward  (AVX-512-BF16 builds only)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own AVX-512 intrinsics' undefined-vector starts as maybe-uninitialized
// (simd.h has the details); off for the whole translation unit of an AVX-512 build.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/cpu/flash_kernels.h"

#ifdef QKV_FLASH_NS
#include <type_traits>

#include "kernels/cpu/flash_backward.h"
#include "kernels/cpu/flash_few_keys.h"
#include "kernels/cpu/flash_forward.h"
#if defined(__AVX512BF16__)
#include "kernels/cpu/flash_amx_backward.h"
#include "kernels/cpu/flash_amx_forward.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

/// The fp32 entries of a build over traits S: the forward, the backward (on SShortQ's query blocks
/// when Tq fits in one of them), the tile GEMM and the few-keys kernels.
template <class S, class SShortQ = S>
detail::FlashKernels fp32_entries() {
    detail::FlashKernels k;
    k.forward  = [](const AttentionParams<float>& p) { forward<S>(p); };
    k.backward = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        if constexpr (!std::is_same_v<S, SShortQ>) {
            if (p.Tq <= SShortQ::kBwdBlockQ) return backward<SShortQ>(p, g);
        }
        backward<S>(p, g);
    };
    k.tile_gemm = [](const detail::TileGemmParams& t) {
        gemm<S, kStore, false, false>(t.M, t.N, t.K, t.A, t.lda, t.B, t.ldb, t.C, t.ldc);
    };
    k.forward_few_keys  = [](const AttentionParams<float>& p) { few_keys_forward<S>(p); };
    k.backward_few_keys = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        few_keys_backward<S>(p, g);
    };
    return k;
}

#if defined(__AVX512BF16__)
/// The AMX forward on tiles T (p.bf16), or the vdpbf16ps forward where K or V holds a value that
/// is ±inf or NaN as bf16.
template <class T>
void forward_amx_or_dot(const AttentionParams<float>& p) {
    QKV_ASSERT(p.bf16);
    if (!forward_amx<SimdAvx512Dot, T>(p)) forward<SimdAvx512Dot>(p);
}

/// The AMX backward on tiles T (p.bf16), or, for such K or V, the rounded fp32 tiles, which never
/// read hidden rows.
template <class T>
void backward_amx_or_fp32(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    QKV_ASSERT(p.bf16);
    if (!backward_amx<SimdAvx512Dot, T>(p, g)) backward<SimdAvx512>(p, g);
}
#endif

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
#endif
