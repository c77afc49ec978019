// AVX-512-BF16 build of the flash attention kernels (flash_attention_impl.h with SimdAvx512Dot):
// the avx512_bf16 row of the entry table (flash_kernels.h). Under AttentionParams::bf16 every
// product of the forward and the backward runs as vdpbf16ps on bf16 word operands. Also the AMX
// forward and backward with their tiles emulated in plain code (tests only) or doing nothing
// (bench_attention only). Called only when the capped CPU has the avx512_bf16 tier.
#define QKV_FLASH_NS flash_avx512bf16
#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu::detail {
namespace {

/// Whether some element of x (B, Hkv, Tk, cols through the strides) is ±inf or NaN as bf16 (a
/// finite float from 0x1.fefp127 up rounds to inf).
bool bf16_nonfinite(const float* x, int64_t B, int64_t Hkv, int64_t Tk, int64_t cols, int64_t sb, int64_t sh,
                    int64_t st) {
    uint32_t      any  = 0;
    const int64_t rows = B * Hkv * Tk;
#pragma omp parallel for reduction(| : any) if (rows * cols > (1 << 15)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / (Hkv * Tk), h = r / Tk % Hkv, t = r % Tk;
        const float*  row = x + b * sb + h * sh + t * st;
        for (int64_t c = 0; c < cols; ++c) {
            uint32_t u;
            std::memcpy(&u, row + c, 4);
            any |= uint32_t((u & 0x7fffffffu) >= 0x7f7f8000u);
        }
    }
    return any != 0;
}

}  // namespace

template <>
FlashKernels flash_build<Isa::avx512_bf16>() {
    using namespace flash_avx512bf16;
    FlashKernels k;
    k.forward_dot = [](const AttentionParams<float>& p) {
        QKV_ASSERT(p.bf16);
        forward<SimdAvx512Dot>(p);
    };
    k.backward_dot = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        QKV_ASSERT(p.bf16);
        // Hidden keys (P = 0) must not turn a non-finite K or V value into NaN (0 · inf): the fp32
        // tiles skip such rows, the word GEMMs cannot, so such inputs take the fp32 tiles.
        if (bf16_nonfinite(p.k, p.B, p.Hkv, p.Tk, p.D, p.k_stride_b, p.k_stride_h, p.k_stride_t) ||
            bf16_nonfinite(p.v, p.B, p.Hkv, p.Tk, p.Dv, p.v_stride_b, p.v_stride_h, p.v_stride_t))
            return backward<SimdAvx512>(p, g);
        // Few queries: one-vector query blocks (flash_traits.h, SimdAvx512DotShortQ).
        if (p.Tq <= SimdAvx512DotShortQ::kBwdBlockQ) return backward<SimdAvx512DotShortQ>(p, g);
        backward<SimdAvx512Dot>(p, g);
    };
    k.forward_amx_emulated  = forward_amx_or_dot<TilesEmu>;
    k.backward_amx_emulated = backward_amx_or_fp32<TilesEmu>;
    k.forward_amx_untimed_tiles  = [](const AttentionParams<float>& p) { forward_amx<SimdAvx512Dot, TilesNull>(p); };
    k.backward_amx_untimed_tiles = [](const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
        backward_amx<SimdAvx512Dot, TilesNull>(p, g);
    };
    return k;
}

}  // namespace qkv::kernels::cpu::detail
