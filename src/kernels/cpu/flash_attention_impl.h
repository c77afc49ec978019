#pragma once
// The flash attention kernels, written once over a SIMD traits struct S (flash_attention_simd.h)
// and compiled per instruction set: flash_attention_avx512.cpp, flash_attention_avx2.cpp, and the
// portable path in flash_attention.cpp. Math: docs/kernels/flash_attention.md.
//
// Layout trick: score tiles are kept transposed, S^T[j][i] (keys are rows, queries are SIMD
// lanes), so the online-softmax row max, exp, row sum and rescale are all lane-wise vertical
// operations (no horizontal reductions), index masks are one lane compare per key, and no tile of
// K or V is ever packed: every GEMM broadcasts K/V elements straight from their rows and streams
// vectors from a small packed Q^T / dO^T block or a tile. Head dims never need SIMD tails in
// the score GEMMs (D is the reduction); the P.V, dV, dK and dQ GEMMs use masked tail vectors.
#include <omp.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/params.h"
#include "qkv/core/error.h"

namespace qkv::kernels::cpu::detail {
// Helpers compiled once, in flash_attention.cpp (plain x86-64), shared by every ISA path.

/// This thread's workspace of at least n floats, 64-byte aligned; grown (never shrunk) and kept
/// for later calls, so steady-state calls do not allocate. Arenas of 2 MiB or more get
/// MADV_HUGEPAGE (first-touch cost of fresh 4 KiB pages; docs/kernels/flash_attention.md).
float* flash_thread_workspace(int64_t n);

/// The calling thread's second arena (at least `bytes`, 64-byte aligned, grown and kept like
/// flash_thread_workspace's): data a call packs once before its parallel region (the AMX
/// forward's K and V^T), which the workspace of the calling thread cannot hold.
void* flash_call_buffer(int64_t bytes);

/// C (M x N) = A (M x K, row-major, lda) * B (K x N, ldb) with the kernels' GEMM micro-kernels on
/// the best ISA; N a multiple of 16. For bench/bench_attention.cpp --tiles (vs dnnl_sgemm).
void flash_tile_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float* C, int64_t ldc);
void flash_tile_gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                            const float* B, int64_t ldb, float* C, int64_t ldc);
void flash_tile_gemm_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float* C, int64_t ldc);

// The per-ISA entry points (flash_attention_avx512.cpp, flash_attention_avx2.cpp,
// flash_attention.cpp), called by the dispatcher after the CPU checks.
void flash_forward_avx512(const AttentionParams<float>& p);
void flash_backward_avx512(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
void flash_forward_avx2(const AttentionParams<float>& p);
void flash_backward_avx2(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
void flash_forward_scalar(const AttentionParams<float>& p);
void flash_forward_avx512bf16(const AttentionParams<float>& p);  // p.bf16 only
void flash_backward_avx512bf16(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
void flash_forward_amx(const AttentionParams<float>& p);           // p.bf16 only; AMX usable
void flash_forward_amx_emulated(const AttentionParams<float>& p);  // p.bf16 only; tiles in plain code
void flash_backward_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
void flash_backward_amx_emulated(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
/// For bench_attention only: the AMX kernels with tiles that do nothing (amx_tiles.h: TilesNull),
/// timing everything but the tile products; results meaningless. p.bf16 only; AVX-512-BF16 only.
void flash_forward_amx_untimed_tiles(const AttentionParams<float>& p);
void flash_backward_amx_untimed_tiles(const AttentionParams<float>& p, const AttentionGradParams<float>& g);
void flash_backward_scalar(const AttentionParams<float>& p, const AttentionGradParams<float>& g);

}  // namespace qkv::kernels::cpu::detail

#ifdef QKV_FLASH_NS
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/flash_attention_simd.h"

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------------
// GEMM micro-kernel: C[m][0:n) (op)= sum_k A(m, k) * B[k][0:n) for R rows and NV vectors
// (n = NV*W lanes, the last vector masked by `tail`); B rows are bk apart, C rows cm apart.
// A(m, k) is broadcast; every use in this file has one unit stride, hence two forms:
//   AM1:  A(m, k) = A[m + k*as]  (R consecutive floats per k: a row of a transposed tile)
//   !AM1: A(m, k) = A[m*as + k]  (R rows walked together: K/V rows, tile rows)
// Mode kStore: C = acc; kAcc: C += acc; kScaleAcc: C = rowscale[m] * C + acc (online softmax).
// Tail: the last vector is partial (masked loads/stores; AMD's masked stores are slow, so the
// full-width instances use none).
enum Mode { kStore, kAcc, kScaleAcc };

/// Lazy rescaling in forward_block: an unmasked key block keeps the row's softmax shift m when the
/// block's sum of P = e^(s - m) stays <= 2^20 (so no P exceeds it either, and l and O grow by at
/// most that factor over the exact-maximum recurrence, far from float's 3.4e38); otherwise the
/// block is recomputed with its maximum as the new shift. FlashAttention-4 rescales lazily too.
constexpr float kBlockSumLimit = 1048576.0f;

/// Whether S is the vdpbf16ps build (SimdAvx512Dot): its GEMMs can take bf16 word operands.
template <class S>
constexpr bool kDot = requires { S::kDot; };

/// The micro-kernels' operands: fp32 values (one FMA per reduction step) or, in kDot builds, bf16
/// words (flash_attention_simd.h: SimdAvx512Dot; one vdpbf16ps per word, two reduction steps).
template <class S, class TA>
struct Operands;
template <class S>
struct Operands<S, float> {
    using B = typename S::V;
    static B load(const float* p) { return S::load(p); }
    static B loadm(const float* p, typename S::M m) { return S::loadm(p, m); }
    static B bcast(float a) { return S::set1(a); }
    static typename S::V madd(typename S::V acc, B x, B b) { return S::fmadd(x, b, acc); }
};
template <class S>
struct Operands<S, uint32_t> {
    using B = typename S::WV;
    static B load(const uint32_t* p) { return S::loadw(p); }
    static B loadm(const uint32_t* p, typename S::M m) { return S::loadwm(p, m); }
    static B bcast(uint32_t a) { return S::set1w(a); }
    static typename S::V madd(typename S::V acc, B x, B b) { return S::dot(acc, x, b); }
};

/// The micro-kernels' reduction: acc[r][v] = sum_k A(r, k) * B[k][v*W, (v+1)*W) (see micro for
/// A's two forms and `tail`; with words, K counts words), shared by micro and micro_exp.
template <class S, int R, int NV, bool AM1, bool Tail, class TA>
__attribute__((always_inline)) inline void accumulate(int64_t K, const TA* A, int64_t as, const TA* B,
                                                      int64_t bk, typename S::M tail,
                                                      typename S::V (&acc)[R][NV]) {
    using Op = Operands<S, TA>;
    using BV = typename Op::B;
    constexpr int W = S::W;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = S::zero();
    for (int64_t kk = 0; kk < K; ++kk) {
        BV b[NV];
#pragma GCC unroll 8
        for (int v = 0; v + 1 < NV; ++v) b[v] = Op::load(B + v * W);
        b[NV - 1] = Tail ? Op::loadm(B + (NV - 1) * W, tail) : Op::load(B + (NV - 1) * W);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const BV x = Op::bcast(AM1 ? A[kk * as + r] : A[r * as + kk]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] = Op::madd(acc[r][v], x, b[v]);
        }
        B += bk;
    }
}

/// acc *= k (the softmax scale of the word GEMMs' score tiles; 1 elsewhere, skipped).
template <class S, int R, int NV>
__attribute__((always_inline)) inline void scale_acc(typename S::V (&acc)[R][NV], float k) {
    if (k == 1.0f) return;
    const auto kv = S::set1(k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = S::mul(acc[r][v], kv);
}

template <class S, int R, int NV, int Md, bool AM1, bool Tail, class TA>
inline void micro(int64_t K, const TA* A, int64_t as, const TA* B, int64_t bk, float* C,
                  int64_t cm, typename S::M tail, const float* rowscale, float oscale) {
    if constexpr (R <= S::kR && NV <= S::kNV) {
        using V = typename S::V;
        constexpr int W = S::W;
        V acc[R][NV];
        accumulate<S, R, NV, AM1, Tail>(K, A, as, B, bk, tail, acc);
        scale_acc<S>(acc, oscale);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            float* c = C + r * cm;
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                const bool last = Tail && v == NV - 1;
                V          out  = acc[r][v];
                if constexpr (Md == kAcc) {
                    out = S::add(last ? S::loadm(c + v * W, tail) : S::load(c + v * W), out);
                } else if constexpr (Md == kScaleAcc) {
                    const V old = last ? S::loadm(c + v * W, tail) : S::load(c + v * W);
                    out         = S::fmadd(old, S::set1(rowscale[r]), out);
                }
                if (last) S::storem(c + v * W, out, tail);
                else S::store(c + v * W, out);
            }
        }
    }
}

/// C (M x N) (op)= A (M x K; see micro for `as`) * B (K x N, row stride bk), tiled kR x kNV*W.
/// CanTail = false when N is a multiple of W (score tiles: N = Bq), which halves the instances.
/// TA = uint32_t (kDot builds): A and B hold bf16 words, K counts words (pairs of reduction
/// steps), and the accumulators are multiplied by `oscale` before the mode's epilogue.
template <class S, int Md, bool AM1, bool CanTail = true, class TA = float>
void gemm(int64_t M, int64_t N, int64_t K, const TA* A, int64_t as, const TA* B, int64_t bk,
          float* C, int64_t cm, const float* rowscale = nullptr, float oscale = 1.0f) {
    constexpr int W = S::W;
    for (int64_t n0 = 0; n0 < N; n0 += S::kNV * W) {
        const int64_t nl   = min64(N - n0, S::kNV * W);
        const int     nv   = int((nl + W - 1) / W);
        const auto    tail = S::tail(int(nl - (nv - 1) * W));
        const bool    full = nl == nv * W;
        QKV_DASSERT(CanTail || full);
        for (int64_t m0 = 0; m0 < M; m0 += S::kR) {
            const int    r  = int(min64(S::kR, M - m0));
            const TA*    a  = A + (AM1 ? m0 : m0 * as);
            const TA*    b  = B + n0;
            float*       c  = C + m0 * cm + n0;
            const float* rs = rowscale ? rowscale + m0 : nullptr;
#define QKV_MK(R_, NV_)                                                             \
    case (R_) * 8 + (NV_):                                                          \
        if (!CanTail || full) micro<S, R_, NV_, Md, AM1, false>(K, a, as, b, bk, c, cm, tail, rs, oscale); \
        else micro<S, R_, NV_, Md, AM1, CanTail>(K, a, as, b, bk, c, cm, tail, rs, oscale);               \
        break
            switch (r * 8 + nv) {
                QKV_MK(1, 1); QKV_MK(1, 2); QKV_MK(1, 3); QKV_MK(1, 4);
                QKV_MK(2, 1); QKV_MK(2, 2); QKV_MK(2, 3); QKV_MK(2, 4);
                QKV_MK(3, 1); QKV_MK(3, 2); QKV_MK(3, 3); QKV_MK(3, 4);
                QKV_MK(4, 1); QKV_MK(4, 2); QKV_MK(4, 3); QKV_MK(4, 4);
                QKV_MK(5, 1); QKV_MK(5, 2); QKV_MK(5, 3); QKV_MK(5, 4);
                QKV_MK(6, 1); QKV_MK(6, 2); QKV_MK(6, 3); QKV_MK(6, 4);
                default: QKV_ASSERT(false);
            }
#undef QKV_MK
        }
    }
}

/// Score tile with the softmax fused into its epilogue (the forward's unmasked key blocks; docs
/// §2, lazy rescaling): the R x NV*W accumulators of s = K_j . Q^T (keys j are rows, queries are
/// lanes) leave the registers as P = e^(s - m) with the lane's current shift m[], and the epilogue
/// adds P to sum[]. On the block's first tile (`first`), lanes whose shift is still -inf (no key
/// seen yet: O = 0 and l = 0 there) take that tile's maximum as their shift. No SIMD tails: the
/// lanes are the whole query block (a multiple of W).
template <class S, int R, int NV, class TA>
inline void micro_exp(int64_t K, const TA* A, int64_t as, const TA* B, int64_t bk, float* C,
                      int64_t cm, float* m, float* sum, bool first, float oscale) {
    if constexpr (R <= S::kR && NV <= S::kNV) {
        using V = typename S::V;
        constexpr int W = S::W;
        V acc[R][NV];
        accumulate<S, R, NV, false, false>(K, A, as, B, bk, typename S::M{}, acc);
        scale_acc<S>(acc, oscale);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            V mv = S::load(m + v * W);
            if (first) {
                V tm = acc[0][v];
#pragma GCC unroll 8
                for (int r = 1; r < R; ++r) tm = S::max(tm, acc[r][v]);
                mv = S::neginf_to(mv, tm);
                S::store(m + v * W, mv);
            }
            V sv = S::load(sum + v * W);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const V e = S::exp(S::sub(acc[r][v], mv));
                S::store(C + r * cm + v * W, e);
                sv = S::add(sv, e);
            }
            S::store(sum + v * W, sv);
        }
    }
}

/// P^T (M keys x N query lanes) = e^(K_j . Q^T - m) by micro_exp tiles (see there); N a multiple
/// of W.
template <class S, class TA = float>
void gemm_exp(int64_t M, int64_t N, int64_t K, const TA* A, int64_t as, const TA* B,
              int64_t bk, float* C, int64_t cm, float* m, float* sum, float oscale = 1.0f) {
    constexpr int W = S::W;
    for (int64_t n0 = 0; n0 < N; n0 += S::kNV * W) {
        const int nv = int(min64(N - n0, S::kNV * W) / W);
        for (int64_t m0 = 0; m0 < M; m0 += S::kR) {
            const int    r = int(min64(S::kR, M - m0));
            const TA*    a = A + m0 * as;
            const TA*    b = B + n0;
            float*       c = C + m0 * cm + n0;
            const bool   f = m0 == 0;
#define QKV_MK(R_, NV_)                                                                        \
    case (R_) * 8 + (NV_):                                                                     \
        micro_exp<S, R_, NV_>(K, a, as, b, bk, c, cm, m + n0, sum + n0, f, oscale); \
        break
            switch (r * 8 + nv) {
                QKV_MK(1, 1); QKV_MK(1, 2); QKV_MK(1, 3); QKV_MK(1, 4);
                QKV_MK(2, 1); QKV_MK(2, 2); QKV_MK(2, 3); QKV_MK(2, 4);
                QKV_MK(3, 1); QKV_MK(3, 2); QKV_MK(3, 3); QKV_MK(3, 4);
                QKV_MK(4, 1); QKV_MK(4, 2); QKV_MK(4, 3); QKV_MK(4, 4);
                QKV_MK(5, 1); QKV_MK(5, 2); QKV_MK(5, 3); QKV_MK(5, 4);
                QKV_MK(6, 1); QKV_MK(6, 2); QKV_MK(6, 3); QKV_MK(6, 4);
                default: QKV_ASSERT(false);
            }
#undef QKV_MK
        }
    }
}

/// dst[c * ld + r] = scale * src[r * ss + c] for r < rows, c < cols, and 0 for rows <= r < lanes:
/// packs a block of Q or dO rows as the lane-major B operand of the score GEMMs, by 8 x 8 register
/// transposes (a strided scalar loop cost ~12% of the forward at N = 128).
template <class S>
void pack_transposed(float* dst, int64_t ld, const float* src, int64_t ss, int64_t rows,
                     int64_t lanes, int64_t cols, float scale) {
    int64_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8)
            S::transpose8(src + r0 * ss + c0, ss, dst + c0 * ld + r0, ld, scale);
        for (int64_t r = r0; r < r0 + 8; ++r)
            for (int64_t c = c0; c < cols; ++c) dst[c * ld + r] = scale * src[r * ss + c];
    }
    for (int64_t r = r0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = scale * src[r * ss + c];
    for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = rows; r < lanes; ++r) dst[c * ld + r] = 0.0f;
}

/// Dropout factor tile: t[j * ld + i] = Z(i, j0 + j) for j < nk, i < nq, and 0 for nq <= i < lanes,
/// with Z = keepval when kept and 0 when dropped; element (i, j) uses Philox counter
/// index0 + i * Tk + j0 + j (params.h: attention_dropout_threshold). 8 Philox blocks (32
/// counters) per call of S::philox8.
template <class S>
void dropout_tile(float* t, int64_t ld, int64_t nk, int64_t lanes, int64_t nq, uint64_t seed,
                  uint64_t index0, int64_t Tk, int64_t j0, uint32_t thr, float keepval) {
    uint32_t w[4][8];
    for (int64_t i = 0; i < lanes; ++i) {
        if (i >= nq) {
            for (int64_t j = 0; j < nk; ++j) t[j * ld + i] = 0.0f;
            continue;
        }
        const uint64_t first = index0 + uint64_t(i * Tk + j0), last = first + uint64_t(nk);
        for (uint64_t blk = first >> 2; blk <= (last - 1) >> 2; blk += 8) {
            S::philox8(blk, seed, w);
            for (uint64_t l = 0; l < 8; ++l)
                for (uint64_t k = 0; k < 4; ++k) {
                    const uint64_t c = 4 * (blk + l) + k;
                    if (c >= first && c < last)
                        t[(c - first) * uint64_t(ld) + uint64_t(i)] = (w[k][l] >> 8) >= thr ? keepval : 0.0f;
                }
        }
    }
}

/// t[0, n) rounded to bf16 in place (AttentionParams::bf16); n a multiple of W.
template <class S>
void round_tile_bf16(float* t, int64_t n) {
    for (int64_t e = 0; e < n; e += S::W) S::store(t + e, S::round_bf16(S::load(t + e)));
}

/// t[0, n) = scale * bf16(t) in place: a packed Q^T (dO^T: scale 1) block with its operand rounded
/// before the softmax scale folds in, as a bf16 kernel scales in fp32; n a multiple of W.
template <class S>
void round_scale_tile_bf16(float* t, int64_t n, float scale) {
    const auto k = S::set1(scale);
    for (int64_t e = 0; e < n; e += S::W) S::store(t + e, S::mul(k, S::round_bf16(S::load(t + e))));
}

/// dst[r * cols + c] = bf16(src[r * ld + c]) for r < rows, c < cols: a K, V, Q or dO block as the
/// dense bf16-valued operand the products read under AttentionParams::bf16.
template <class S>
void round_rows_bf16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
    constexpr int W = S::W;
    const auto tail = S::tail(int(cols % W));
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = src + r * ld;
        float*       d = dst + r * cols;
        int64_t      c = 0;
        for (; c + W <= cols; c += W) S::store(d + c, S::round_bf16(S::load(a + c)));
        if (c < cols) S::storem(d + c, S::round_bf16(S::loadm(a + c, tail)), tail);
    }
}

/// The softmax scale of the word GEMMs as pow2 · m with pow2 a power of two and m in [1, 2): pow2
/// is folded into the packed bf16(q) exactly (bf16(pow2 · q) = pow2 · bf16(q)), m multiplies the
/// fp32 sums, so the partial sums stay within a factor of 2 of the rounded_fp32 build's (which
/// folds all of the scale into q) and do not overflow where its scores do not. m = 1 (no
/// multiply) when the scale is a power of two (D = 64: 1/8).
struct ScaleSplit {
    float pow2 = 1.0f, m = 1.0f;
};
inline ScaleSplit split_scale(float scale) {
    if (!(scale > 0.0f) || !std::isfinite(scale)) return {1.0f, scale};
    int         e = 0;
    const float f = std::frexp(scale, &e);  // scale = f · 2^e, f in [0.5, 1)
    return {std::ldexp(1.0f, e - 1), 2.0f * f};
}

/// Word operands of the kDot build (SimdAvx512Dot). dst[pr * dld + c] = the word (bf16(r0[c]),
/// bf16(r1[c])) of source rows r0 = 2 pr, r1 = 2 pr + 1 (0 past `rows`) for c < cols, and 0 for
/// cols <= c < colsp (a multiple of W): rows of a Q^T or P^T tile (the reduction runs down the
/// rows) or of a V block. Returns whether a word holds ±inf or NaN.
template <class S>
bool pack_row_pairs(uint32_t* dst, int64_t dld, const float* src, int64_t sld, int64_t rows, int64_t cols,
                    int64_t colsp) {
    constexpr int W = S::W;
    const auto tail = S::tail(int(cols % W));
    bool       bad  = false;
    for (int64_t pr = 0; pr < (rows + 1) / 2; ++pr) {
        const float* r0 = src + 2 * pr * sld;
        const float* r1 = 2 * pr + 1 < rows ? r0 + sld : nullptr;
        uint32_t*    d  = dst + pr * dld;
        for (int64_t c = 0; c < colsp; c += W) {
            typename S::V x0 = S::zero(), x1 = S::zero();
            if (c + W <= cols) {
                x0 = S::load(r0 + c);
                if (r1) x1 = S::load(r1 + c);
            } else if (c < cols) {
                x0 = S::loadm(r0 + c, tail);
                if (r1) x1 = S::loadm(r1 + c, tail);
            }
            const auto w = S::pair(x0, x1);
            bad          = bad || S::any_nonfinite(w);
            S::storew(d + c, w);
        }
    }
    return bad;
}

/// dst[r * dld + c] = bf16(src[r * sld + c]) as 16-bit values for c < cols, and 0 at c = cols when
/// cols is odd: K rows as words along D (the A operand of the score GEMMs); dld even.
template <class S>
void pack_rows_bf16(uint16_t* dst, int64_t dld, const float* src, int64_t sld, int64_t rows, int64_t cols) {
    constexpr int W = S::W;
    const auto full = S::tail(W), tail = S::tail(int(cols % W));
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = src + r * sld;
        uint16_t*    d = dst + r * dld;
        int64_t      c = 0;
        for (; c + W <= cols; c += W) S::store_bf16(d + c, S::load(a + c), full);
        // the masked load gives 0 in the pad lane of an odd row, which the store includes
        if (c < cols) S::store_bf16(d + c, S::loadm(a + c, tail), S::tail(int(cols % W + cols % 2)));
    }
}

// ---------------------------------------------------------------------------------------------
// Masks on a transposed score tile t[j * Bq + i] (nk keys x Bq query lanes, keys j0 + j).

/// Per-lane key ranges of query block [i0, i0 + nq): lim[i] = last visible key (float, exact
/// below 2^24), -1 for padding lanes; kfirst[i] = first visible key (the sliding window's left
/// edge, else 0). Returns the min/max limit over the real lanes and the min/max first key over
/// the real lanes that see a key (fmin = Tk when none does).
struct KeyRange {
    int64_t kmin, kmax, fmin, fmax;
};
template <class S>
KeyRange key_limits(const AttentionParams<float>& p, int64_t b, int64_t i0, int64_t nq, int64_t Bq,
                    float* lim, float* kfirst) {
    KeyRange r{p.Tk, -1, p.Tk, 0};
    for (int64_t i = 0; i < Bq; ++i) {
        const int64_t l = i < nq ? attention_key_limit(p, b, i0 + i) : -1;
        const int64_t f = l >= 0 ? attention_key_first(p, i0 + i) : 0;
        lim[i]          = float(l);
        kfirst[i]       = float(f);
        if (i < nq) r.kmin = min64(r.kmin, l), r.kmax = max64(r.kmax, l);
        if (l >= 0) r.fmin = min64(r.fmin, f), r.fmax = max64(r.fmax, f);
    }
    return r;
}

/// -inf where key j0 + j < kfirst[i] (the sliding window's left edge).
template <class S, int64_t Bq>
void apply_key_first(float* t, int64_t nk, int64_t j0, const float* kfirst) {
    constexpr int64_t NQV = Bq / S::W;
    typename S::V     f[NQV];
    for (int64_t v = 0; v < NQV; ++v) f[v] = S::load(kfirst + v * S::W);
    for (int64_t j = 0; j < nk; ++j) {
        const auto jv  = S::set1(float(j0 + j));
        float*     row = t + j * Bq;
        for (int64_t v = 0; v < NQV; ++v)
            S::store(row + v * S::W, S::mask_gt(S::load(row + v * S::W), f[v], jv));
    }
}

/// -inf where key j0 + j > lim[i] (causal and valid_lens, derived from indices).
template <class S, int64_t Bq>
void apply_key_limits(float* t, int64_t nk, int64_t j0, const float* lim) {
    constexpr int64_t NQV = Bq / S::W;
    typename S::V     l[NQV];
    for (int64_t v = 0; v < NQV; ++v) l[v] = S::load(lim + v * S::W);
    for (int64_t j = 0; j < nk; ++j) {
        const auto jv  = S::set1(float(j0 + j));
        float*     row = t + j * Bq;
        for (int64_t v = 0; v < NQV; ++v)
            S::store(row + v * S::W, S::mask_gt(S::load(row + v * S::W), jv, l[v]));
    }
}

/// Soft cap and ALiBi (params.h) on a transposed score tile of head h (keys j0 + j, query lanes
/// i0 + i). With a soft cap, dcap (when non-null) receives d cap(x)/dx = 1 - tanh^2 per element
/// (1 in padding lanes). Scalar: score modifiers take the masked two-pass path.
template <int64_t Bq>
void apply_score_mods(const AttentionParams<float>& p, float* t, float* dcap, int64_t nk, int64_t nq, int64_t h,
                      int64_t i0, int64_t j0) {
    const float cap   = p.softcap;
    const float slope = p.alibi_slopes ? p.alibi_slopes[h] : 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
        float* row = t + j * Bq;
        for (int64_t i = 0; i < nq; ++i) {
            float x = row[i];
            if (cap > 0.0f) {
                const float th = std::tanh(x / cap);
                x              = cap * th;
                if (dcap) dcap[j * Bq + i] = 1.0f - th * th;
            }
            if (p.alibi_slopes) {
                const int64_t d = i0 + i + p.Tk - p.Tq - (j0 + j);
                x -= slope * float(d < 0 ? -d : d);
            }
            row[i] = x;
        }
        if (dcap)
            for (int64_t i = nq; i < Bq; ++i) dcap[j * Bq + i] = 1.0f;
    }
}

/// Bool (0 = masked) and additive masks of (b, h), queries i0.., keys j0.., through strides.
template <class S, int64_t Bq>
void apply_general_mask(const AttentionParams<float>& p, float* t, int64_t nk, int64_t nq,
                        int64_t b, int64_t h, int64_t i0, int64_t j0) {
    const int64_t base = b * p.m_stride_b + h * p.m_stride_h + i0 * p.m_stride_q + j0 * p.m_stride_k;
    const int64_t sq = p.m_stride_q, sk = p.m_stride_k;
    for (int64_t j = 0; j < nk; ++j) {
        float* row = t + j * Bq;
        const int64_t mj = base + j * sk;
        if (p.bool_mask) {
            const uint8_t* bm = p.bool_mask + mj;
            for (int64_t i = 0; i < nq; ++i)
                if (bm[i * sq] == 0) row[i] = -INFINITY;
        }
        if (p.additive_mask) {
            const float* am = p.additive_mask + mj;
            // -inf replaces the score rather than adding to it: a NaN score of a hidden key (a
            // NaN or infinity stored in its row) must not survive the mask.
            if (sq == 0) {  // key-padding masks: one value per key
                const auto a = S::set1(am[0]);
                for (int64_t v = 0; v < Bq / S::W; ++v)
                    S::store(row + v * S::W, am[0] == -INFINITY ? a : S::add(S::load(row + v * S::W), a));
            } else {
                for (int64_t i = 0; i < nq; ++i) row[i] = am[i * sq] == -INFINITY ? -INFINITY : row[i] + am[i * sq];
            }
        }
    }
}

/// Whether rows [0, n) of x (row stride ld, `cols` floats each) hold a NaN or an infinity (exponent
/// bits all ones). One pass; only masked blocks ask, so that hidden rows are never read as 0 · NaN.
inline bool has_nonfinite(const float* x, int64_t n, int64_t cols, int64_t ld) {
    uint32_t any = 0;
    for (int64_t r = 0; r < n; ++r) {
        const float* row = x + r * ld;
        for (int64_t c = 0; c < cols; ++c) {
            uint32_t u;
            std::memcpy(&u, row + c, 4);
            any |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
        }
    }
    return any != 0;
}

/// o[i] = (alpha[i] o[i] when rescale) + sum over the keys j with P_ij != 0 of P_ij v_j: the P.V
/// product of a masked block whose V rows hold a non-finite value, reading only the rows each
/// query sees (o (nq, Dvp), P transposed (nk, Bq), v rows ld apart).
template <int64_t Bq>
void pv_skipping_zeros(float* o, int64_t Dvp, const float* pt, const float* v, int64_t ld, int64_t nq, int64_t nk,
                       int64_t Dv, const float* alpha, bool rescale) {
    for (int64_t i = 0; i < nq; ++i) {
        float* oi = o + i * Dvp;
        if (rescale)
            for (int64_t e = 0; e < Dv; ++e) oi[e] *= alpha[i];
        for (int64_t j = 0; j < nk; ++j) {
            const float w = pt[j * Bq + i];
            if (w == 0.0f) continue;
            for (int64_t e = 0; e < Dv; ++e) oi[e] += w * v[j * ld + e];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pieces of a forward query block shared by forward_block and forward_block_amx.

/// out 0, lse -inf (lse_lo 0) for the nq rows of a query block that sees no key.
inline void write_fully_masked_rows(const AttentionParams<float>& p, float* out0, float* lse0, int64_t b, int64_t h,
                                    int64_t i0, int64_t nq) {
    for (int64_t i = 0; i < nq; ++i) {
        for (int64_t e = 0; e < p.Dv; ++e) out0[i * p.o_stride_t + e] = 0.0f;
        if (lse0) lse0[i] = -INFINITY;
        if (p.lse_lo) p.lse_lo[(b * p.H + h) * p.Tq + i0 + i] = 0.0f;
    }
}

/// A masked score tile st (nk keys x Bq lanes, keys j0..) through the score modifiers and masks,
/// then the online softmax, lane-wise: m' = max(m, max_j s), alpha = e^(m - m'), P = e^(s - m')
/// (in st), l' = alpha l + sum_j P. A lane whose max is still -inf uses 0 as its shift (P = 0).
template <class S, int64_t Bq>
void masked_online_softmax(const AttentionParams<float>& p, float* st, int64_t nk, int64_t nq, int64_t b, int64_t h,
                           int64_t i0, int64_t j0, int64_t kmin, int64_t fmax, const float* lim, const float* kfirst,
                           float* m, float* alpha, float* l) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t NQV  = Bq / W;
    if (p.softcap > 0.0f || p.alibi_slopes) apply_score_mods<Bq>(p, st, nullptr, nk, nq, h, i0, j0);
    if (j0 + nk - 1 > kmin) apply_key_limits<S, Bq>(st, nk, j0, lim);
    if (j0 < fmax) apply_key_first<S, Bq>(st, nk, j0, kfirst);
    if (p.bool_mask || p.additive_mask) apply_general_mask<S, Bq>(p, st, nk, nq, b, h, i0, j0);
    V mx[NQV], ms[NQV], sum[NQV];
    for (int64_t v = 0; v < NQV; ++v) mx[v] = S::load(m + v * W), sum[v] = S::zero();
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) mx[v] = S::max(mx[v], S::load(st + j * Bq + v * W));
    for (int64_t v = 0; v < NQV; ++v) {
        ms[v] = S::neginf_to_zero(mx[v]);
        S::store(alpha + v * W, S::exp(S::sub(S::load(m + v * W), ms[v])));
        S::store(m + v * W, mx[v]);
    }
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) {
            float*  s = st + j * Bq + v * W;
            const V e = S::exp(S::sub(S::load(s), ms[v]));
            S::store(s, e);
            sum[v] = S::add(sum[v], e);
        }
    for (int64_t v = 0; v < NQV; ++v)
        S::store(l + v * W, S::fmadd(S::load(l + v * W), S::load(alpha + v * W), sum[v]));
}

/// A row's logsumexp from its shift m and sum l: lse = m + log l in double, as a float pair
/// hi + lo (the lazy shift m can sit up to ~14 below the maximum, so log l is not small next to m
/// and a float Fast2Sum would not be exact); -inf (lo 0) for a fully masked row (l = 0). Writes
/// *lse and *lo where non-null; returns 1/l times `keep` (0 when l = 0), the row's output factor.
inline float finish_row(float m, float l, float keep, float* lse, float* lo) {
    const double ls = l > 0.0f ? double(m) + std::log(double(l)) : 0.0;
    const float  hi = l > 0.0f ? float(ls) : -INFINITY;
    if (lse) *lse = hi;
    if (lo) *lo = l > 0.0f ? float(ls - double(hi)) : 0.0f;
    return l > 0.0f ? keep / l : 0.0f;
}

/// The dropout keep factor 1/(1-p) applied with 1/l (0 when p = 1, 1 without dropout).
inline float dropout_keep_factor(float p) { return p > 0.0f ? (p < 1.0f ? 1.0f / (1.0f - p) : 0.0f) : 1.0f; }

/// t[0, n) *= k (n a multiple of W; nothing when k = 1): the fp32 part of a split softmax scale.
template <class S>
void scale_tile(float* t, int64_t n, float k) {
    if (k == 1.0f) return;
    const auto kv = S::set1(k);
    for (int64_t e = 0; e < n; e += S::W) S::store(t + e, S::mul(kv, S::load(t + e)));
}

// ---------------------------------------------------------------------------------------------
// Forward. One work item = (b, h, query block); see the docs for the online softmax.

template <class S, int64_t BQ = S::kBlockQ>
struct FwdLayout {
    static constexpr int64_t Bq = BQ, Bk = S::kBlockK;
    int64_t qt, st, kt, o, m, l, alpha, lim, kfirst, psum, kr, vr, qw, kw, pw, vw, total;  // float offsets into the workspace
    FwdLayout(const AttentionParams<float>& p) {
        const int64_t Dvp = round_up(p.Dv, S::W);
        int64_t       at  = 0;
        auto take = [&](int64_t n) {
            const int64_t r = at;
            at += round_up(n, 16);
            return r;
        };
        qt = take(p.D * Bq), st = take(Bk * Bq), kt = take(p.dropout_p > 0 ? Bk * Bq : 0),
        o = take(Bq * Dvp), m = take(Bq), l = take(Bq), alpha = take(Bq), lim = take(Bq),
        kfirst = take(Bq), psum = take(Bq);
        kr = take(p.bf16 ? Bk * p.D : 0), vr = take(p.bf16 ? Bk * p.Dv : 0);  // bf16 K and V blocks
        // kDot: word operands (2 bf16 per float slot) of Q^T, the K block, P^T and the V block
        const int64_t Dw = kDot<S> ? (p.D + 1) / 2 : 0, Bkw = kDot<S> ? Bk / 2 : 0;
        qw = take(Dw * Bq), kw = take(Bk * Dw), pw = take(Bkw * Bq), vw = take(Bkw * Dvp);
        total = at;
    }
};

template <class S, int64_t BQ>
void forward_block(const AttentionParams<float>& p, const FwdLayout<S, BQ>& L, float* ws, int64_t b,
                   int64_t h, int64_t qb) {
    using V                    = typename S::V;
    constexpr int     W        = S::W;
    constexpr int64_t Bq       = BQ, Bk = FwdLayout<S, BQ>::Bk, NQV = Bq / W;
    const int64_t     Dvp      = round_up(p.Dv, W);
    const int64_t     i0       = qb * Bq, nq = min64(Bq, p.Tq - i0);
    const int64_t     hk       = h / (p.H / p.Hkv);
    float *qt = ws + L.qt, *st = ws + L.st, *kt = ws + L.kt, *o = ws + L.o, *m = ws + L.m,
          *l = ws + L.l, *alpha = ws + L.alpha, *lim = ws + L.lim, *kfirst = ws + L.kfirst, *psum = ws + L.psum;
    float*       out0 = p.out + b * p.o_stride_b + h * p.o_stride_h + i0 * p.o_stride_t;
    float*       lse0 = p.lse ? p.lse + (b * p.H + h) * p.Tq + i0 : nullptr;  // optional
    const float* q0   = p.q + b * p.q_stride_b + h * p.q_stride_h + i0 * p.q_stride_t;
    const float* kbase = p.k + b * p.k_stride_b + hk * p.k_stride_h;
    const float* vbase = p.v + b * p.v_stride_b + hk * p.v_stride_h;
    const auto   dtail = S::tail(int(p.Dv - (Dvp - W)));

    const auto [kmin, kmax, fmin, fmax] = key_limits<S>(p, b, i0, nq, Bq, lim, kfirst);
    if (kmax < 0) return write_fully_masked_rows(p, out0, lse0, b, h, i0, nq);  // every row fully masked
    // Q^T block with the softmax scale folded in: qt[d * Bq + i] = scale * q[i][d]; pads 0.
    // kDot: the word GEMMs read Q^T as bf16(q) words (Dw x Bq) and K rows as words (Bk x Dw); the
    // scale multiplies their fp32 sums.
    constexpr bool dot = kDot<S>;
    const int64_t  Dw  = (p.D + 1) / 2;
    uint32_t *     qw = reinterpret_cast<uint32_t*>(ws + L.qw), *kw = reinterpret_cast<uint32_t*>(ws + L.kw),
             *pw = reinterpret_cast<uint32_t*>(ws + L.pw), *vw = reinterpret_cast<uint32_t*>(ws + L.vw);
    [[maybe_unused]] const ScaleSplit sc = split_scale(p.scale);
    if constexpr (dot) {
        QKV_DASSERT(p.bf16);
        pack_transposed<S>(qt, Bq, q0, p.q_stride_t, nq, Bq, p.D, sc.pow2);
        pack_row_pairs<S>(qw, Bq, qt, Bq, p.D, Bq, Bq);
    } else if (p.bf16) {  // bf16(q), then the scale
        pack_transposed<S>(qt, Bq, q0, p.q_stride_t, nq, Bq, p.D, 1.0f);
        round_scale_tile_bf16<S>(qt, p.D * Bq, p.scale);
    } else {
        pack_transposed<S>(qt, Bq, q0, p.q_stride_t, nq, Bq, p.D, p.scale);
    }
    for (int64_t i = 0; i < Bq; ++i) m[i] = -INFINITY, l[i] = 0.0f;
    for (int64_t t = 0; t < nq * Dvp; ++t) o[t] = 0.0f;

    const bool     mods     = p.softcap > 0.0f || p.alibi_slopes;
    const bool     general  = p.bool_mask || p.additive_mask || mods;
    const bool     dropout  = p.dropout_p > 0.0f;
    const uint32_t thr      = attention_dropout_threshold(p.dropout_p);
    const uint64_t drop_row0 = p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i0) * p.Tk);
    // Keys [fmin, kmax] are all any row sees: a sliding window costs N·window, not N².
    const int64_t  kend     = kmax + 1;
    for (int64_t j0 = fmin; j0 < kend; j0 += Bk) {
        const int64_t nk      = min64(Bk, kend - j0);
        const float*  kj      = kbase + j0 * p.k_stride_t;
        int64_t       ks      = p.k_stride_t;
        if constexpr (dot) {
            pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(kw), 2 * Dw, kj, p.k_stride_t, nk, p.D);
        } else if (p.bf16) {  // the block's keys as bf16 values, dense
            round_rows_bf16<S>(ws + L.kr, kj, nk, p.D, p.k_stride_t);
            kj = ws + L.kr, ks = p.D;
        }
        bool          classic = general || j0 + nk - 1 > kmin || j0 < fmax;  // a block with masked scores
        bool          rescale = true;
        if (!classic) {
            // Unmasked block: the score tiles leave their registers as P = e^(s - m) with the
            // current shifts m (lazy rescaling: m only moves when the block's maximum exceeds it
            // by more than kShiftSlack, so P <= e^kShiftSlack and O needs no rescale). Saves
            // the passes that store S, find the row max and reload S for the exp.
            for (int64_t v = 0; v < NQV; ++v) S::store(psum + v * W, S::zero());
            if constexpr (dot) gemm_exp<S>(nk, Bq, Dw, kw, Dw, qw, Bq, st, Bq, m, psum, sc.m);
            else gemm_exp<S>(nk, Bq, p.D, kj, ks, qt, Bq, st, Bq, m, psum);
            bool over = false;
            for (int64_t v = 0; v < NQV; ++v)
                over = over || !S::all_le(S::load(psum + v * W), S::set1(kBlockSumLimit));
            if (!over) {
                for (int64_t v = 0; v < NQV; ++v)
                    S::store(l + v * W, S::add(S::load(l + v * W), S::load(psum + v * W)));
                rescale = false;
            } else {
                classic = true;  // rare: recompute S and take the new maximum as the shift
            }
        }
        if (classic) {
            // S^T = K_j Q^T (nk x Bq), reduction over D.
            if constexpr (dot) gemm<S, kStore, false, false>(nk, Bq, Dw, kw, Dw, qw, Bq, st, Bq, nullptr, sc.m);
            else gemm<S, kStore, false, false>(nk, Bq, p.D, kj, ks, qt, Bq, st, Bq);
            masked_online_softmax<S, Bq>(p, st, nk, nq, b, h, i0, j0, kmin, fmax, lim, kfirst, m, alpha, l);
        }
        if (dropout) {  // P <- P * keep (0/1); 1/(1-p) is applied with 1/l at the end
            dropout_tile<S>(kt, Bq, nk, Bq, nq, p.dropout_seed, drop_row0, p.Tk, j0, thr, 1.0f);
            for (int64_t t = 0; t < nk * Bq; t += W)
                S::store(st + t, S::mul(S::load(st + t), S::load(kt + t)));
        }
        // O = diag(alpha) O + P^T-tile . V_j: rows i, lanes over Dv, reduction over the nk keys.
        const float* vj = vbase + j0 * p.v_stride_t;
        int64_t      vs = p.v_stride_t;
        if constexpr (dot) {  // P^T and V_j as words along the keys (bf16 P; l summed the fp32 P)
            pack_row_pairs<S>(pw, Bq, st, Bq, nk, Bq, Bq);
            const bool bad = pack_row_pairs<S>(vw, Dvp, vj, vs, nk, p.Dv, Dvp);
            if (!(classic && bad)) {
                if (rescale) gemm<S, kScaleAcc, true>(nq, p.Dv, (nk + 1) / 2, pw, Bq, vw, Dvp, o, Dvp, alpha);
                else gemm<S, kAcc, true>(nq, p.Dv, (nk + 1) / 2, pw, Bq, vw, Dvp, o, Dvp);
                continue;
            }
            // a masked block whose V holds ±inf or NaN: P = 0 must skip those rows (as below)
        }
        // bf16 compute: P enters P·V as bf16; l above summed the fp32 P, as tile kernels do.
        if (p.bf16) round_tile_bf16<S>(st, nk * Bq);
        if (p.bf16) {
            round_rows_bf16<S>(ws + L.vr, vj, nk, p.Dv, p.v_stride_t);
            vj = ws + L.vr, vs = p.Dv;
        }
        if (classic && has_nonfinite(vj, nk, p.Dv, vs))
            pv_skipping_zeros<Bq>(o, Dvp, st, vj, vs, nq, nk, p.Dv, alpha, rescale);
        else if (rescale) gemm<S, kScaleAcc, true>(nq, p.Dv, nk, st, Bq, vj, vs, o, Dvp, alpha);
        else gemm<S, kAcc, true>(nq, p.Dv, nk, st, Bq, vj, vs, o, Dvp);
    }
    // out = O / l (times 1/(1-p)); fully masked rows (l = 0) give 0 and lse = -inf.
    const float keep = dropout_keep_factor(p.dropout_p);
    float* lo0 = p.lse_lo ? p.lse_lo + (b * p.H + h) * p.Tq + i0 : nullptr;
    for (int64_t i = 0; i < nq; ++i) {
        const float inv = finish_row(m[i], l[i], keep, lse0 ? lse0 + i : nullptr, lo0 ? lo0 + i : nullptr);
        if (p.Dv == 0) continue;
        float*       dst = out0 + i * p.o_stride_t;
        const float* src = o + i * Dvp;
        const V      iv  = S::set1(inv);
        for (int64_t e = 0; e < Dvp - W; e += W) S::store(dst + e, S::mul(S::load(src + e), iv));
        S::storem(dst + Dvp - W, S::mul(S::load(src + Dvp - W), iv), dtail);
    }
}

template <class S, int64_t BQ>
void forward_with(const AttentionParams<float>& p) {
    QKV_ASSERT(p.Tq < (int64_t(1) << 24) && p.Tk < (int64_t(1) << 24));
    const FwdLayout<S, BQ> L(p);
    const int64_t      nqb   = (p.Tq + L.Bq - 1) / L.Bq;
    const int64_t      items = p.B * p.H * nqb;
#pragma omp parallel
    {
        float* ws = detail::flash_thread_workspace(L.total);
        // Dynamic schedule, last query blocks first: with causal masks they are the most work.
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) {
            const int64_t t  = items - 1 - it;
            const int64_t qb = t % nqb, bh = t / nqb;
            forward_block<S, BQ>(p, L, ws, bh / p.H, bh % p.H, qb);
        }
    }
}

/// Query blocks of kBlockQ rows, or of one vector (W rows) when Tq <= W: incremental decoding
/// asks one query per (b, h), and a 64-lane block would spend 64x the score and softmax work
/// on padding lanes. Each lane's arithmetic is the same either way (lanes are independent).
template <class S>
void forward(const AttentionParams<float>& p) {
    if (p.Tq <= S::W && S::W < S::kBlockQ) return forward_with<S, S::W>(p);
    forward_with<S, S::kBlockQ>(p);
}

#if defined(__AVX512BF16__)
// ---------------------------------------------------------------------------------------------
// AMX forward (Bf16AttentionPath::amx; docs §10). The score and P.V products run on tiles
// (amx_tiles.h: T = TilesHw or TilesEmu), the online softmax, masks and dropout on the vector
// units exactly as forward_block. Tiles need a row-major bf16 A operand (words along the
// reduction) and a VNNI B operand (word rows), so:
//   S^T (keys x queries) = K_j . Q^T:   A = bf16 K rows, B = the Q^T words of pack_row_pairs;
//   O^T (Dv x queries) += V_j^T . P^T:  A = bf16 V^T rows, B = the P^T words of pack_row_pairs,
// with O kept transposed (the rescale by alpha runs along the query lanes) and transposed once at
// the end. K and V^T of every (batch, kv head) are packed once per call (pack_heads_amx), zero
// padded, and read by every query block.

/// C (M x N fp32, ldc bytes) (op)= A (M x 2 Kw bf16, lda bytes) . B (Kw word rows x N words, ldb
/// bytes), op = + when acc else =; M, N and Kw multiples of 16, operands zero padded by the
/// caller. 2 x 2 C tiles (tmm0-3) per step, A in tmm4-5, B in tmm6-7.
template <class T, int MT, int NT>
inline void tile_block(int64_t Kw, const char* A, int64_t lda, const char* B, int64_t ldb, char* C, int64_t ldc,
                       bool acc) {
    if (acc) {
        T::template load<0>(C, ldc);
        if constexpr (NT > 1) T::template load<1>(C + 64, ldc);
        if constexpr (MT > 1) T::template load<2>(C + 16 * ldc, ldc);
        if constexpr (MT > 1 && NT > 1) T::template load<3>(C + 16 * ldc + 64, ldc);
    } else {
        T::template zero<0>();
        if constexpr (NT > 1) T::template zero<1>();
        if constexpr (MT > 1) T::template zero<2>();
        if constexpr (MT > 1 && NT > 1) T::template zero<3>();
    }
    for (int64_t k = 0; k < Kw; k += 16) {
        T::template load<4>(A + 4 * k, lda);
        if constexpr (MT > 1) T::template load<5>(A + 16 * lda + 4 * k, lda);
        T::template load<6>(B + k * ldb, ldb);
        if constexpr (NT > 1) T::template load<7>(B + k * ldb + 64, ldb);
        T::template dp<0, 4, 6>();
        if constexpr (NT > 1) T::template dp<1, 4, 7>();
        if constexpr (MT > 1) T::template dp<2, 5, 6>();
        if constexpr (MT > 1 && NT > 1) T::template dp<3, 5, 7>();
    }
    T::loads_done();
    T::template store<0>(C, ldc);
    if constexpr (NT > 1) T::template store<1>(C + 64, ldc);
    if constexpr (MT > 1) T::template store<2>(C + 16 * ldc, ldc);
    if constexpr (MT > 1 && NT > 1) T::template store<3>(C + 16 * ldc + 64, ldc);
}

template <class T>
void tile_gemm(int64_t M, int64_t N, int64_t Kw, const uint16_t* A, int64_t lda, const uint32_t* B, int64_t ldb,
               float* C, int64_t ldc, bool acc) {
    QKV_DASSERT(M % 16 == 0 && N % 16 == 0 && Kw % 16 == 0);
    const char* a = reinterpret_cast<const char*>(A);
    const char* b = reinterpret_cast<const char*>(B);
    char*       c = reinterpret_cast<char*>(C);
    for (int64_t m0 = 0; m0 < M; m0 += 32) {
        const bool m2 = M - m0 >= 32;
        for (int64_t n0 = 0; n0 < N; n0 += 32) {
            const bool  n2 = N - n0 >= 32;
            const char* am = a + m0 * lda;
            const char* bn = b + 4 * n0;
            char*       cm = c + m0 * ldc + 4 * n0;
            if (m2 && n2) tile_block<T, 2, 2>(Kw, am, lda, bn, ldb, cm, ldc, acc);
            else if (m2) tile_block<T, 2, 1>(Kw, am, lda, bn, ldb, cm, ldc, acc);
            else if (n2) tile_block<T, 1, 2>(Kw, am, lda, bn, ldb, cm, ldc, acc);
            else tile_block<T, 1, 1>(Kw, am, lda, bn, ldb, cm, ldc, acc);
        }
    }
}

/// K and V^T of every (batch, kv head) as bf16, zero padded for the tiles: K rows of 2 Dwp values
/// (Dwp = D in words rounded up to 16), Tkp of them (keys past Tk are 0); V^T rows of Tkp values
/// (Dvq = Dv rounded up to 16 of them). Tkp >= Tk + 32 covers the widest tile read past a block;
/// a multiple of 32 so pack_transposed_pairs32 writes whole 16 x 16 word blocks.
struct AmxHeads {
    int64_t   Tkp, Dwp, Dvq, per_head;
    uint16_t* data = nullptr;
    explicit AmxHeads(const AttentionParams<float>& p)
        : Tkp(round_up(p.Tk + 32, 32)), Dwp(round_up((p.D + 1) / 2, 16)), Dvq(round_up(p.Dv, 16)),
          per_head(Tkp * 2 * Dwp + Dvq * Tkp) {}
    const uint16_t* k(int64_t bh) const { return data + bh * per_head; }
    const uint16_t* vt(int64_t bh) const { return data + bh * per_head + Tkp * 2 * Dwp; }
};

/// dst[c * ds + jp] (words) = the word (bf16(x[2 jp][c]), bf16(x[2 jp + 1][c])) of rows x[j] =
/// src + (j0 + j) * ss, for jp in [0, 16) and c in [0, cols_p) (cols_p a multiple of 16): rows at
/// or past `rows` and columns at or past `cols` give 0. The transposed pair pack of 32 keys (V^T,
/// K^T for the tiles) by 16 x 16 word transposes. Returns whether a word holds ±inf or NaN.
template <class S>
bool pack_transposed_pairs32(uint32_t* dst, int64_t ds, const float* src, int64_t ss, int64_t rows, int64_t cols,
                             int64_t cols_p) {
    alignas(64) uint32_t blk[16 * 16];
    bool                 bad = false;
    for (int64_t c = 0; c < cols_p; c += 16) {
        const auto m = S::tail(int(min64(16, max64(0, cols - c))));
        for (int64_t r = 0; r < 16; ++r) {
            typename S::V x0 = S::zero(), x1 = S::zero();
            if (2 * r < rows && c < cols) x0 = S::loadm(src + 2 * r * ss + c, m);
            if (2 * r + 1 < rows && c < cols) x1 = S::loadm(src + (2 * r + 1) * ss + c, m);
            const auto w = S::pair(x0, x1);
            bad          = bad || S::any_nonfinite(w);
            S::storew(blk + 16 * r, w);
        }
        S::transpose16(blk, 16, dst + c * ds, ds);
    }
    return bad;
}

/// Packs AmxHeads (parallel over heads and key chunks). Returns whether some K or V value is ±inf or
/// NaN as bf16: a tile product reads keys outside the visible ones with P = 0 (0 . inf = NaN), so
/// such inputs take the dot build, which never reads hidden rows.
template <class S>
bool pack_heads_amx(const AttentionParams<float>& p, const AmxHeads& hp) {
    constexpr int64_t kRows = 256;
    const int64_t     nch   = (hp.Tkp + kRows - 1) / kRows, heads = p.B * p.Hkv;
    uint32_t          bad   = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (heads * hp.per_head > (1 << 16))
    for (int64_t t = 0; t < heads * nch; ++t) {
        const int64_t bh = t / nch, j0 = t % nch * kRows, j1 = min64(hp.Tkp, j0 + kRows);
        if (j0 >= j1) continue;
        const int64_t b = bh / p.Hkv, hk = bh % p.Hkv;
        uint16_t*     kp = const_cast<uint16_t*>(hp.k(bh));
        auto*         vt = reinterpret_cast<uint32_t*>(const_cast<uint16_t*>(hp.vt(bh)));
        for (int64_t j = j0; j < j1; ++j) {
            uint16_t*     kr  = kp + j * 2 * hp.Dwp;
            const int64_t pad = j < p.Tk ? p.D + p.D % 2 : 0;  // pack_rows_bf16 writes [0, pad)
            std::memset(kr + pad, 0, size_t(2 * hp.Dwp - pad) * 2);
            if (j >= p.Tk) continue;
            pack_rows_bf16<S>(kr, 2 * hp.Dwp, p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t, 0, 1, p.D);
            for (int64_t d = 0; d < p.D; ++d) bad |= uint32_t((kr[d] & 0x7f80u) == 0x7f80u);
        }
        // V^T words (keys 2j', 2j' + 1 of row e), 32 keys at a time
        const float* v0 = p.v + b * p.v_stride_b + hk * p.v_stride_h;
        for (int64_t j = j0; j < j1; j += 32)
            bad |= uint32_t(pack_transposed_pairs32<S>(vt + j / 2, hp.Tkp / 2, j < p.Tk ? v0 + j * p.v_stride_t : v0,
                                                       p.v_stride_t,
                                                       max64(0, p.Tk - j), p.Dv, hp.Dvq));
    }
    return bad != 0;
}

template <class S, int64_t BQ>
struct AmxFwdLayout {
    static constexpr int64_t Bq = BQ, Bk = S::kBlockK;
    static_assert(Bq % 16 == 0 && Bk % 32 == 0);
    int64_t qt, st, kt, ot, m, l, alpha, lim, kfirst, psum, qw, pw, total;  // float offsets into the workspace
    AmxFwdLayout(const AttentionParams<float>& p, const AmxHeads& hp) {
        int64_t at   = 0;
        auto    take = [&](int64_t n) {
            const int64_t r = at;
            at += round_up(n, 16);
            return r;
        };
        qt = take(p.D * Bq), st = take(Bk * Bq), kt = take(p.dropout_p > 0 ? Bk * Bq : 0), ot = take(hp.Dvq * Bq),
        m = take(Bq), l = take(Bq), alpha = take(Bq), lim = take(Bq), kfirst = take(Bq), psum = take(Bq);
        qw = take(hp.Dwp * Bq), pw = take(Bk / 2 * Bq);  // words: Q^T (Dwp rows), P^T (up to Bk/2 rows)
        total = at;
    }
};

template <class S, class T, int64_t BQ>
void forward_block_amx(const AttentionParams<float>& p, const AmxFwdLayout<S, BQ>& L, const AmxHeads& hp,
                       float* ws, int64_t b, int64_t h, int64_t qb) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t Bq   = BQ, Bk = AmxFwdLayout<S, BQ>::Bk, NQV = Bq / W;
    const int64_t     i0   = qb * Bq, nq = min64(Bq, p.Tq - i0);
    const int64_t     hk   = h / (p.H / p.Hkv);
    float *qt = ws + L.qt, *st = ws + L.st, *kt = ws + L.kt, *ot = ws + L.ot, *m = ws + L.m, *l = ws + L.l,
          *alpha = ws + L.alpha, *lim = ws + L.lim, *kfirst = ws + L.kfirst, *psum = ws + L.psum;
    uint32_t *qw = reinterpret_cast<uint32_t*>(ws + L.qw), *pw = reinterpret_cast<uint32_t*>(ws + L.pw);
    float*       out0 = p.out + b * p.o_stride_b + h * p.o_stride_h + i0 * p.o_stride_t;
    float*       lse0 = p.lse ? p.lse + (b * p.H + h) * p.Tq + i0 : nullptr;
    const float* q0   = p.q + b * p.q_stride_b + h * p.q_stride_h + i0 * p.q_stride_t;
    const uint16_t* kp = hp.k(b * p.Hkv + hk);
    const uint16_t* vt = hp.vt(b * p.Hkv + hk);

    const auto [kmin, kmax, fmin, fmax] = key_limits<S>(p, b, i0, nq, Bq, lim, kfirst);
    if (kmax < 0) return write_fully_masked_rows(p, out0, lse0, b, h, i0, nq);  // every row fully masked
    // Q^T as bf16 words with the power-of-two part of the scale folded in exactly (ScaleSplit);
    // word rows past D are 0.
    const ScaleSplit sc = split_scale(p.scale);
    const int64_t    Dw = (p.D + 1) / 2;
    pack_transposed<S>(qt, Bq, q0, p.q_stride_t, nq, Bq, p.D, sc.pow2);
    pack_row_pairs<S>(qw, Bq, qt, Bq, p.D, Bq, Bq);
    std::memset(qw + Dw * Bq, 0, size_t((hp.Dwp - Dw) * Bq) * 4);
    for (int64_t i = 0; i < Bq; ++i) m[i] = -INFINITY, l[i] = 0.0f;
    std::memset(ot, 0, size_t(hp.Dvq * Bq) * 4);

    const bool     mods      = p.softcap > 0.0f || p.alibi_slopes;
    const bool     general   = p.bool_mask || p.additive_mask || mods;
    const bool     dropout   = p.dropout_p > 0.0f;
    const uint32_t thr       = attention_dropout_threshold(p.dropout_p);
    const uint64_t drop_row0 = p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i0) * p.Tk);
    const int64_t  kend      = kmax + 1;
    // V^T words pair the keys j0 + 2j', j0 + 2j' + 1 of each block, as the P^T words do: tiles
    // load from any byte offset, so j0 need not be even.
    for (int64_t j0 = fmin; j0 < kend; j0 += Bk) {
        const int64_t nk = min64(Bk, kend - j0), nkp = round_up(nk, 16);
        // S^T = K_j Q^T (nkp x Bq; the rows past nk are not read), then the rest of the scale.
        tile_gemm<T>(nkp, Bq, hp.Dwp, kp + j0 * 2 * hp.Dwp, 4 * hp.Dwp, qw, 4 * Bq, st, 4 * Bq, false);
        scale_tile<S>(st, nk * Bq, sc.m);
        bool classic = general || j0 + nk - 1 > kmin || j0 < fmax;
        bool rescale = true, packed = false;
        const int64_t nkw = (nk + 1) / 2, nkwp = round_up(nkw, 16);
        if (!classic) {
            // Unmasked: P = e^(s - m) with the current shifts (forward_block's lazy rescaling);
            // lanes that have seen no key yet take this block's maximum. Without dropout P goes
            // straight into its P^T words (no fp32 copy: one pass less), summed in key order.
            V mv[NQV], sv[NQV];
            for (int64_t v = 0; v < NQV; ++v) {
                mv[v] = S::load(m + v * W), sv[v] = S::zero();
                if (!S::all_le(S::set1(-FLT_MAX), mv[v])) {
                    V tm = S::set1(-INFINITY);
                    for (int64_t j = 0; j < nk; ++j) tm = S::max(tm, S::load(st + j * Bq + v * W));
                    mv[v] = S::neginf_to(mv[v], tm);
                    S::store(m + v * W, mv[v]);
                }
            }
            if (!dropout) {
                for (int64_t jp = 0; jp < nkw; ++jp) {
                    const float* s0  = st + 2 * jp * Bq;
                    const bool   two = 2 * jp + 1 < nk;
                    for (int64_t v = 0; v < NQV; ++v) {
                        const V e0 = S::exp(S::sub(S::load(s0 + v * W), mv[v]));
                        sv[v]      = S::add(sv[v], e0);
                        V e1       = S::zero();
                        if (two) {
                            e1    = S::exp(S::sub(S::load(s0 + Bq + v * W), mv[v]));
                            sv[v] = S::add(sv[v], e1);
                        }
                        S::storew(pw + jp * Bq + v * W, S::pair(e0, e1));
                    }
                }
                packed = true;
            } else {
                for (int64_t j = 0; j < nk; ++j)
                    for (int64_t v = 0; v < NQV; ++v) {
                        float*  s = st + j * Bq + v * W;
                        const V e = S::exp(S::sub(S::load(s), mv[v]));
                        S::store(s, e);
                        sv[v] = S::add(sv[v], e);
                    }
            }
            bool over = false;
            for (int64_t v = 0; v < NQV; ++v) {
                S::store(psum + v * W, sv[v]);
                over = over || !S::all_le(sv[v], S::set1(kBlockSumLimit));
            }
            if (!over) {
                for (int64_t v = 0; v < NQV; ++v)
                    S::store(l + v * W, S::add(S::load(l + v * W), S::load(psum + v * W)));
                rescale = false;
            } else {  // rare: recompute S and take the new maximum as the shift
                classic = true, packed = false;
                tile_gemm<T>(nkp, Bq, hp.Dwp, kp + j0 * 2 * hp.Dwp, 4 * hp.Dwp, qw, 4 * Bq, st, 4 * Bq, false);
                scale_tile<S>(st, nk * Bq, sc.m);
            }
        }
        if (classic)
            masked_online_softmax<S, Bq>(p, st, nk, nq, b, h, i0, j0, kmin, fmax, lim, kfirst, m, alpha, l);
        if (dropout) {
            dropout_tile<S>(kt, Bq, nk, Bq, nq, p.dropout_seed, drop_row0, p.Tk, j0, thr, 1.0f);
            for (int64_t t = 0; t < nk * Bq; t += W) S::store(st + t, S::mul(S::load(st + t), S::load(kt + t)));
        }
        // O^T = diag(alpha) O^T + V_j^T P^T: P^T as bf16 words along the keys (word rows past nk
        // are 0, so the V^T columns of keys past the block add nothing); l summed the fp32 P.
        if (!packed) pack_row_pairs<S>(pw, Bq, st, Bq, nk, Bq, Bq);
        std::memset(pw + nkw * Bq, 0, size_t((nkwp - nkw) * Bq) * 4);
        if (rescale)
            for (int64_t e = 0; e < p.Dv; ++e)
                for (int64_t v = 0; v < NQV; ++v)
                    S::store(ot + e * Bq + v * W, S::mul(S::load(ot + e * Bq + v * W), S::load(alpha + v * W)));
        if (hp.Dvq > 0) tile_gemm<T>(hp.Dvq, Bq, nkwp, vt + j0, 2 * hp.Tkp, pw, 4 * Bq, ot, 4 * Bq, true);
    }
    // out = O / l (times 1/(1-p)), lse as forward_block.
    const float keep = dropout_keep_factor(p.dropout_p);
    float*      lo0  = p.lse_lo ? p.lse_lo + (b * p.H + h) * p.Tq + i0 : nullptr;
    for (int64_t i = 0; i < nq; ++i)  // alpha is free now: 1/l per query for the write-back
        alpha[i] = finish_row(m[i], l[i], keep, lse0 ? lse0 + i : nullptr, lo0 ? lo0 + i : nullptr);
    // out rows = (O^T)^T / l: 16 x 16 transposes of O^T into rows of 16 queries
    alignas(64) float blk[16 * 16];
    for (int64_t ib = 0; ib < nq; ib += 16)
        for (int64_t e = 0; e < p.Dv; e += 16) {
            S::transpose16(reinterpret_cast<const uint32_t*>(ot + e * Bq + ib), Bq, reinterpret_cast<uint32_t*>(blk), 16);
            const auto mask = S::tail(int(min64(16, p.Dv - e)));
            for (int64_t i = ib; i < min64(ib + 16, nq); ++i)
                S::storem(out0 + i * p.o_stride_t + e, S::mul(S::load(blk + (i - ib) * 16), S::set1(alpha[i])), mask);
        }
}

template <class S, class T, int64_t BQ>
void forward_amx_with(const AttentionParams<float>& p, const AmxHeads& hp) {
    const AmxFwdLayout<S, BQ> L(p, hp);
    const int64_t             nqb   = (p.Tq + BQ - 1) / BQ;
    const int64_t             items = p.B * p.H * nqb;
#pragma omp parallel
    {
        float* ws = detail::flash_thread_workspace(L.total);
        T::begin();
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) {
            const int64_t t  = items - 1 - it;
            const int64_t qb = t % nqb, bh = t / nqb;
            forward_block_amx<S, T, BQ>(p, L, hp, ws, bh / p.H, bh % p.H, qb);
        }
        T::end();
    }
}

/// The AMX forward; false (nothing written) when K or V holds a value that is ±inf or NaN as bf16
/// (pack_heads_amx), which the caller sends to the dot build. Query blocks of W rows when Tq <= W.
template <class S, class T>
bool forward_amx(const AttentionParams<float>& p) {
    QKV_ASSERT(p.bf16 && p.Tq < (int64_t(1) << 24) && p.Tk < (int64_t(1) << 24));
    AmxHeads hp(p);
    hp.data = static_cast<uint16_t*>(detail::flash_call_buffer(p.B * p.Hkv * hp.per_head * 2));
    if (pack_heads_amx<S>(p, hp)) return false;
    if (p.Tq <= S::W) forward_amx_with<S, T, S::W>(p, hp);
    else forward_amx_with<S, T, S::kBlockQ>(p, hp);
    return true;
}
#endif

// ---------------------------------------------------------------------------------------------
// Backward. Per (b, h) a HeadCtx packs Q^T and dO^T of every query block, the per-lane lse
// (-inf -> +inf so fully masked rows give P = 0), D = rowsum(dO o O) and the key limits; then each
// key block runs over the query blocks that see it (docs: the five GEMMs).

template <class S>
struct BwdLayout {
    static constexpr int64_t Bq = S::kBwdBlockQ, Bk = S::kBwdBlockK;
    int64_t nqb;
    int64_t qt, dot, lse, lo, dd, lim, kfirst, kmin, kmax, fmin, fmax, st, pd, ds, dcap, dq, qr, dor, kr, vr;
    int64_t qw, dow, qpw, dopw, kw, vw, kpw, pdw, dsw, dstw, total;
    BwdLayout(const AttentionParams<float>& p, bool private_dq) {
        nqb        = (p.Tq + Bq - 1) / Bq;
        int64_t at = 0;
        auto take = [&](int64_t n) {
            const int64_t r = at;
            at += round_up(n, 16);
            return r;
        };
        qt = take(nqb * p.D * Bq), dot = take(nqb * p.Dv * Bq), lse = take(nqb * Bq), lo = take(nqb * Bq),
        dd = take(nqb * Bq), lim = take(nqb * Bq), kfirst = take(nqb * Bq), kmin = take(nqb), kmax = take(nqb),
        fmin = take(nqb), fmax = take(nqb),
        st = take(Bk * Bq), pd = take(p.dropout_p > 0 ? Bk * Bq : 0), ds = take(Bk * Bq),
        dcap = take(p.softcap > 0.0f ? Bk * Bq : 0),
        dq = take(private_dq ? p.Tq * p.D : 0);
        // bf16: the head's Q and dO rows and the key block's K and V rows as dense bf16 values
        qr = take(p.bf16 ? p.Tq * p.D : 0), dor = take(p.bf16 ? p.Tq * p.Dv : 0);
        kr = take(p.bf16 ? Bk * p.D : 0), vr = take(p.bf16 ? Bk * p.Dv : 0);
        // kDot word operands (2 bf16 per float slot): per query block Q^T and dO^T (along D, Dv)
        // and the Q and dO rows in pairs along the queries; per key block the K and V rows along
        // D and Dv, the K rows in pairs along the keys, Pd and dS along the queries and dS^T along
        // the keys.
        const bool    w   = kDot<S>;
        const int64_t Dw = (p.D + 1) / 2, Dvw = (p.Dv + 1) / 2;
        const int64_t Dp = round_up(p.D, S::W), Dvp = round_up(p.Dv, S::W);
        qw = take(w ? nqb * Dw * Bq : 0), dow = take(w ? nqb * Dvw * Bq : 0);
        qpw = take(w ? nqb * Bq / 2 * Dp : 0), dopw = take(w ? nqb * Bq / 2 * Dvp : 0);
        kw = take(w ? Bk * Dw : 0), vw = take(w ? Bk * Dvw : 0), kpw = take(w ? Bk / 2 * Dp : 0);
        pdw = take(w ? Bk * Bq / 2 : 0), dsw = take(w ? Bk * Bq / 2 : 0), dstw = take(w ? Bk / 2 * Bq : 0);
        total = at;
    }
};

/// Packs what every key block of head (b, h) needs (see BwdLayout).
template <class S>
void prepare_head(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                  const BwdLayout<S>& L, float* ws, int64_t b, int64_t h) {
    constexpr int64_t Bq = BwdLayout<S>::Bq;
    const float* q0  = p.q + b * p.q_stride_b + h * p.q_stride_h;
    const float* do0 = g.dout + b * p.o_stride_b + h * p.o_stride_h;
    const float* o0  = p.out + b * p.o_stride_b + h * p.o_stride_h;
    const float* lse = p.lse + (b * p.H + h) * p.Tq;
    int64_t      qs = p.q_stride_t, ds = p.o_stride_t;
    if (p.bf16) {  // the head's Q and dO rows as bf16 values (read again by the dK and dV products)
        round_rows_bf16<S>(ws + L.qr, q0, p.Tq, p.D, p.q_stride_t);
        round_rows_bf16<S>(ws + L.dor, do0, p.Tq, p.Dv, p.o_stride_t);
        q0 = ws + L.qr, qs = p.D, do0 = ws + L.dor, ds = p.Dv;
    }
    [[maybe_unused]] const ScaleSplit sc = split_scale(p.scale);
    for (int64_t qb = 0; qb < L.nqb; ++qb) {
        const int64_t i0 = qb * Bq, nq = min64(Bq, p.Tq - i0);
        float* qt  = ws + L.qt + qb * p.D * Bq;
        float* dot = ws + L.dot + qb * p.Dv * Bq;
        if constexpr (kDot<S>) {  // word operands (bf16 of the rounded rows: the same values)
            const int64_t Dw = (p.D + 1) / 2, Dvw = (p.Dv + 1) / 2;
            const int64_t Dp = round_up(p.D, S::W), Dvp = round_up(p.Dv, S::W);
            auto* w = reinterpret_cast<uint32_t*>(ws);
            pack_transposed<S>(qt, Bq, q0 + i0 * qs, qs, nq, Bq, p.D, sc.pow2);
            pack_row_pairs<S>(w + L.qw + qb * Dw * Bq, Bq, qt, Bq, p.D, Bq, Bq);
            pack_transposed<S>(dot, Bq, do0 + i0 * ds, ds, nq, Bq, p.Dv, 1.0f);
            pack_row_pairs<S>(w + L.dow + qb * Dvw * Bq, Bq, dot, Bq, p.Dv, Bq, Bq);
            pack_row_pairs<S>(w + L.qpw + qb * Bq / 2 * Dp, Dp, q0 + i0 * qs, qs, nq, p.D, Dp);
            pack_row_pairs<S>(w + L.dopw + qb * Bq / 2 * Dvp, Dvp, do0 + i0 * ds, ds, nq, p.Dv, Dvp);
        } else {
            pack_transposed<S>(qt, Bq, q0 + i0 * qs, qs, nq, Bq, p.D, p.scale);
            pack_transposed<S>(dot, Bq, do0 + i0 * ds, ds, nq, Bq, p.Dv, 1.0f);
        }
        for (int64_t i = 0; i < Bq; ++i) {
            float lv = INFINITY, lov = 0.0f, dv = 0.0f;
            if (i < nq) {
                lv  = lse[i0 + i] == -INFINITY ? INFINITY : lse[i0 + i];
                lov = p.lse_lo && lv != INFINITY ? p.lse_lo[(b * p.H + h) * p.Tq + i0 + i] : 0.0f;
                const float* a  = do0 + (i0 + i) * ds;
                const float* o  = o0 + (i0 + i) * p.o_stride_t;
                for (int64_t e = 0; e < p.Dv; ++e) dv += a[e] * o[e];
            }
            ws[L.lse + qb * Bq + i] = lv;
            ws[L.lo + qb * Bq + i]  = lov;
            ws[L.dd + qb * Bq + i]  = dv;
        }
        const KeyRange r = key_limits<S>(p, b, i0, nq, Bq, ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq);
        ws[L.kmin + qb] = float(r.kmin);
        ws[L.kmax + qb] = float(r.kmax);
        ws[L.fmin + qb] = float(r.fmin);
        ws[L.fmax + qb] = float(r.fmax);
    }
}

/// The backward's probabilities of a score tile st (nk keys x Bq lanes, keys j0.., query block
/// i0): score modifiers (dcap: d cap/dx, when a soft cap is set), masks (key limits of the block
/// as in prepare_head), P = exp((S - lse) - lse_lo) lane-wise in st, and with dropout
/// Pd = P Z in pd (Z = keep or 0).
template <class S, int64_t Bq>
void backward_probabilities(const AttentionParams<float>& p, float* st, float* pd, float* dcap, int64_t nk,
                            int64_t nq, int64_t b, int64_t h, int64_t i0, int64_t j0, int64_t kmin, int64_t fmax,
                            const float* lim, const float* kfirst, const float* lse, const float* lo, uint32_t thr,
                            float keep) {
    using V               = typename S::V;
    constexpr int     W   = S::W;
    constexpr int64_t NQV = Bq / W;
    const bool        softcap = p.softcap > 0.0f;
    if (softcap || p.alibi_slopes) apply_score_mods<Bq>(p, st, softcap ? dcap : nullptr, nk, nq, h, i0, j0);
    if (j0 + nk - 1 > kmin) apply_key_limits<S, Bq>(st, nk, j0, lim);
    if (j0 < fmax) apply_key_first<S, Bq>(st, nk, j0, kfirst);
    if (p.bool_mask || p.additive_mask) apply_general_mask<S, Bq>(p, st, nk, nq, b, h, i0, j0);
    V lv[NQV], lov[NQV];
    for (int64_t v = 0; v < NQV; ++v) lv[v] = S::load(lse + v * W), lov[v] = S::load(lo + v * W);
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) {
            float* s = st + j * Bq + v * W;
            S::store(s, S::exp(S::sub(S::sub(S::load(s), lv[v]), lov[v])));
        }
    if (p.dropout_p > 0.0f) {
        dropout_tile<S>(pd, Bq, nk, Bq, nq, p.dropout_seed,
                        p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i0) * p.Tk), p.Tk, j0, thr, keep);
        for (int64_t t = 0; t < nk * Bq; t += W) S::store(pd + t, S::mul(S::load(pd + t), S::load(st + t)));
    }
}

/// dS = scale (Pd dP~ - P D) in ds (= scale P (Z dP~ - D); the scale of S folds in here), then
/// through the soft cap (d cap(x)/dx = 1 - tanh^2 from dcap). ds holds dP~ on entry; dd is D.
template <class S, int64_t Bq>
void backward_ds(const AttentionParams<float>& p, const float* st, const float* pd, float* ds, const float* dcap,
                 int64_t nk, const float* dd) {
    using V               = typename S::V;
    constexpr int     W   = S::W;
    constexpr int64_t NQV = Bq / W;
    const V           scale = S::set1(p.scale);
    V                 dv_[NQV];
    for (int64_t v = 0; v < NQV; ++v) dv_[v] = S::load(dd + v * W);
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) {
            const int64_t t  = j * Bq + v * W;
            const V       pv = S::load(st + t);
            const V       a  = S::mul(S::load(pd + t), S::load(ds + t));
            S::store(ds + t, S::mul(scale, S::sub(a, S::mul(pv, dv_[v]))));
        }
    if (p.softcap > 0.0f)
        for (int64_t t = 0; t < nk * Bq; t += W) S::store(ds + t, S::mul(S::load(ds + t), S::load(dcap + t)));
}

/// Key block kb of head (b, h) against every query block that sees it. dq_acc: (Tq, D) rows (row
/// stride ldq) of/// this head's dq (or a private accumulator); dk/dv rows of the block are zeroed when `first`.
template <class S>
void backward_key_block(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                        const BwdLayout<S>& L, float* ws, int64_t b, int64_t h, int64_t kb,
                        float* dq_acc, int64_t ldq, bool first) {
    constexpr int     W       = S::W;
    constexpr int64_t Bq      = BwdLayout<S>::Bq, Bk = BwdLayout<S>::Bk;
    const int64_t     hk      = h / (p.H / p.Hkv);
    const int64_t     j0      = kb * Bk, nk = min64(Bk, p.Tk - j0);
    const float*      kj      = p.k + b * p.k_stride_b + hk * p.k_stride_h + j0 * p.k_stride_t;
    const float*      vj      = p.v + b * p.v_stride_b + hk * p.v_stride_h + j0 * p.v_stride_t;
    int64_t           ks = p.k_stride_t, vs = p.v_stride_t;
    float*            dk      = g.dk + b * g.dk_stride_b + hk * g.dk_stride_h + j0 * g.dk_stride_t;
    float*            dv      = g.dv + b * g.dv_stride_b + hk * g.dv_stride_h + j0 * g.dv_stride_t;
    const int64_t     ldk = g.dk_stride_t, ldv = g.dv_stride_t;
    const float*      q0      = p.q + b * p.q_stride_b + h * p.q_stride_h;
    const float*      do0     = g.dout + b * p.o_stride_b + h * p.o_stride_h;
    int64_t           qs = p.q_stride_t, dos = p.o_stride_t;
    constexpr bool dot = kDot<S>;
    [[maybe_unused]] const int64_t Dw = (p.D + 1) / 2, Dvw = (p.Dv + 1) / 2, Dp = round_up(p.D, W),
                                   Dvp = round_up(p.Dv, W);
    [[maybe_unused]] uint32_t*     w   = reinterpret_cast<uint32_t*>(ws);
    [[maybe_unused]] const ScaleSplit sc = split_scale(p.scale);
    if constexpr (dot) {  // K and V rows as words along D and Dv, K rows in pairs along the keys
        pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.kw), 2 * Dw, kj, ks, nk, p.D);
        pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.vw), 2 * Dvw, vj, vs, nk, p.Dv);
        pack_row_pairs<S>(w + L.kpw, Dp, kj, ks, nk, p.D, Dp);
    }
    if (p.bf16 && !dot) {  // bf16 values: Q and dO rows from prepare_head, this block's K and V rows here
        round_rows_bf16<S>(ws + L.kr, kj, nk, p.D, p.k_stride_t);
        round_rows_bf16<S>(ws + L.vr, vj, nk, p.Dv, p.v_stride_t);
        kj = ws + L.kr, ks = p.D, vj = ws + L.vr, vs = p.Dv;
        q0 = ws + L.qr, qs = p.D, do0 = ws + L.dor, dos = p.Dv;
    }
    float *st = ws + L.st, *ds = ws + L.ds, *pd = p.dropout_p > 0 ? ws + L.pd : st, *dcap = ws + L.dcap;
    const uint32_t thr      = attention_dropout_threshold(p.dropout_p);
    const float    keep     = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
    if (first)
        for (int64_t j = 0; j < nk; ++j) {
            for (int64_t d = 0; d < p.D; ++d) dk[j * ldk + d] = 0.0f;
            for (int64_t e = 0; e < p.Dv; ++e) dv[j * ldv + e] = 0.0f;
        }
    for (int64_t qb = 0; qb < L.nqb; ++qb) {
        // Block fully masked for these queries (past their limits, or before their windows).
        if (int64_t(ws[L.kmax + qb]) < j0 || int64_t(ws[L.fmin + qb]) > j0 + nk - 1) continue;
        const int64_t i0 = qb * Bq, nq = min64(Bq, p.Tq - i0);
        const float*  lse = ws + L.lse + qb * Bq;
        const float*  lo  = ws + L.lo + qb * Bq;
        const float*  dd  = ws + L.dd + qb * Bq;
        // S^T = K_j Q^T, masks, P = exp((S - lse) - lse_lo) lane-wise.
        if constexpr (dot)
            gemm<S, kStore, false, false>(nk, Bq, Dw, w + L.kw, Dw, w + L.qw + qb * Dw * Bq, Bq, st, Bq, nullptr, sc.m);
        else gemm<S, kStore, false, false>(nk, Bq, p.D, kj, ks, ws + L.qt + qb * p.D * Bq, Bq, st, Bq);
        backward_probabilities<S, Bq>(p, st, pd, dcap, nk, nq, b, h, i0, j0, int64_t(ws[L.kmin + qb]),
                                      int64_t(ws[L.fmax + qb]), ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq, lse, lo,
                                      thr, keep);
        // dP~^T = V_j dO^T (nk x Bq), reduction over Dv.
        if constexpr (dot) gemm<S, kStore, false, false>(nk, Bq, Dvw, w + L.vw, Dvw, w + L.dow + qb * Dvw * Bq, Bq, ds, Bq);
        else gemm<S, kStore, false, false>(nk, Bq, p.Dv, vj, vs, ws + L.dot + qb * p.Dv * Bq, Bq, ds, Bq);
        backward_ds<S, Bq>(p, st, pd, ds, dcap, nk, dd);
        if constexpr (dot) {
            // Pd and dS as words along the queries (dV, dK) and dS^T along the keys (dQ); the
            // dispatcher sends K and V with non-finite bf16 values to the rounded_fp32 build.
            const int64_t nqw = (nq + 1) / 2;
            pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.pdw), Bq, pd, Bq, nk, Bq);
            pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.dsw), Bq, ds, Bq, nk, Bq);
            pack_row_pairs<S>(w + L.dstw, Bq, ds, Bq, nk, Bq, Bq);
            gemm<S, kAcc, false>(nk, p.Dv, nqw, w + L.pdw, Bq / 2, w + L.dopw + qb * Bq / 2 * Dvp, Dvp, dv, ldv);
            gemm<S, kAcc, false>(nk, p.D, nqw, w + L.dsw, Bq / 2, w + L.qpw + qb * Bq / 2 * Dp, Dp, dk, ldk);
            gemm<S, kAcc, true>(nq, p.D, (nk + 1) / 2, w + L.dstw, Bq, w + L.kpw, Dp, dq_acc + i0 * ldq, ldq);
            continue;
        }
        // Rows hidden by a mask are never read: with a non-finite value in V (dP~ = NaN) or K, the
        // hidden entries (P = 0) get dS = 0, not 0 · NaN, and dQ reads the K rows as 0 there.
        const bool bad_v = has_nonfinite(vj, nk, p.Dv, vs), bad_k = has_nonfinite(kj, nk, p.D, ks);
        if (bad_v || bad_k)
            for (int64_t t = 0; t < nk * Bq; ++t)
                if (st[t] == 0.0f) ds[t] = 0.0f;
        if (p.bf16) {  // the GEMMs below take Pd and dS as bf16 (dS was formed from fp32 P above)
            round_tile_bf16<S>(pd, nk * Bq);
            round_tile_bf16<S>(ds, nk * Bq);
        }
        // dV_j += Pd dO (rows j, lanes Dv, reduction over the nq queries); dK_j += dS Q.
        gemm<S, kAcc, false>(nk, p.Dv, nq, pd, Bq, do0 + i0 * dos, dos, dv, ldv);
        gemm<S, kAcc, false>(nk, p.D, nq, ds, Bq, q0 + i0 * qs, qs, dk, ldk);
        // dQ_i += dS^T K_j (rows i, lanes D, reduction over the nk keys). Non-finite K rows are
        // read as 0: where such a key is seen, dS is NaN already (its score was), so dQ stays NaN.
        if (bad_k) {
            std::vector<float> kz(size_t(nk * p.D));
            for (int64_t j = 0; j < nk; ++j)
                for (int64_t d = 0; d < p.D; ++d) {
                    const float x = kj[j * ks + d];
                    kz[size_t(j * p.D + d)] = std::isfinite(x) ? x : 0.0f;
                }
            gemm<S, kAcc, true>(nq, p.D, nk, ds, Bq, kz.data(), p.D, dq_acc + i0 * ldq, ldq);
        } else {
            gemm<S, kAcc, true>(nq, p.D, nk, ds, Bq, kj, ks, dq_acc + i0 * ldq, ldq);
        }
    }
}

template <class S>
void backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g0) {
    const AttentionGradParams<float> g = with_grad_strides(p, g0);
    QKV_ASSERT(p.Tq < (int64_t(1) << 24) && p.Tk < (int64_t(1) << 24));
    constexpr int64_t Bk       = BwdLayout<S>::Bk;
    const int64_t     nkb      = (p.Tk + Bk - 1) / Bk;
    const int64_t     group    = p.H / p.Hkv;
    const int64_t     nthreads = omp_get_max_threads();
    constexpr int     kMaxSplit = 64;
    if (p.B * p.Hkv >= nthreads || nthreads > kMaxSplit || nkb == 1) {
        // One (b, kv head) per task: its dk/dv rows belong to one thread.
        const BwdLayout<S> L(p, false);
#pragma omp parallel
        {
            float* ws = detail::flash_thread_workspace(L.total);
#pragma omp for schedule(dynamic, 1)
            for (int64_t bk = 0; bk < p.B * p.Hkv; ++bk) {
                const int64_t b = bk / p.Hkv, hk = bk % p.Hkv;
                for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                    prepare_head<S>(p, g, L, ws, b, h);
                    float* dq = g.dq + b * g.dq_stride_b + h * g.dq_stride_h;
                    for (int64_t i = 0; i < p.Tq; ++i)
                        for (int64_t d = 0; d < p.D; ++d) dq[i * g.dq_stride_t + d] = 0.0f;
                    for (int64_t kb = 0; kb < nkb; ++kb)
                        backward_key_block<S>(p, g, L, ws, b, h, kb, dq, g.dq_stride_t, h == hk * group);
                }
            }
        }
        return;
    }
    // Few heads: split key blocks across threads, each with a private dQ, then sum the dQs. The
    // static round-robin split keeps results reproducible for a given thread count (dq is then
    // summed in a different order than with one thread: equal to rounding, not bit for bit).
    const BwdLayout<S> L(p, true);
    float*             priv[kMaxSplit];
#pragma omp parallel
    {
        float*    ws  = detail::flash_thread_workspace(L.total);
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        priv[tid]     = ws + L.dq;
        for (int64_t b = 0; b < p.B; ++b)
            for (int64_t hk = 0; hk < p.Hkv; ++hk)
                for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                    prepare_head<S>(p, g, L, ws, b, h);
                    for (int64_t t = 0; t < p.Tq * p.D; ++t) priv[tid][t] = 0.0f;
#pragma omp for schedule(static, 1)
                    for (int64_t kb = 0; kb < nkb; ++kb)
                        backward_key_block<S>(p, g, L, ws, b, h, kb, priv[tid], p.D, h == hk * group);
                    float* dq = g.dq + b * g.dq_stride_b + h * g.dq_stride_h;
#pragma omp for
                    for (int64_t t = 0; t < p.Tq * p.D; ++t) {
                        float acc = 0.0f;
                        for (int u = 0; u < nt; ++u) acc += priv[u][t];
                        dq[t / p.D * g.dq_stride_t + t % p.D] = acc;
                    }
                }
    }
}

#if defined(__AVX512BF16__)
// ---------------------------------------------------------------------------------------------
// AMX backward (docs §10): the five products of backward_key_block on tiles, the elementwise work
// (P, dropout, dS, soft cap) as there. Operands (A: bf16 rows; B: word rows):
//   S^T  = K_j Q^T     A = K rows            B = Q^T words (per query block)
//   dP^T = V_j dO^T    A = V rows            B = dO^T words (per query block)
//   dV_j += Pd^T dO    A = bf16 rows of Pd^T B = dO rows paired along the queries
//   dK_j += dS^T Q     A = bf16 rows of dS^T B = Q rows paired along the queries
//   dQ^T += K_j^T dS^T A = K^T rows          B = dS^T words along the keys
// dK_j and dV_j accumulate in padded workspace tiles and are written once per key block; dQ is
// kept transposed per query block and transposed into dq once per head.

/// x rounded to bf16 (RNE; NaN kept), as round_bf16 does lane by lane.
inline float bf16_round1(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (x == x) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float y;
    std::memcpy(&y, &u, 4);
    return y;
}

/// K rows, V rows and K^T of one (batch, kv head) as bf16, zero padded for the tiles (as
/// AmxHeads: keys to Tk + 32 rounded to 32, rows to 16 words, K^T rows to D rounded to 16):
/// per_head values from a head's base `h`.
struct AmxBwdHeads {
    int64_t Tkp, Dwp, Dvwp, Dq, per_head;
    explicit AmxBwdHeads(const AttentionParams<float>& p)
        : Tkp(round_up(p.Tk + 32, 32)), Dwp(round_up((p.D + 1) / 2, 16)), Dvwp(round_up((p.Dv + 1) / 2, 16)),
          Dq(round_up(p.D, 16)), per_head(Tkp * 2 * Dwp + Tkp * 2 * Dvwp + Dq * Tkp) {}
    const uint16_t* k(const uint16_t* h) const { return h; }
    const uint16_t* v(const uint16_t* h) const { return h + Tkp * 2 * Dwp; }
    const uint16_t* kt(const uint16_t* h) const { return h + Tkp * 2 * (Dwp + Dvwp); }
};

/// Packs keys [j0, j1) of head bh (= b Hkv + hk) into its AmxBwdHeads at `h`; true when a K or V
/// value there is ±inf or NaN as bf16 (the tile products read hidden rows with P = 0; such calls
/// run the rounded_fp32 tiles, which never do).
template <class S>
bool pack_head_amx_bwd(const AttentionParams<float>& p, const AmxBwdHeads& hp, int64_t bh, uint16_t* h, int64_t j0,
                       int64_t j1) {
    const int64_t b = bh / p.Hkv, hk = bh % p.Hkv;
    uint16_t *    kp = h, *vp = h + hp.Tkp * 2 * hp.Dwp;
    auto*         kt = reinterpret_cast<uint32_t*>(h + hp.Tkp * 2 * (hp.Dwp + hp.Dvwp));
    uint32_t      bad = 0;
    QKV_DASSERT(j0 % 32 == 0 && j1 % 32 == 0);
    for (int64_t j = j0; j < j1; ++j) {
        uint16_t* kr = kp + j * 2 * hp.Dwp;
        uint16_t* vr = vp + j * 2 * hp.Dvwp;
        const int64_t kpad = j < p.Tk ? p.D + p.D % 2 : 0, vpad = j < p.Tk && p.Dv > 0 ? p.Dv + p.Dv % 2 : 0;
        std::memset(kr + kpad, 0, size_t(2 * hp.Dwp - kpad) * 2);  // pack_rows_bf16 writes [0, pad)
        std::memset(vr + vpad, 0, size_t(2 * hp.Dvwp - vpad) * 2);
        if (j < p.Tk) {
            pack_rows_bf16<S>(kr, 0, p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t, 0, 1, p.D);
            if (p.Dv > 0) pack_rows_bf16<S>(vr, 0, p.v + b * p.v_stride_b + hk * p.v_stride_h + j * p.v_stride_t, 0, 1, p.Dv);
            for (int64_t d = 0; d < p.D; ++d) bad |= uint32_t((kr[d] & 0x7f80u) == 0x7f80u);
            for (int64_t e = 0; e < p.Dv; ++e) bad |= uint32_t((vr[e] & 0x7f80u) == 0x7f80u);
        }
    }
    // K^T words (keys 2j', 2j' + 1 of row d), 32 keys at a time
    const float* k0 = p.k + b * p.k_stride_b + hk * p.k_stride_h;
    for (int64_t j = j0; j < j1; j += 32)
        bad |= uint32_t(pack_transposed_pairs32<S>(kt + j / 2, hp.Tkp / 2, j < p.Tk ? k0 + j * p.k_stride_t : k0,
                                                   p.k_stride_t,
                                                   max64(0, p.Tk - j), p.D, hp.Dq));
    return bad != 0;
}

/// Every head's AmxBwdHeads, head bh at data + bh per_head (parallel over heads and key chunks).
template <class S>
bool pack_heads_amx_bwd(const AttentionParams<float>& p, const AmxBwdHeads& hp, uint16_t* data) {
    constexpr int64_t kRows = 256;
    const int64_t     nch = (hp.Tkp + kRows - 1) / kRows, heads = p.B * p.Hkv;
    uint32_t          bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (heads * hp.per_head > (1 << 16))
    for (int64_t t = 0; t < heads * nch; ++t) {
        const int64_t bh = t / nch, j0 = t % nch * kRows, j1 = min64(hp.Tkp, j0 + kRows);
        if (j0 < j1) bad |= uint32_t(pack_head_amx_bwd<S>(p, hp, bh, data + bh * hp.per_head, j0, j1));
    }
    return bad != 0;
}

template <class S>
struct AmxBwdLayout {
    static constexpr int64_t Bq = S::kBwdBlockQ, Bk = S::kBwdBlockK;
    static_assert(Bq % 32 == 0 && Bk % 32 == 0);
    int64_t nqb, Dvq;
    int64_t qt, dot, qw, dow, qpw, dopw, lse, lo, dd, lim, kfirst, kmin, kmax, fmin, fmax;
    int64_t st, pd, ds, dcap, pdw, dsw, dstw, dkacc, dvacc, dqt, head, total;
    /// own_head: one (batch, kv head) per task, whose AmxBwdHeads the task packs into `head`.
    AmxBwdLayout(const AttentionParams<float>& p, const AmxBwdHeads& hp, bool own_head) {
        nqb        = (p.Tq + Bq - 1) / Bq;
        Dvq        = round_up(p.Dv, 16);
        int64_t at = 0;
        auto take = [&](int64_t n) {
            const int64_t r = at;
            at += round_up(n, 16);
            return r;
        };
        qt = take(p.D * Bq), dot = take(p.Dv * Bq);  // scratch of pack_transposed
        // per query block of the head (words: 2 bf16 per float slot)
        qw = take(nqb * hp.Dwp * Bq), dow = take(nqb * hp.Dvwp * Bq);
        qpw = take(nqb * Bq / 2 * hp.Dq), dopw = take(nqb * Bq / 2 * Dvq);
        lse = take(nqb * Bq), lo = take(nqb * Bq), dd = take(nqb * Bq), lim = take(nqb * Bq),
        kfirst = take(nqb * Bq), kmin = take(nqb), kmax = take(nqb), fmin = take(nqb), fmax = take(nqb);
        // per key block
        st = take(Bk * Bq), pd = take(p.dropout_p > 0 ? Bk * Bq : 0), ds = take(Bk * Bq),
        dcap = take(p.softcap > 0.0f ? Bk * Bq : 0);
        pdw = take(Bk * Bq / 2), dsw = take(Bk * Bq / 2), dstw = take(Bk / 2 * Bq);
        dkacc = take(Bk * hp.Dq), dvacc = take(Bk * Dvq);
        dqt  = take(nqb * hp.Dq * Bq);
        head = take(own_head ? (hp.per_head + 1) / 2 : 0);  // bf16 values, 2 per float slot
        total = at;
    }
};

/// Packs what every key block of head (b, h) reads (AmxBwdLayout's per-query-block parts) and
/// zeroes its dQ^T.
template <class S>
void prepare_head_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                      const AmxBwdLayout<S>& L, const AmxBwdHeads& hp, float* ws, int64_t b, int64_t h) {
    constexpr int64_t Bq  = AmxBwdLayout<S>::Bq;
    const float*      q0  = p.q + b * p.q_stride_b + h * p.q_stride_h;
    const float*      do0 = g.dout + b * p.o_stride_b + h * p.o_stride_h;
    const float*      o0  = p.out + b * p.o_stride_b + h * p.o_stride_h;
    const float*      lse = p.lse + (b * p.H + h) * p.Tq;
    const ScaleSplit  sc  = split_scale(p.scale);
    const int64_t     Dw = (p.D + 1) / 2, Dvw = (p.Dv + 1) / 2;
    auto*             w  = reinterpret_cast<uint32_t*>(ws);
    for (int64_t qb = 0; qb < L.nqb; ++qb) {
        const int64_t i0 = qb * Bq, nq = min64(Bq, p.Tq - i0), nqw = (nq + 1) / 2;
        uint32_t *    qw = w + L.qw + qb * hp.Dwp * Bq, *dow = w + L.dow + qb * hp.Dvwp * Bq;
        uint32_t *    qpw = w + L.qpw + qb * Bq / 2 * hp.Dq, *dopw = w + L.dopw + qb * Bq / 2 * L.Dvq;
        pack_transposed<S>(ws + L.qt, Bq, q0 + i0 * p.q_stride_t, p.q_stride_t, nq, Bq, p.D, sc.pow2);
        pack_row_pairs<S>(qw, Bq, ws + L.qt, Bq, p.D, Bq, Bq);
        std::memset(qw + Dw * Bq, 0, size_t((hp.Dwp - Dw) * Bq) * 4);
        pack_transposed<S>(ws + L.dot, Bq, do0 + i0 * p.o_stride_t, p.o_stride_t, nq, Bq, p.Dv, 1.0f);
        pack_row_pairs<S>(dow, Bq, ws + L.dot, Bq, p.Dv, Bq, Bq);
        std::memset(dow + Dvw * Bq, 0, size_t((hp.Dvwp - Dvw) * Bq) * 4);
        pack_row_pairs<S>(qpw, hp.Dq, q0 + i0 * p.q_stride_t, p.q_stride_t, nq, p.D, hp.Dq);
        std::memset(qpw + nqw * hp.Dq, 0, size_t((Bq / 2 - nqw) * hp.Dq) * 4);
        if (L.Dvq > 0) {
            pack_row_pairs<S>(dopw, L.Dvq, do0 + i0 * p.o_stride_t, p.o_stride_t, nq, p.Dv, L.Dvq);
            std::memset(dopw + nqw * L.Dvq, 0, size_t((Bq / 2 - nqw) * L.Dvq) * 4);
        }
        for (int64_t i = 0; i < Bq; ++i) {
            float lv = INFINITY, lov = 0.0f, dv = 0.0f;
            if (i < nq) {
                lv  = lse[i0 + i] == -INFINITY ? INFINITY : lse[i0 + i];
                lov = p.lse_lo && lv != INFINITY ? p.lse_lo[(b * p.H + h) * p.Tq + i0 + i] : 0.0f;
                const float* a = do0 + (i0 + i) * p.o_stride_t;
                const float* o = o0 + (i0 + i) * p.o_stride_t;
                // D = rowsum(dO o O) of the bf16 dO the products use, as prepare_head's
                for (int64_t e = 0; e < p.Dv; ++e) dv += bf16_round1(a[e]) * o[e];
            }
            ws[L.lse + qb * Bq + i] = lv;
            ws[L.lo + qb * Bq + i]  = lov;
            ws[L.dd + qb * Bq + i]  = dv;
        }
        const KeyRange r = key_limits<S>(p, b, i0, nq, Bq, ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq);
        ws[L.kmin + qb] = float(r.kmin);
        ws[L.kmax + qb] = float(r.kmax);
        ws[L.fmin + qb] = float(r.fmin);
        ws[L.fmax + qb] = float(r.fmax);
    }
    std::memset(ws + L.dqt, 0, size_t(L.nqb * hp.Dq * Bq) * 4);
}

/// Key block kb of head (b, h) against every query block that sees it; dK_j and dV_j are written
/// (first) or added (later heads of a GQA group) at the end.
template <class S, class T>
void backward_key_block_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                            const AmxBwdLayout<S>& L, const AmxBwdHeads& hp, const uint16_t* head, float* ws,
                            int64_t b, int64_t h, int64_t kb, bool first) {
    constexpr int64_t Bq    = AmxBwdLayout<S>::Bq, Bk = AmxBwdLayout<S>::Bk;
    const int64_t     hk    = h / (p.H / p.Hkv);
    const int64_t     j0    = kb * Bk, nk = min64(Bk, p.Tk - j0), nkp = round_up(nk, 16);
    const int64_t     nkw   = (nk + 1) / 2, nkwp = round_up(nkw, 16);
    auto*             w     = reinterpret_cast<uint32_t*>(ws);
    float *st = ws + L.st, *ds = ws + L.ds, *pd = p.dropout_p > 0 ? ws + L.pd : st, *dcap = ws + L.dcap;
    float *dkacc = ws + L.dkacc, *dvacc = ws + L.dvacc;
    const ScaleSplit sc       = split_scale(p.scale);
    const uint32_t   thr      = attention_dropout_threshold(p.dropout_p);
    const float      keep     = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
    std::memset(dkacc, 0, size_t(nkp * hp.Dq) * 4);
    std::memset(dvacc, 0, size_t(nkp * L.Dvq) * 4);
    for (int64_t qb = 0; qb < L.nqb; ++qb) {
        if (int64_t(ws[L.kmax + qb]) < j0 || int64_t(ws[L.fmin + qb]) > j0 + nk - 1) continue;
        const int64_t i0 = qb * Bq, nq = min64(Bq, p.Tq - i0);
        const float * lse = ws + L.lse + qb * Bq, *lo = ws + L.lo + qb * Bq, *dd = ws + L.dd + qb * Bq;
        // S^T = K_j Q^T (rows past nk not read), the rest of the scale, masks, P lane-wise.
        tile_gemm<T>(nkp, Bq, hp.Dwp, hp.k(head) + j0 * 2 * hp.Dwp, 4 * hp.Dwp, w + L.qw + qb * hp.Dwp * Bq, 4 * Bq,
                     st, 4 * Bq, false);
        scale_tile<S>(st, nk * Bq, sc.m);
        backward_probabilities<S, Bq>(p, st, pd, dcap, nk, nq, b, h, i0, j0, int64_t(ws[L.kmin + qb]),
                                      int64_t(ws[L.fmax + qb]), ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq, lse, lo,
                                      thr, keep);
        // dP~^T = V_j dO^T
        tile_gemm<T>(nkp, Bq, hp.Dvwp, hp.v(head) + j0 * 2 * hp.Dvwp, 4 * hp.Dvwp, w + L.dow + qb * hp.Dvwp * Bq,
                     4 * Bq, ds, 4 * Bq, false);
        backward_ds<S, Bq>(p, st, pd, ds, dcap, nk, dd);
        // Pd^T and dS^T as bf16 rows (dV, dK), dS^T as words along the keys (dQ^T; word rows past
        // the block's keys 0, as they meet the K^T columns of later keys).
        pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.pdw), Bq, pd, Bq, nk, Bq);
        pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(w + L.dsw), Bq, ds, Bq, nk, Bq);
        pack_row_pairs<S>(w + L.dstw, Bq, ds, Bq, nk, Bq, Bq);
        std::memset(w + L.dstw + nkw * Bq, 0, size_t((nkwp - nkw) * Bq) * 4);
        if (L.Dvq > 0)
            tile_gemm<T>(nkp, L.Dvq, Bq / 2, reinterpret_cast<const uint16_t*>(w + L.pdw), 2 * Bq,
                         w + L.dopw + qb * Bq / 2 * L.Dvq, 4 * L.Dvq, dvacc, 4 * L.Dvq, true);
        tile_gemm<T>(nkp, hp.Dq, Bq / 2, reinterpret_cast<const uint16_t*>(w + L.dsw), 2 * Bq,
                     w + L.qpw + qb * Bq / 2 * hp.Dq, 4 * hp.Dq, dkacc, 4 * hp.Dq, true);
        tile_gemm<T>(hp.Dq, Bq, nkwp, hp.kt(head) + j0, 2 * hp.Tkp, w + L.dstw, 4 * Bq, ws + L.dqt + qb * hp.Dq * Bq,
                     4 * Bq, true);
    }
    float*        dk  = g.dk + b * g.dk_stride_b + hk * g.dk_stride_h + j0 * g.dk_stride_t;
    float*        dv  = g.dv + b * g.dv_stride_b + hk * g.dv_stride_h + j0 * g.dv_stride_t;
    const int64_t ldk = g.dk_stride_t, ldv = g.dv_stride_t;
    for (int64_t j = 0; j < nk; ++j) {
        for (int64_t d = 0; d < p.D; ++d) dk[j * ldk + d] = (first ? 0.0f : dk[j * ldk + d]) + dkacc[j * hp.Dq + d];
        for (int64_t e = 0; e < p.Dv; ++e) dv[j * ldv + e] = (first ? 0.0f : dv[j * ldv + e]) + dvacc[j * L.Dvq + e];
    }
}

/// dq (Tq rows of D, row stride ldq) = this thread's dQ^T of head h.
template <class S>
void write_dq_amx(const AttentionParams<float>& p, const AmxBwdLayout<S>& L, const AmxBwdHeads& hp,
                  const float* ws, float* dq, int64_t ldq) {
    constexpr int64_t Bq = AmxBwdLayout<S>::Bq;
    alignas(64) float blk[16 * 16];
    for (int64_t i0 = 0; i0 < p.Tq; i0 += 16) {
        const float* src = ws + L.dqt + i0 / Bq * hp.Dq * Bq + i0 % Bq;
        for (int64_t d = 0; d < p.D; d += 16) {
            S::transpose16(reinterpret_cast<const uint32_t*>(src + d * Bq), Bq, reinterpret_cast<uint32_t*>(blk), 16);
            const auto m = S::tail(int(min64(16, p.D - d)));
            for (int64_t i = i0; i < min64(i0 + 16, p.Tq); ++i) S::storem(dq + i * ldq + d, S::load(blk + (i - i0) * 16), m);
        }
    }
}

/// The AMX backward; false when K or V holds a non-finite bf16 value (the caller then runs another
/// build, which overwrites every gradient). Schedule as backward(): one (b, kv head) per task,
/// which packs its head into its workspace, or key blocks split across threads with private dQs
/// (all heads packed once into flash_call_buffer: fewer heads than threads).
template <class S, class T>
bool backward_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g0) {
    const AttentionGradParams<float> g = with_grad_strides(p, g0);
    QKV_ASSERT(p.bf16 && p.Tq < (int64_t(1) << 24) && p.Tk < (int64_t(1) << 24));
    const AmxBwdHeads hp(p);
    constexpr int64_t Bk        = AmxBwdLayout<S>::Bk;
    const int64_t     nkb       = (p.Tk + Bk - 1) / Bk;
    const int64_t     group     = p.H / p.Hkv;
    const int64_t     nthreads  = omp_get_max_threads();
    constexpr int     kMaxSplit = 64;
    if (p.B * p.Hkv >= nthreads || nthreads > kMaxSplit || nkb == 1) {
        const AmxBwdLayout<S> L(p, hp, true);
        std::atomic<bool>     bad{false};
#pragma omp parallel
        {
            float*    ws   = detail::flash_thread_workspace(L.total);
            uint16_t* head = reinterpret_cast<uint16_t*>(ws + L.head);
            T::begin();
#pragma omp for schedule(dynamic, 1)
            for (int64_t bk = 0; bk < p.B * p.Hkv; ++bk) {
                if (bad.load(std::memory_order_relaxed)) continue;
                if (pack_head_amx_bwd<S>(p, hp, bk, head, 0, hp.Tkp)) {
                    bad.store(true, std::memory_order_relaxed);
                    continue;
                }
                const int64_t b = bk / p.Hkv, hk = bk % p.Hkv;
                for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                    if (bad.load(std::memory_order_relaxed)) break;  // the call is redone: stop early
                    prepare_head_amx<S>(p, g, L, hp, ws, b, h);
                    for (int64_t kb = 0; kb < nkb; ++kb)
                        backward_key_block_amx<S, T>(p, g, L, hp, head, ws, b, h, kb, h == hk * group);
                    write_dq_amx<S>(p, L, hp, ws, g.dq + b * g.dq_stride_b + h * g.dq_stride_h, g.dq_stride_t);
                }
            }
            T::end();
        }
        return !bad.load();
    }
    auto* data = static_cast<uint16_t*>(detail::flash_call_buffer(p.B * p.Hkv * hp.per_head * 2));
    if (pack_heads_amx_bwd<S>(p, hp, data)) return false;
    const AmxBwdLayout<S> L(p, hp, false);
    // Few heads: key blocks split across threads (static round robin: reproducible for a thread
    // count), each thread's dQ^T transposed into its private rows, then summed.
    std::vector<float> priv(size_t(nthreads * p.Tq * p.D));
#pragma omp parallel
    {
        float*    ws  = detail::flash_thread_workspace(L.total);
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        float*    mine = priv.data() + int64_t(tid) * p.Tq * p.D;
        T::begin();
        for (int64_t b = 0; b < p.B; ++b)
            for (int64_t hk = 0; hk < p.Hkv; ++hk)
                for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                    prepare_head_amx<S>(p, g, L, hp, ws, b, h);
#pragma omp for schedule(static, 1)
                    for (int64_t kb = 0; kb < nkb; ++kb)
                        backward_key_block_amx<S, T>(p, g, L, hp, data + (b * p.Hkv + hk) * hp.per_head, ws, b, h,
                                                     kb, h == hk * group);
                    write_dq_amx<S>(p, L, hp, ws, mine, p.D);
#pragma omp barrier
                    float* dq = g.dq + b * g.dq_stride_b + h * g.dq_stride_h;
#pragma omp for
                    for (int64_t t = 0; t < p.Tq * p.D; ++t) {
                        float acc = 0.0f;
                        for (int u = 0; u < nt; ++u) acc += priv[size_t(int64_t(u) * p.Tq * p.D + t)];
                        dq[t / p.D * g.dq_stride_t + t % p.D] = acc;
                    }
                }
        T::end();
    }
    return true;
}
#endif

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
#endif
