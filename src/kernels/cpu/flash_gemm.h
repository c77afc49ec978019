#pragma once
// Flash attention's GEMM tiles (part of the kernels written once over a SIMD traits struct S,
// flash_traits.h; flash_attention_impl.h lists the parts): the register-tiled micro-kernels (fp32
// or bf16 word operands), the score tile with the softmax in its epilogue, the packing of Q^T /
// dO^T blocks, bf16 rounding and the word packs of the vdpbf16ps build.
//
// Layout trick: score tiles are kept transposed, S^T[j][i] (keys are rows, queries are SIMD
// lanes), so the online-softmax row max, exp, row sum and rescale are all lane-wise vertical
// operations (no horizontal reductions), index masks are one lane compare per key, and no tile of
// K or V is ever packed: every GEMM broadcasts K/V elements straight from their rows and streams
// vectors from a small packed Q^T / dO^T block or a tile. Head dims never need SIMD tails in
// the score GEMMs (D is the reduction); the P.V, dV, dK and dQ GEMMs use masked tail vectors.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/flash_traits.h"
#include "kernels/params.h"
#include "qkv/core/error.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_gemm.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

/// The workspace layouts' allocator: take(n) gives the float offset of the next n floats, each
/// slot rounded up to 16 floats (64 bytes); `at` is the total so far.
struct Carve {
    int64_t at = 0;
    int64_t take(int64_t n) {
        const int64_t r = at;
        at += round_up(n, 16);
        return r;
    }
};

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
/// words (flash_traits.h: SimdAvx512Dot; one vdpbf16ps per word, two reduction steps).
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

/// The register tiles of the tiled GEMMs, r rows x nv vectors (1 <= r <= kR <= 6, 1 <= nv <=
/// kNV <= 4): X(r, nv) for each, as the cases of a switch on r * 8 + nv (the runtime size of an
/// edge tile picks its micro-kernel instance, called directly).
#define QKV_FLASH_TILES(X)                                      \
    X(1, 1); X(1, 2); X(1, 3); X(1, 4); X(2, 1); X(2, 2);       \
    X(2, 3); X(2, 4); X(3, 1); X(3, 2); X(3, 3); X(3, 4);       \
    X(4, 1); X(4, 2); X(4, 3); X(4, 4); X(5, 1); X(5, 2);       \
    X(5, 3); X(5, 4); X(6, 1); X(6, 2); X(6, 3); X(6, 4)

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
#define QKV_MK(R_, NV_)                                                                                    \
    case (R_) * 8 + (NV_):                                                                                 \
        if (!CanTail || full) micro<S, R_, NV_, Md, AM1, false>(K, a, as, b, bk, c, cm, tail, rs, oscale); \
        else micro<S, R_, NV_, Md, AM1, CanTail>(K, a, as, b, bk, c, cm, tail, rs, oscale);               \
        break
            switch (r * 8 + nv) {
                QKV_FLASH_TILES(QKV_MK);
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
#define QKV_MK(R_, NV_)                                                                \
    case (R_) * 8 + (NV_):                                                             \
        micro_exp<S, R_, NV_>(K, a, as, b, bk, c, cm, m + n0, sum + n0, f, oscale); \
        break
            switch (r * 8 + nv) {
                QKV_FLASH_TILES(QKV_MK);
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

#undef QKV_FLASH_TILES

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
