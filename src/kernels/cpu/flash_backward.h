#pragma once
// Flash attention's backward (FlashAttention-2, Alg. 2) on the fp32 tiles or the vdpbf16ps word
// GEMMs: per (batch, head) the query blocks are packed once, then each key block runs against the
// query blocks that see it (five GEMMs). Part of the kernels over a traits struct S
// (flash_attention_impl.h).
#include <omp.h>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/flash_masks.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_backward.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

// ---------------------------------------------------------------------------------------------
// Backward. Per (b, h) prepare_head packs Q^T and dO^T of every query block, the per-lane lse
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
        Carve c;
        qt = c.take(nqb * p.D * Bq), dot = c.take(nqb * p.Dv * Bq), lse = c.take(nqb * Bq), lo = c.take(nqb * Bq),
        dd = c.take(nqb * Bq), lim = c.take(nqb * Bq), kfirst = c.take(nqb * Bq), kmin = c.take(nqb), kmax = c.take(nqb),
        fmin = c.take(nqb), fmax = c.take(nqb),
        st = c.take(Bk * Bq), pd = c.take(p.dropout_p > 0 ? Bk * Bq : 0), ds = c.take(Bk * Bq),
        dcap = c.take(p.softcap > 0.0f ? Bk * Bq : 0),
        dq = c.take(private_dq ? p.Tq * p.D : 0);
        // bf16: the head's Q and dO rows and the key block's K and V rows as dense bf16 values
        qr = c.take(p.bf16 ? p.Tq * p.D : 0), dor = c.take(p.bf16 ? p.Tq * p.Dv : 0);
        kr = c.take(p.bf16 ? Bk * p.D : 0), vr = c.take(p.bf16 ? Bk * p.Dv : 0);
        // kDot word operands (2 bf16 per float slot): per query block Q^T and dO^T (along D, Dv)
        // and the Q and dO rows in pairs along the queries; per key block the K and V rows along
        // D and Dv, the K rows in pairs along the keys, Pd and dS along the queries and dS^T along
        // the keys.
        const bool    w   = kDot<S>;
        const int64_t Dw = (p.D + 1) / 2, Dvw = (p.Dv + 1) / 2;
        const int64_t Dp = round_up(p.D, S::W), Dvp = round_up(p.Dv, S::W);
        qw = c.take(w ? nqb * Dw * Bq : 0), dow = c.take(w ? nqb * Dvw * Bq : 0);
        qpw = c.take(w ? nqb * Bq / 2 * Dp : 0), dopw = c.take(w ? nqb * Bq / 2 * Dvp : 0);
        kw = c.take(w ? Bk * Dw : 0), vw = c.take(w ? Bk * Dvw : 0), kpw = c.take(w ? Bk / 2 * Dp : 0);
        pdw = c.take(w ? Bk * Bq / 2 : 0), dsw = c.take(w ? Bk * Bq / 2 : 0), dstw = c.take(w ? Bk / 2 * Bq : 0);
        total = c.at;
    }
};

/// The per-lane values of query block qb of head (b, h) that every key block reads, into the
/// layout's slots (BwdLayout, AmxBwdLayout): lse with -inf made +inf (a fully masked row gives
/// P = 0), lse_lo, D = rowsum(dO o O) with dO through `round` as the products read it (do0: the
/// head's dO rows, ds apart), and the key ranges.
template <class S, int64_t Bq, class Layout, class Round>
void prepare_lanes(const AttentionParams<float>& p, const Layout& L, float* ws, int64_t b, int64_t h, int64_t qb,
                   const float* do0, int64_t ds, Round round) {
    const float*  o0  = p.out + b * p.o_stride_b + h * p.o_stride_h;
    const float*  lse = p.lse + (b * p.H + h) * p.Tq;
    const int64_t i0 = qb * Bq, nq = min64(Bq, p.Tq - i0);
    for (int64_t i = 0; i < Bq; ++i) {
        float lv = INFINITY, lov = 0.0f, dv = 0.0f;
        if (i < nq) {
            lv  = lse[i0 + i] == -INFINITY ? INFINITY : lse[i0 + i];
            lov = p.lse_lo && lv != INFINITY ? p.lse_lo[(b * p.H + h) * p.Tq + i0 + i] : 0.0f;
            const float* a = do0 + (i0 + i) * ds;
            const float* o = o0 + (i0 + i) * p.o_stride_t;
            for (int64_t e = 0; e < p.Dv; ++e) dv += round(a[e]) * o[e];
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

/// Packs what every key block of head (b, h) needs (see BwdLayout).
template <class S>
void prepare_head(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                  const BwdLayout<S>& L, float* ws, int64_t b, int64_t h) {
    constexpr int64_t Bq = BwdLayout<S>::Bq;
    const float* q0  = p.q + b * p.q_stride_b + h * p.q_stride_h;
    const float* do0 = g.dout + b * p.o_stride_b + h * p.o_stride_h;
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
        prepare_lanes<S, Bq>(p, L, ws, b, h, qb, do0, ds, [](float x) { return x; });
    }
}

/// The backward's probabilities of score tile st (nk keys x Bq lanes; its place and key ranges in
/// `tile`, from prepare_head): score modifiers (dcap: d cap/dx, when a soft cap is set), masks,
/// P = exp((S - lse) - lse_lo) lane-wise in st (lse, lo: the query block's lanes), and with
/// dropout Pd = P Z in pd (Z = 1/(1-p) or 0).
template <class S, int64_t Bq>
void backward_probabilities(const ScoreTile& tile, float* st, float* pd, float* dcap, const float* lse,
                            const float* lo) {
    using V               = typename S::V;
    constexpr int     W   = S::W;
    constexpr int64_t NQV = Bq / W;
    const AttentionParams<float>& p  = tile.p;
    const int64_t                 nk = tile.nk;
    apply_masks<S, Bq>(tile, st, dcap);
    V lv[NQV], lov[NQV];
    for (int64_t v = 0; v < NQV; ++v) lv[v] = S::load(lse + v * W), lov[v] = S::load(lo + v * W);
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) {
            float* s = st + j * Bq + v * W;
            S::store(s, S::exp(S::sub(S::sub(S::load(s), lv[v]), lov[v])));
        }
    if (p.dropout_p > 0.0f) {
        const float keep = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
        dropout_tile<S, Bq>(tile, pd, attention_dropout_threshold(p.dropout_p), keep);
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

/// One task of the backward: key block kb of head (b, h) against every query block that sees it.
/// first: the group's first query head (dk/dv rows of the block are written, not added). dq_acc:
/// (Tq, D) rows (row stride ldq) of this head's dq or a private accumulator (not used by the AMX
/// backward, which keeps dQ^T in its workspace).
struct KeyBlockTask {
    int64_t b, h, kb;
    bool    first;
    float*  dq_acc = nullptr;
    int64_t ldq    = 0;
};

template <class S>
void backward_key_block(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                        const BwdLayout<S>& L, float* ws, const KeyBlockTask& task) {
    const int64_t b = task.b, h = task.h, kb = task.kb, ldq = task.ldq;
    float* const  dq_acc = task.dq_acc;
    const bool    first  = task.first;
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
        const ScoreTile tile{p,  b,  h,  i0, nq, j0, nk, int64_t(ws[L.kmin + qb]), int64_t(ws[L.fmax + qb]),
                             ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq};
        backward_probabilities<S, Bq>(tile, st, pd, dcap, lse, lo);
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

/// The backward's schedules (backward, backward_amx): one (batch, kv head) per task, whose dk/dv
/// rows then belong to one thread, when there are at least as many as threads (or over
/// kMaxBackwardSplit threads, or one key block); else the key blocks of each head split across
/// the threads, each with a private dQ.
constexpr int kMaxBackwardSplit = 64;
inline bool backward_per_kv_head(const AttentionParams<float>& p, int64_t nkb) {
    const int64_t nthreads = omp_get_max_threads();
    return p.B * p.Hkv >= nthreads || nthreads > kMaxBackwardSplit || nkb == 1;
}

template <class S>
void backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g0) {
    const AttentionGradParams<float> g = with_grad_strides(p, g0);
    QKV_ASSERT(p.Tq < (int64_t(1) << 24) && p.Tk < (int64_t(1) << 24));
    constexpr int64_t Bk    = BwdLayout<S>::Bk;
    const int64_t     nkb   = (p.Tk + Bk - 1) / Bk;
    const int64_t     group = p.H / p.Hkv;
    if (backward_per_kv_head(p, nkb)) {
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
                        backward_key_block<S>(p, g, L, ws, {b, h, kb, h == hk * group, dq, g.dq_stride_t});
                }
            }
        }
        return;
    }
    // Few heads: split key blocks across threads, each with a private dQ, then sum the dQs. The
    // static round-robin split keeps results reproducible for a given thread count (dq is then
    // summed in a different order than with one thread: equal to rounding, not bit for bit).
    const BwdLayout<S> L(p, true);
    float*             priv[kMaxBackwardSplit];
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
                        backward_key_block<S>(p, g, L, ws, {b, h, kb, h == hk * group, priv[tid], p.D});
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

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
