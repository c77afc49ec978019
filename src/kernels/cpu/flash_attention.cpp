// Flash attention: run-time ISA dispatch, the portable scalar build of flash_attention_impl.h, and
// the per-thread workspace every ISA path shares. Compiled for plain x86-64 so nothing here needs
// a newer instruction set.
#define QKV_FLASH_NS flash_scalar
#include "kernels/cpu/flash_attention.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>

#include "kernels/cpu/flash_attention_impl.h"

namespace qkv::kernels::cpu {
namespace detail {

namespace {
struct Arena {
    void*  data = nullptr;
    size_t cap  = 0;
    ~Arena() { std::free(data); }
    void* get(size_t bytes) {
        if (bytes > cap) {
            std::free(data);
            constexpr size_t kHuge  = size_t(2) << 20;
            const size_t     align  = bytes >= kHuge ? kHuge : 64;
            const size_t     padded = (bytes + align - 1) / align * align;
            data                    = std::aligned_alloc(align, padded);
            QKV_ASSERT(data != nullptr);
            if (bytes >= kHuge) madvise(data, padded, MADV_HUGEPAGE);
            cap = padded;
        }
        return data;
    }
};
}  // namespace

float* flash_thread_workspace(int64_t n) {
    thread_local Arena arena;
    return static_cast<float*>(arena.get(size_t(n) * sizeof(float)));
}

void* flash_call_buffer(int64_t bytes) {
    thread_local Arena arena;
    return arena.get(size_t(bytes));
}

void flash_forward_scalar(const AttentionParams<float>& p) {
    flash_scalar::forward<flash_scalar::SimdScalar>(p);
}
void flash_backward_scalar(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    flash_scalar::backward<flash_scalar::SimdScalar>(p, g);
}

void flash_tile_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float* C, int64_t ldc) {
    switch (fp32_variant_isa()) {
        case Isa::avx512: return flash_tile_gemm_avx512(M, N, K, A, lda, B, ldb, C, ldc);
        case Isa::avx2: return flash_tile_gemm_avx2(M, N, K, A, lda, B, ldb, C, ldc);
        default:
            return flash_scalar::gemm<flash_scalar::SimdScalar, flash_scalar::kStore, false, false>(
                M, N, K, A, lda, B, ldb, C, ldc);
    }
}

}  // namespace detail

namespace {
std::atomic<Bf16AttentionPath> g_bf16_path{Bf16AttentionPath::automatic};
std::atomic<bool>              g_amx_emulated{false};
}  // namespace

Bf16AttentionPath set_bf16_attention_path(Bf16AttentionPath p) {
    return g_bf16_path.exchange(p, std::memory_order_relaxed);
}

bool set_amx_tile_emulation(bool on) { return g_amx_emulated.exchange(on, std::memory_order_relaxed); }

bool bf16_attention_uses_dot() {
    const Bf16AttentionPath path = g_bf16_path.load(std::memory_order_relaxed);
    if (path == Bf16AttentionPath::rounded_fp32 || simd_isa() < Isa::avx512_bf16) return false;
    return path == Bf16AttentionPath::dot || cpu_features().bf16_dot_full_rate;
}

Bf16AttentionTiles bf16_attention_tiles(int64_t Tq, int64_t Tk) {
    const Bf16AttentionPath path = g_bf16_path.load(std::memory_order_relaxed);
    if (path != Bf16AttentionPath::amx && path != Bf16AttentionPath::automatic) return Bf16AttentionTiles::none;
    if (path == Bf16AttentionPath::automatic && (Tq < kAmxMinQueries || Tk < kAmxMinKeys))
        return Bf16AttentionTiles::none;
    if (path == Bf16AttentionPath::amx && g_amx_emulated.load(std::memory_order_relaxed) &&
        simd_isa() >= Isa::avx512_bf16)
        return Bf16AttentionTiles::emulated;
    return simd_isa() == Isa::amx && amx_permitted() ? Bf16AttentionTiles::amx : Bf16AttentionTiles::none;
}

void flash_attention_forward(const AttentionParams<float>& p) {
    if (p.B * p.H * p.Tq == 0) return;
    if (p.bf16) switch (bf16_attention_tiles(p.Tq, p.Tk)) {
            case Bf16AttentionTiles::amx: return detail::flash_forward_amx(p);
            case Bf16AttentionTiles::emulated: return detail::flash_forward_amx_emulated(p);
            case Bf16AttentionTiles::none: break;
        }
    if (p.bf16 && bf16_attention_uses_dot()) return detail::flash_forward_avx512bf16(p);
    switch (fp32_variant_isa()) {
        case Isa::avx512: return detail::flash_forward_avx512(p);
        case Isa::avx2: return detail::flash_forward_avx2(p);
        default: return detail::flash_forward_scalar(p);
    }
}

void flash_attention_backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g0) {
    const AttentionGradParams<float> g = with_grad_strides(p, g0);
    if (p.B * p.H * p.Tq == 0 || p.Tk == 0) {  // nothing to attend: every gradient is 0
        auto zero = [](float* x, int64_t B, int64_t H, int64_t T, int64_t W, int64_t sb, int64_t sh, int64_t st) {
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t t = 0; t < T; ++t)
                        for (int64_t w = 0; w < W; ++w) x[b * sb + h * sh + t * st + w] = 0.0f;
        };
        zero(g.dq, p.B, p.H, p.Tq, p.D, g.dq_stride_b, g.dq_stride_h, g.dq_stride_t);
        zero(g.dk, p.B, p.Hkv, p.Tk, p.D, g.dk_stride_b, g.dk_stride_h, g.dk_stride_t);
        zero(g.dv, p.B, p.Hkv, p.Tk, p.Dv, g.dv_stride_b, g.dv_stride_h, g.dv_stride_t);
        return;
    }
    if (p.bf16) switch (bf16_attention_tiles(p.Tq, p.Tk)) {
            case Bf16AttentionTiles::amx: return detail::flash_backward_amx(p, g);
            case Bf16AttentionTiles::emulated: return detail::flash_backward_amx_emulated(p, g);
            case Bf16AttentionTiles::none: break;
        }
    if (p.bf16 && bf16_attention_uses_dot()) return detail::flash_backward_avx512bf16(p, g);
    switch (fp32_variant_isa()) {
        case Isa::avx512: return detail::flash_backward_avx512(p, g);
        case Isa::avx2: return detail::flash_backward_avx2(p, g);
        default: return detail::flash_backward_scalar(p, g);
    }
}

}  // namespace qkv::kernels::cpu
