#pragma once
// Flash attention's forward (FlashAttention-2, Alg. 1) on the fp32 tiles or the vdpbf16ps word
// GEMMs: one work item per (batch, head, query block), lazy rescaling in unmasked blocks.
// Part of the kernels over a traits struct S (flash_attention_impl.h).
#include <omp.h>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/flash_masks.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_forward.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

// ---------------------------------------------------------------------------------------------
// Forward. One work item = (b, h, query block); see the docs for the online softmax.

template <class S, int64_t BQ = S::kBlockQ>
struct FwdLayout {
    static constexpr int64_t Bq = BQ, Bk = S::kBlockK;
    int64_t qt, st, kt, o, m, l, alpha, lim, kfirst, psum, kr, vr, qw, kw, pw, vw, total;  // float offsets into the workspace
    FwdLayout(const AttentionParams<float>& p) {
        const int64_t Dvp = round_up(p.Dv, S::W);
        Carve c;
        qt = c.take(p.D * Bq), st = c.take(Bk * Bq), kt = c.take(p.dropout_p > 0 ? Bk * Bq : 0),
        o = c.take(Bq * Dvp), m = c.take(Bq), l = c.take(Bq), alpha = c.take(Bq), lim = c.take(Bq),
        kfirst = c.take(Bq), psum = c.take(Bq);
        kr = c.take(p.bf16 ? Bk * p.D : 0), vr = c.take(p.bf16 ? Bk * p.Dv : 0);  // bf16 K and V blocks
        // kDot: word operands (2 bf16 per float slot) of Q^T, the K block, P^T and the V block
        const int64_t Dw = kDot<S> ? (p.D + 1) / 2 : 0, Bkw = kDot<S> ? Bk / 2 : 0;
        qw = c.take(Dw * Bq), kw = c.take(Bk * Dw), pw = c.take(Bkw * Bq), vw = c.take(Bkw * Dvp);
        total = c.at;
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

    const FwdFlags fl(p);
    // Keys [fmin, kmax] are all any row sees: a sliding window costs N·window, not N².
    const int64_t kend = kmax + 1;
    for (int64_t j0 = fmin; j0 < kend; j0 += Bk) {
        const int64_t nk      = min64(Bk, kend - j0);
        const ScoreTile tile{p, b, h, i0, nq, j0, nk, kmin, fmax, lim, kfirst};
        const float*  kj      = kbase + j0 * p.k_stride_t;
        int64_t       ks      = p.k_stride_t;
        if constexpr (dot) {
            pack_rows_bf16<S>(reinterpret_cast<uint16_t*>(kw), 2 * Dw, kj, p.k_stride_t, nk, p.D);
        } else if (p.bf16) {  // the block's keys as bf16 values, dense
            round_rows_bf16<S>(ws + L.kr, kj, nk, p.D, p.k_stride_t);
            kj = ws + L.kr, ks = p.D;
        }
        bool          classic = fl.general || j0 + nk - 1 > kmin || j0 < fmax;  // a block with masked scores
        bool          rescale = true;
        if (!classic) {
            // Unmasked block: the score tiles leave their registers as P = e^(s - m) with the
            // current shifts m (lazy rescaling: m only moves when the block's maximum exceeds it
            // by more than kShiftSlack, so P <= e^kShiftSlack and O needs no rescale). Saves
            // the passes that store S, find the row max and reload S for the exp.
            for (int64_t v = 0; v < NQV; ++v) S::store(psum + v * W, S::zero());
            if constexpr (dot) gemm_exp<S>(nk, Bq, Dw, kw, Dw, qw, Bq, st, Bq, m, psum, sc.m);
            else gemm_exp<S>(nk, Bq, p.D, kj, ks, qt, Bq, st, Bq, m, psum);
            rescale = !accept_block_sums<S, Bq>(l, psum);
            classic = rescale;  // rare: recompute S and take the new maximum as the shift
        }
        if (classic) {
            // S^T = K_j Q^T (nk x Bq), reduction over D.
            if constexpr (dot) gemm<S, kStore, false, false>(nk, Bq, Dw, kw, Dw, qw, Bq, st, Bq, nullptr, sc.m);
            else gemm<S, kStore, false, false>(nk, Bq, p.D, kj, ks, qt, Bq, st, Bq);
            masked_online_softmax<S, Bq>(tile, st, m, alpha, l);
        }
        if (fl.dropout) apply_dropout_keep<S, Bq>(tile, st, kt, fl.thr);
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
            pv_skipping_zeros<Bq>(tile, o, Dvp, st, vj, vs, rescale ? alpha : nullptr);
        else if (rescale) gemm<S, kScaleAcc, true>(nq, p.Dv, nk, st, Bq, vj, vs, o, Dvp, alpha);
        else gemm<S, kAcc, true>(nq, p.Dv, nk, st, Bq, vj, vs, o, Dvp);
    }
    // out = O / l (times 1/(1-p)); fully masked rows (l = 0) give 0 and lse = -inf. alpha is free
    // now: 1/l per query for the write-back.
    finish_rows(p, b, h, i0, nq, m, l, alpha);
    for (int64_t i = 0; i < nq; ++i) {
        if (p.Dv == 0) continue;
        float*       dst = out0 + i * p.o_stride_t;
        const float* src = o + i * Dvp;
        const V      iv  = S::set1(alpha[i]);
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

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
