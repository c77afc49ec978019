#pragma once
// Flash attention's AMX backward: the five products of the backward on tiles (simd_amx.h), the
// elementwise work as flash_backward.h. Compiled where AVX-512-BF16 is. Part of the kernels over
// a traits struct S (flash_attention_impl.h).
#include <omp.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/flash_amx_forward.h"
#include "kernels/cpu/flash_backward.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_amx_backward.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

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
    const float * k0 = p.k + b * p.k_stride_b + hk * p.k_stride_h, *v0 = p.v + b * p.v_stride_b + hk * p.v_stride_h;
    uint16_t *    kp = h, *vp = h + hp.Tkp * 2 * hp.Dwp;
    bool          bad = false;
    QKV_DASSERT(j0 % 32 == 0 && j1 % 32 == 0);
    for (int64_t j = j0; j < j1; ++j) {
        if (pack_padded_row<S>(kp + j * 2 * hp.Dwp, hp.Dwp, j < p.Tk ? k0 + j * p.k_stride_t : nullptr, p.D))
            bad = true;
        if (pack_padded_row<S>(vp + j * 2 * hp.Dvwp, hp.Dvwp, j < p.Tk ? v0 + j * p.v_stride_t : nullptr, p.Dv))
            bad = true;
    }
    auto* kt = reinterpret_cast<uint32_t*>(h + hp.Tkp * 2 * (hp.Dwp + hp.Dvwp));
    return pack_transposed_keys<S>(kt, hp.Tkp, k0, p.k_stride_t, p.Tk, p.D, hp.Dq, j0, j1) || bad;
}

/// Every head's AmxBwdHeads, head bh at data + bh per_head (parallel over heads and key chunks).
template <class S>
bool pack_heads_amx_bwd(const AttentionParams<float>& p, const AmxBwdHeads& hp, uint16_t* data) {
    return pack_key_chunks(p.B * p.Hkv, hp.Tkp, hp.per_head, [&](int64_t bh, int64_t j0, int64_t j1) {
        return pack_head_amx_bwd<S>(p, hp, bh, data + bh * hp.per_head, j0, j1);
    });
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
        Carve c;
        qt = c.take(p.D * Bq), dot = c.take(p.Dv * Bq);  // scratch of pack_transposed
        // per query block of the head (words: 2 bf16 per float slot)
        qw = c.take(nqb * hp.Dwp * Bq), dow = c.take(nqb * hp.Dvwp * Bq);
        qpw = c.take(nqb * Bq / 2 * hp.Dq), dopw = c.take(nqb * Bq / 2 * Dvq);
        lse = c.take(nqb * Bq), lo = c.take(nqb * Bq), dd = c.take(nqb * Bq), lim = c.take(nqb * Bq),
        kfirst = c.take(nqb * Bq), kmin = c.take(nqb), kmax = c.take(nqb), fmin = c.take(nqb), fmax = c.take(nqb);
        // per key block
        st = c.take(Bk * Bq), pd = c.take(p.dropout_p > 0 ? Bk * Bq : 0), ds = c.take(Bk * Bq),
        dcap = c.take(p.softcap > 0.0f ? Bk * Bq : 0);
        pdw = c.take(Bk * Bq / 2), dsw = c.take(Bk * Bq / 2), dstw = c.take(Bk / 2 * Bq);
        dkacc = c.take(Bk * hp.Dq), dvacc = c.take(Bk * Dvq);
        dqt  = c.take(nqb * hp.Dq * Bq);
        head = c.take(own_head ? (hp.per_head + 1) / 2 : 0);  // bf16 values, 2 per float slot
        total = c.at;
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
        // D of the bf16 dO the products use, as prepare_head's
        prepare_lanes<S, Bq>(p, L, ws, b, h, qb, do0, p.o_stride_t, [](float x) { return bf16_round1(x); });
    }
    std::memset(ws + L.dqt, 0, size_t(L.nqb * hp.Dq * Bq) * 4);
}

/// Key block task.kb of head (task.b, task.h) against every query block that sees it; dK_j and dV_j
/// are written (task.first) or added (later heads of a GQA group) at the end.
template <class S, class T>
void backward_key_block_amx(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                            const AmxBwdLayout<S>& L, const AmxBwdHeads& hp, const uint16_t* head, float* ws,
                            const KeyBlockTask& task) {
    const int64_t b = task.b, h = task.h, kb = task.kb;
    const bool    first = task.first;
    constexpr int64_t Bq    = AmxBwdLayout<S>::Bq, Bk = AmxBwdLayout<S>::Bk;
    const int64_t     hk    = h / (p.H / p.Hkv);
    const int64_t     j0    = kb * Bk, nk = min64(Bk, p.Tk - j0), nkp = round_up(nk, 16);
    const int64_t     nkw   = (nk + 1) / 2, nkwp = round_up(nkw, 16);
    auto*             w     = reinterpret_cast<uint32_t*>(ws);
    float *st = ws + L.st, *ds = ws + L.ds, *pd = p.dropout_p > 0 ? ws + L.pd : st, *dcap = ws + L.dcap;
    float *dkacc = ws + L.dkacc, *dvacc = ws + L.dvacc;
    const ScaleSplit sc       = split_scale(p.scale);
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
        const ScoreTile tile{p,  b,  h,  i0, nq, j0, nk, int64_t(ws[L.kmin + qb]), int64_t(ws[L.fmax + qb]),
                             ws + L.lim + qb * Bq, ws + L.kfirst + qb * Bq};
        backward_probabilities<S, Bq>(tile, st, pd, dcap, lse, lo);
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
    constexpr int64_t Bk    = AmxBwdLayout<S>::Bk;
    const int64_t     nkb   = (p.Tk + Bk - 1) / Bk;
    const int64_t     group = p.H / p.Hkv;
    if (backward_per_kv_head(p, nkb)) {
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
                        backward_key_block_amx<S, T>(p, g, L, hp, head, ws, {b, h, kb, h == hk * group});
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
    std::vector<float> priv(size_t(omp_get_max_threads() * p.Tq * p.D));
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
                        backward_key_block_amx<S, T>(p, g, L, hp, data + (b * p.Hkv + hk) * hp.per_head, ws,
                                                     {b, h, kb, h == hk * group});
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
