#pragma once
// Flash attention's AMX forward: the score and P.V products on tiles (simd_amx.h), the softmax,
// masks and dropout as flash_forward.h. Compiled where AVX-512-BF16 is (the AMX build, and the
// AVX-512-BF16 build for the emulated tiles). Part of the kernels over a traits struct S
// (flash_attention_impl.h).
#include <omp.h>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/flash_masks.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_amx_forward.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

#if defined(__AVX512BF16__)
// ---------------------------------------------------------------------------------------------
// AMX forward (Bf16AttentionPath::amx; docs §10). The score and P.V products run on tiles
// (simd_amx.h: T = TilesHw or TilesEmu), the online softmax, masks and dropout on the vector
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

/// One K or V row of a zero-padded bf16 head pack (`words` 32-bit words): bf16(src[0, cols)), then
/// zeros; all zeros when src is null (a key past Tk). Returns whether a value is ±inf or NaN as
/// bf16.
template <class S>
bool pack_padded_row(uint16_t* dst, int64_t words, const float* src, int64_t cols) {
    const int64_t pad = src ? cols + cols % 2 : 0;  // pack_rows_bf16 writes [0, pad)
    std::memset(dst + pad, 0, size_t(2 * words - pad) * 2);
    if (!src) return false;
    pack_rows_bf16<S>(dst, 0, src, 0, 1, cols);
    uint32_t bad = 0;
    for (int64_t d = 0; d < cols; ++d) bad |= uint32_t((dst[d] & 0x7f80u) == 0x7f80u);
    return bad != 0;
}

/// Keys [j0, j1) (multiples of 32) of one head's rows x0 + j * stride (cols values, Tk keys) as
/// transposed word pairs (keys 2j', 2j' + 1 of each column) at dst + j / 2, Tkp / 2 words per
/// column, cols_p columns: V^T for the forward, K^T for the backward. Returns whether a word
/// holds ±inf or NaN.
template <class S>
bool pack_transposed_keys(uint32_t* dst, int64_t Tkp, const float* x0, int64_t stride, int64_t Tk, int64_t cols,
                          int64_t cols_p, int64_t j0, int64_t j1) {
    bool bad = false;
    for (int64_t j = j0; j < j1; j += 32)
        if (pack_transposed_pairs32<S>(dst + j / 2, Tkp / 2, j < Tk ? x0 + j * stride : x0, stride, max64(0, Tk - j),
                                       cols, cols_p))
            bad = true;
    return bad;
}

/// pack(bh, j0, j1) for every (batch, kv head) bh and chunk [j0, j1) of 256 keys of [0, Tkp),
/// parallel over both when the packs hold over 2^16 values. Returns whether a call returned true.
template <class Pack>
bool pack_key_chunks(int64_t heads, int64_t Tkp, int64_t per_head, Pack pack) {
    constexpr int64_t kRows = 256;
    const int64_t     nch   = (Tkp + kRows - 1) / kRows;
    uint32_t          bad   = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (heads * per_head > (1 << 16))
    for (int64_t t = 0; t < heads * nch; ++t) {
        const int64_t bh = t / nch, j0 = t % nch * kRows, j1 = min64(Tkp, j0 + kRows);
        if (j0 < j1) bad |= uint32_t(pack(bh, j0, j1));
    }
    return bad != 0;
}

/// Packs AmxHeads. Returns whether some K or V value is ±inf or NaN as bf16: a tile product reads
/// keys outside the visible ones with P = 0 (0 . inf = NaN), so such inputs take the dot build,
/// which never reads hidden rows.
template <class S>
bool pack_heads_amx(const AttentionParams<float>& p, const AmxHeads& hp) {
    return pack_key_chunks(p.B * p.Hkv, hp.Tkp, hp.per_head, [&](int64_t bh, int64_t j0, int64_t j1) {
        const int64_t b = bh / p.Hkv, hk = bh % p.Hkv;
        const float*  k0 = p.k + b * p.k_stride_b + hk * p.k_stride_h;
        uint16_t*     kp = const_cast<uint16_t*>(hp.k(bh));
        bool          bad = false;
        for (int64_t j = j0; j < j1; ++j)
            if (pack_padded_row<S>(kp + j * 2 * hp.Dwp, hp.Dwp, j < p.Tk ? k0 + j * p.k_stride_t : nullptr, p.D))
                bad = true;
        auto* vt = reinterpret_cast<uint32_t*>(const_cast<uint16_t*>(hp.vt(bh)));
        return pack_transposed_keys<S>(vt, hp.Tkp, p.v + b * p.v_stride_b + hk * p.v_stride_h, p.v_stride_t, p.Tk,
                                       p.Dv, hp.Dvq, j0, j1) ||
               bad;
    });
}

template <class S, int64_t BQ>
struct AmxFwdLayout {
    static constexpr int64_t Bq = BQ, Bk = S::kBlockK;
    static_assert(Bq % 16 == 0 && Bk % 32 == 0);
    int64_t qt, st, kt, ot, m, l, alpha, lim, kfirst, psum, qw, pw, total;  // float offsets into the workspace
    AmxFwdLayout(const AttentionParams<float>& p, const AmxHeads& hp) {
        Carve c;
        qt = c.take(p.D * Bq), st = c.take(Bk * Bq), kt = c.take(p.dropout_p > 0 ? Bk * Bq : 0), ot = c.take(hp.Dvq * Bq),
        m = c.take(Bq), l = c.take(Bq), alpha = c.take(Bq), lim = c.take(Bq), kfirst = c.take(Bq), psum = c.take(Bq);
        qw = c.take(hp.Dwp * Bq), pw = c.take(Bk / 2 * Bq);  // words: Q^T (Dwp rows), P^T (up to Bk/2 rows)
        total = c.at;
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

    const FwdFlags fl(p);
    const int64_t  kend = kmax + 1;
    // V^T words pair the keys j0 + 2j', j0 + 2j' + 1 of each block, as the P^T words do: tiles
    // load from any byte offset, so j0 need not be even.
    for (int64_t j0 = fmin; j0 < kend; j0 += Bk) {
        const int64_t nk = min64(Bk, kend - j0), nkp = round_up(nk, 16);
        const ScoreTile tile{p, b, h, i0, nq, j0, nk, kmin, fmax, lim, kfirst};
        // S^T = K_j Q^T (nkp x Bq; the rows past nk are not read), then the rest of the scale.
        tile_gemm<T>(nkp, Bq, hp.Dwp, kp + j0 * 2 * hp.Dwp, 4 * hp.Dwp, qw, 4 * Bq, st, 4 * Bq, false);
        scale_tile<S>(st, nk * Bq, sc.m);
        bool classic = fl.general || j0 + nk - 1 > kmin || j0 < fmax;
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
            if (!fl.dropout) {
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
                exp_tile<S, Bq>(st, nk, mv, sv);
            }
            for (int64_t v = 0; v < NQV; ++v) S::store(psum + v * W, sv[v]);
            rescale = !accept_block_sums<S, Bq>(l, psum);
            if (rescale) {  // rare: recompute S and take the new maximum as the shift
                classic = true, packed = false;
                tile_gemm<T>(nkp, Bq, hp.Dwp, kp + j0 * 2 * hp.Dwp, 4 * hp.Dwp, qw, 4 * Bq, st, 4 * Bq, false);
                scale_tile<S>(st, nk * Bq, sc.m);
            }
        }
        if (classic)
            masked_online_softmax<S, Bq>(tile, st, m, alpha, l);
        if (fl.dropout) apply_dropout_keep<S, Bq>(tile, st, kt, fl.thr);
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
    // out = O / l (times 1/(1-p)), lse as forward_block; alpha is free now: 1/l per query for the
    // write-back.
    finish_rows(p, b, h, i0, nq, m, l, alpha);
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

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
