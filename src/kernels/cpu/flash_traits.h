#pragma once
// The flash attention kernels' SIMD traits (flash_gemm.h .. flash_amx_backward.h are written once
// over a traits struct S): the vector type and its operations from the SIMD layer (cpu/simd.h V16
// and V8, simd_bf16.h's words, simd_philox.h), plus the blocking: the register tile of the GEMM
// micro-kernel (kR rows x kNV vectors of accumulators) and the attention block sizes
// kBlockQ x kBlockK (queries x keys; chosen by bench/bench_attention.cpp, see the docs). No
// intrinsics here. Each struct is defined only in the translation units compiled for its ISA
// (flash_attention_<isa>.cpp; the portable one in flash_attention.cpp), inside the per-ISA
// namespace chosen by the includer (QKV_FLASH_NS) and an unnamed one, so no ISA-specific code can
// be merged into another translation unit by the linker.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_amx.h"
#include "kernels/cpu/simd_bf16.h"
#include "kernels/cpu/simd_philox.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_traits.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {

// The traits derive from simd.h's vector types, which live in an unnamed namespace (ODR note
// there): so do the traits.
namespace {

#if defined(QKV_HAVE_AMX_TILES)
using simd::TilesHw;
#endif
using simd::TilesEmu;
using simd::TilesNull;

// exp is the one SIMD exp of cpu/simd.h (simd::exp; the flush rule — x < -87 gives exactly 0, so
// exp(-inf) = 0 and no denormal reaches the GEMMs — is written down there). The portable build
// applies the same rule lane by lane with the Cephes e^r recipe. Dropout tiles draw 8 Philox
// blocks at a time (philox8) through simd_philox.h; the tests compare the dropped entries with the
// reference kernel's, which uses include/qkv/core/philox.h, exactly.

#if defined(__AVX2__)
/// The traits of an x86 build over the SIMD layer's vector type Vec (V8, V16) with a register tile
/// of R x NV accumulators: 64 x 128 attention blocks, and the AVX2 8 x 8 transpose and 8-block
/// Philox on every width (so the AVX2 tests cover the AVX-512 build's).
template <class Vec, int R, int NV>
struct SimdX86 : Vec {
    using V = typename Vec::R;
    static constexpr int W = int(Vec::W);
    static constexpr int kR = R, kNV = NV;
    static constexpr int kBlockQ = 64, kBlockK = 128;
    static constexpr int kBwdBlockQ = 64, kBwdBlockK = 128;
    static inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds, float k) {
        simd::V8::transpose8_scaled(src, ss, dst, ds, k);
    }
    static inline void philox8(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
        simd::philox_words<simd::P8, 8>(blk0, seed, w);
    }
};
#endif

#if defined(__AVX512F__)
// 6 x 4 accumulators + 4 B vectors + 1 broadcast = 29 of 32 zmm registers.
struct SimdAvx512 : SimdX86<simd::V16, 6, 4> {};

/// SimdAvx512's backward with one-vector query blocks, for few queries (see SimdAvx512DotShortQ).
struct SimdAvx512ShortQ : SimdAvx512 {
    static constexpr int kBwdBlockQ = 16;
};
#endif

#if defined(__AVX512BF16__)
/// The AVX-512-BF16 build (flash_attention_avx512bf16.cpp): SimdAvx512 plus the bf16 operand
/// words of vdpbf16ps (simd_bf16.h). kDot selects the word GEMMs in flash_gemm.h.
struct SimdAvx512Dot : SimdAvx512, simd::W16 {
    static constexpr bool kDot = true;
};

/// The backward for few queries (Tq <= 16, e.g. a training step's 10-token sentences): query
/// blocks of one vector (16 lanes) instead of 64, so the lane-wise score tiles, probabilities and
/// query packing do not run on 48 padding lanes.
struct SimdAvx512DotShortQ : SimdAvx512Dot {
    static constexpr int kBwdBlockQ = 16;
};
#endif

#if defined(__AVX2__)
// 6 x 2 accumulators + 2 B vectors + 1 broadcast = 15 of 16 ymm registers.
struct SimdAvx2 : SimdX86<simd::V8, 6, 2> {};
#endif

/// Portable fallback: 16 lanes as 4 SSE2-sized GCC vectors, with exactly the
/// AVX-512 geometry (W, register tile, blocks), so on any machine the tests run the tile, tail and
/// mask code the AVX-512 path runs; exp lane by lane with the same recipe.
struct SimdScalar {
    typedef float V4 __attribute__((vector_size(16)));  // GCC generic vector = one SSE register
    struct V {
        V4 p[4];
    };
    using M = int;  // number of valid lanes
    static constexpr int W = 16;
    static constexpr int kR = 6, kNV = 4;
    static constexpr int kBlockQ = 64, kBlockK = 128;
    static constexpr int kBwdBlockQ = 64, kBwdBlockK = 128;
    static inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds, float k) {
        for (int r = 0; r < 8; ++r)
            for (int c = 0; c < 8; ++c) dst[c * ds + r] = k * src[r * ss + c];
    }
    static inline void philox8(uint64_t blk0, uint64_t seed, uint32_t w[4][8]) {
        simd::philox_words<simd::P1, 8>(blk0, seed, w);
    }

#define QKV_PARTS(expr)                  \
    V r;                                 \
    for (int u = 0; u < 4; ++u) r.p[u] = expr; \
    return r
    static inline V zero() { return V{}; }
    static inline V set1(float a) { QKV_PARTS(V4{} + a); }
    static inline V load(const float* p) {
        V v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    static inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
    static inline M tail(int n) { return n >= W ? W : n; }
    static inline V loadm(const float* p, M m) {
        V v{};
        std::memcpy(&v, p, sizeof(float) * size_t(m));
        return v;
    }
    static inline void storem(float* p, V v, M m) { std::memcpy(p, &v, sizeof(float) * size_t(m)); }
    static inline V fmadd(V a, V b, V c) { QKV_PARTS(a.p[u] * b.p[u] + c.p[u]); }
    static inline V add(V a, V b) { QKV_PARTS(a.p[u] + b.p[u]); }
    static inline V sub(V a, V b) { QKV_PARTS(a.p[u] - b.p[u]); }
    static inline V mul(V a, V b) { QKV_PARTS(a.p[u] * b.p[u]); }
    static inline V max(V a, V b) { QKV_PARTS(a.p[u] > b.p[u] ? a.p[u] : b.p[u]); }
    static inline V mask_gt(V s, V j, V lim) { QKV_PARTS(j.p[u] > lim.p[u] ? V4{} - INFINITY : s.p[u]); }
    static inline V neginf_to_zero(V a) { QKV_PARTS(a.p[u] == V4{} - INFINITY ? V4{} : a.p[u]); }
    static inline V neginf_to_posinf(V a) {
        QKV_PARTS(a.p[u] == V4{} - INFINITY ? V4{} + INFINITY : a.p[u]);
    }
    static inline V neginf_to(V a, V b) { QKV_PARTS(a.p[u] == V4{} - INFINITY ? b.p[u] : a.p[u]); }
    static inline bool all_le(V a, V b) {
        for (int t = 0; t < W; ++t)
            if (!(a.p[t / 4][t % 4] <= b.p[t / 4][t % 4])) return false;
        return true;
    }
#undef QKV_PARTS
    static inline V round_bf16(V a) {
        V r;
        for (int t = 0; t < W; ++t) {
            const float x = a.p[t / 4][t % 4];
            uint32_t    u;
            std::memcpy(&u, &x, 4);
            if (x == x) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            float y;
            std::memcpy(&y, &u, 4);
            r.p[t / 4][t % 4] = y;
        }
        return r;
    }
    static inline float exp1(float x) {
        using namespace simd;
        if (x < kExpLo) return 0.0f;
        x             = x > kExpHi ? kExpHi : x;
        const float n = std::nearbyint(x * kLog2e);
        float       r = x - n * kLn2Hi;
        r             = r - n * kLn2Lo;
        float y = ((((kExpP0 * r + kExpP1) * r + kExpP2) * r + kExpP3) * r + kExpP4) * r + kExpP5;
        y       = y * (r * r) + (r + 1.0f);
        return std::ldexp(y, int(n));
    }
    static inline V exp(V a) {
        V r;
        for (int t = 0; t < W; ++t) r.p[t / 4][t % 4] = exp1(a.p[t / 4][t % 4]);
        return r;
    }
};

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
