// Flash attention: the entry table of the capped tier (flash_kernels.h), the portable build of
// flash_attention_impl.h (its scalar row), the per-thread workspace every build shares, and the
// public entry points, which choose among the table's entries. Compiled for plain x86-64 so
// nothing here needs a newer instruction set.
#define QKV_FLASH_NS flash_scalar
#include "kernels/cpu/flash_attention.h"

#include <sys/mman.h>

#include <array>
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

template <>
FlashKernels flash_build<Isa::scalar>() {
    return flash_scalar::fp32_entries<flash_scalar::SimdScalar>();
}

const FlashKernels& flash_kernels() {
    // Row t: flash_build<t> where the CPU has tier t (a build's own code may use its instructions,
    // so higher tiers' builds are not called), each null entry from row t - 1.
    static const std::array<FlashKernels, 5> rows = [] {
        FlashKernels (*const builds[])() = {&flash_build<Isa::scalar>, &flash_build<Isa::avx2>,
                                            &flash_build<Isa::avx512>, &flash_build<Isa::avx512_bf16>,
                                            &flash_build<Isa::amx>};
        std::array<FlashKernels, 5> r{};
        for (size_t t = 0; t < r.size(); ++t) {
            if (Isa(t) <= cpu_isa()) r[t] = builds[t]();
            if (t == 0) continue;
            const FlashKernels& lo      = r[t - 1];
            auto                inherit = [](auto& entry, auto below) {
                if (!entry) entry = below;
            };
            inherit(r[t].forward, lo.forward);
            inherit(r[t].backward, lo.backward);
            inherit(r[t].tile_gemm, lo.tile_gemm);
            inherit(r[t].forward_dot, lo.forward_dot);
            inherit(r[t].backward_dot, lo.backward_dot);
            inherit(r[t].forward_amx, lo.forward_amx);
            inherit(r[t].backward_amx, lo.backward_amx);
            inherit(r[t].forward_amx_emulated, lo.forward_amx_emulated);
            inherit(r[t].backward_amx_emulated, lo.backward_amx_emulated);
            inherit(r[t].forward_amx_untimed_tiles, lo.forward_amx_untimed_tiles);
            inherit(r[t].backward_amx_untimed_tiles, lo.backward_amx_untimed_tiles);
            inherit(r[t].forward_few_keys, lo.forward_few_keys);
            inherit(r[t].backward_few_keys, lo.backward_few_keys);
        }
        return r;
    }();
    return rows[size_t(simd_isa())];
}

void flash_tile_gemm(const TileGemmParams& t) { flash_kernels().tile_gemm(t); }

}  // namespace detail

namespace {
std::atomic<Bf16AttentionPath> g_bf16_path{Bf16AttentionPath::automatic};
std::atomic<bool>              g_amx_emulated{false};
std::atomic<FewKeysPath>       g_few_keys{FewKeysPath::automatic};
}  // namespace

FewKeysPath set_few_keys_path(FewKeysPath p) { return g_few_keys.exchange(p, std::memory_order_relaxed); }

bool few_keys_covers(const AttentionParams<float>& p) {
    return !p.bf16 && p.Tk >= 1 && p.Tk <= detail::kFewKeysMax && !p.bool_mask && !p.additive_mask &&
           p.softcap == 0.0f && !p.alibi_slopes && p.window_left < 0 && p.window_right < 0;
}

int64_t few_keys_auto_max_keys() { return simd_isa() == Isa::avx2 ? kFewKeysAutoMaxKeysAvx2 : kFewKeysAutoMaxKeys; }

bool uses_few_keys(const AttentionParams<float>& p) {
    const FewKeysPath path = g_few_keys.load(std::memory_order_relaxed);
    if (path == FewKeysPath::never || !few_keys_covers(p)) return false;
    return path == FewKeysPath::always || p.Tk <= few_keys_auto_max_keys();
}

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
    const detail::FlashKernels& k = detail::flash_kernels();
    if (uses_few_keys(p)) return k.forward_few_keys(p);
    if (p.bf16) {
        const Bf16AttentionTiles tiles = bf16_attention_tiles(p.Tq, p.Tk);
        if (tiles == Bf16AttentionTiles::amx) return k.forward_amx(p);
        if (tiles == Bf16AttentionTiles::emulated) return k.forward_amx_emulated(p);
        if (bf16_attention_uses_dot()) return k.forward_dot(p);
    }
    k.forward(p);
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
    const detail::FlashKernels& k = detail::flash_kernels();
    if (uses_few_keys(p)) return k.backward_few_keys(p, g);
    if (p.bf16) {
        const Bf16AttentionTiles tiles = bf16_attention_tiles(p.Tq, p.Tk);
        if (tiles == Bf16AttentionTiles::amx) return k.backward_amx(p, g);
        if (tiles == Bf16AttentionTiles::emulated) return k.backward_amx_emulated(p, g);
        if (bf16_attention_uses_dot()) return k.backward_dot(p, g);
    }
    k.backward(p, g);
}

}  // namespace qkv::kernels::cpu
