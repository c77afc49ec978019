#pragma once
// The AMX tile backends, part of the SIMD layer (cpu/simd.h), used by the AMX flash attention
// kernels (flash_amx_forward.h, flash_amx_backward.h: tile_gemm):
//   TilesHw:  the AMX instructions (flash_attention_amx.cpp, compiled with -mamx-tile -mamx-bf16);
//   TilesEmu: the same eight tile registers and operations in plain code, following the Intel SDM's
//             definition of TDPBF16PS (flash_attention_avx512bf16.cpp), so that the tile kernel's
//             packing, zero padding and blocking run in the tests of every machine with
//             AVX-512-BF16, not only on AMX machines;
//   TilesNull: tiles that do nothing (bench_attention only).
// Geometry (palette 1, every tile configured to the maximum): 8 registers of 16 rows x 64 bytes.
// An fp32 C tile is 16 x 16; a bf16 A tile is 16 rows x 32 values (16 words along the
// reduction); a B tile is 16 word rows x 16 words, a word holding two bf16 values consecutive
// along the reduction (the VNNI layout). tdpbf16ps: C[m][n] += A[m].lo(k) B[k].lo(n) +
// A[m].hi(k) B[k].hi(n) over the 16 words k. Strides are in bytes.
// ODR: an unnamed namespace, as simd.h.
#include <cmath>
#include <cstdint>
#include <cstring>
// GCC spells the feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__.
#if (defined(__AMX_TILE__) && defined(__AMX_BF16__)) || (defined(__AMXTILE__) && defined(__AMXBF16__))
#define QKV_HAVE_AMX_TILES 1
#include <immintrin.h>
#endif

namespace qkv::kernels::cpu::simd {
namespace {

#if defined(QKV_HAVE_AMX_TILES)
/// The AMX tiles. GCC's tile intrinsics are asm statements that name their tile by a literal
/// (hence the if-constexpr chains) and do not tell the compiler that they read memory (hence the
/// compiler barriers before each tile load and after a block's loads, so stores to an operand
/// neither sink below nor rise above the loads that read it, and after each tile store).
struct TilesHw {
    static inline void begin() {
        alignas(64) uint8_t cfg[64] = {};
        cfg[0] = 1;  // palette 1
        for (int t = 0; t < 8; ++t) {
            const uint16_t colsb = 64;
            std::memcpy(cfg + 16 + 2 * t, &colsb, 2);
            cfg[48 + t] = 16;
        }
        asm volatile("" : : "r"(cfg) : "memory");  // cfg escapes: its 64 bytes are stored first
        _tile_loadconfig(cfg);
    }
    static inline void end() { _tile_release(); }
    template <int T>
    static inline void zero() {
        if constexpr (T == 0) _tile_zero(0);
        else if constexpr (T == 1) _tile_zero(1);
        else if constexpr (T == 2) _tile_zero(2);
        else _tile_zero(3);
    }
    template <int T>
    static inline void load(const void* p, int64_t stride) {
        asm volatile("" ::: "memory");
        if constexpr (T == 0) _tile_loadd(0, p, stride);
        else if constexpr (T == 1) _tile_loadd(1, p, stride);
        else if constexpr (T == 2) _tile_loadd(2, p, stride);
        else if constexpr (T == 3) _tile_loadd(3, p, stride);
        else if constexpr (T == 4) _tile_loadd(4, p, stride);
        else if constexpr (T == 5) _tile_loadd(5, p, stride);
        else if constexpr (T == 6) _tile_loadd(6, p, stride);
        else _tile_loadd(7, p, stride);
    }
    template <int T>
    static inline void store(void* p, int64_t stride) {
        if constexpr (T == 0) _tile_stored(0, p, stride);
        else if constexpr (T == 1) _tile_stored(1, p, stride);
        else if constexpr (T == 2) _tile_stored(2, p, stride);
        else _tile_stored(3, p, stride);
        asm volatile("" ::: "memory");  // not only through the header's clobber: later reads see it
    }
    /// After a block's last tile load: no later store to its operands moves above the loads.
    static inline void loads_done() { asm volatile("" ::: "memory"); }
    /// C += A . B for the four (C, A, B) triples of tile_gemm's 2 x 2 block.
    template <int C, int A, int B>
    static inline void dp() {
        if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
        else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
        else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
        else {
            static_assert(C == 3 && A == 5 && B == 7);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
};
#endif

/// The tiles in plain code (per thread). tdpbf16ps as the SDM defines it: bf16 inputs below 2^-126
/// taken as 0, each of the two products of a word added to the fp32 accumulator in turn (the
/// products of two bf16 values are exact in fp32), results below 2^-126 flushed to 0. Slow (a
/// reference for tests, never dispatched by `automatic`).
struct TilesEmu {
    struct State {
        alignas(64) uint8_t t[8][16][64];
    };
    static inline State& state() {
        thread_local State s;
        return s;
    }
    static inline float bf16_daz(uint16_t h) {
        if ((h & 0x7f80u) == 0) h &= 0x8000u;
        const uint32_t u = uint32_t(h) << 16;
        float          f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static inline float ftz(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }
    static inline void begin() { std::memset(state().t, 0, sizeof(State::t)); }
    static inline void end() {}
    static inline void loads_done() {}
    template <int T>
    static inline void zero() {
        std::memset(state().t[T], 0, sizeof state().t[T]);
    }
    template <int T>
    static inline void load(const void* p, int64_t stride) {
        for (int r = 0; r < 16; ++r) std::memcpy(state().t[T][r], static_cast<const char*>(p) + r * stride, 64);
    }
    template <int T>
    static inline void store(void* p, int64_t stride) {
        for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, state().t[T][r], 64);
    }
    template <int C, int A, int B>
    static inline void dp() {
        State& s = state();
        for (int m = 0; m < 16; ++m) {
            float c[16];
            std::memcpy(c, s.t[C][m], 64);
            for (int k = 0; k < 16; ++k) {
                uint16_t a[2];
                std::memcpy(a, s.t[A][m] + 4 * k, 4);
                const float a0 = bf16_daz(a[0]), a1 = bf16_daz(a[1]);
                for (int n = 0; n < 16; ++n) {
                    uint16_t b[2];
                    std::memcpy(b, s.t[B][k] + 4 * n, 4);
                    c[n] = ftz(c[n] + a0 * bf16_daz(b[0]));
                    c[n] = ftz(c[n] + a1 * bf16_daz(b[1]));
                }
            }
            std::memcpy(s.t[C][m], c, 64);
        }
    }
};

/// Tiles whose loads and products do nothing and whose stores write zeros (so scores are 0 and
/// the kernels take their usual unmasked path): for bench/bench_attention.cpp only, which times
/// the AMX kernels' vector work, packing and memory traffic with the tile products taken as free,
/// a bound on what the tiles can gain, on any AVX-512-BF16 machine. The results are meaningless.
struct TilesNull {
    static inline void begin() {}
    static inline void end() {}
    static inline void loads_done() {}
    template <int T>
    static inline void zero() {}
    template <int T>
    static inline void load(const void*, int64_t) {}
    template <int T>
    static inline void store(void* p, int64_t stride) {
        for (int r = 0; r < 16; ++r) std::memset(static_cast<char*>(p) + r * stride, 0, 64);
    }
    template <int C, int A, int B>
    static inline void dp() {}
};

}  // namespace
}  // namespace qkv::kernels::cpu::simd
