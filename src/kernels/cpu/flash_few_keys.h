#pragma once
// Attention for few keys (Tk <= kFewKeysMax, e.g. a training step's 10-token sentences): per
// (batch, head) K^T (and in the backward V^T) held as Tk-lane vectors, one score vector per query
// (keys as lanes), the softmax in registers, the P·V and gradient products as broadcasts along D.
// No query blocks, no zero padding to whole 64 x 128 tiles: the flash kernels' fixed costs per
// head (packing Q^T, zeroing block-sized accumulators) are several times these products. Same
// semantics as ref::attention_forward/backward for what it covers (few_keys_supported in
// flash_attention.cpp: fp32, valid_lens, causal, dropout, GQA, scale); the flash kernels run the
// rest. Dropout draws the flash kernels' Philox stream (dropout_tile), so masks agree exactly.
// Part of the kernels over a traits struct S (flash_attention_impl.h).
#include <omp.h>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/flash_masks.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_few_keys.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

/// Keys as NKV vectors of W lanes (Tk <= NKV * W): the transposed rows t[d * Tkp + j] of x (n rows,
/// ld apart, `cols` floats each) for j < n. Lanes j >= n are zeroed once per call and thread
/// (few_keys_zero), not per head.
template <int64_t Tkp>
void few_keys_transpose(float* t, const float* x, int64_t n, int64_t ld, int64_t cols) {
    for (int64_t j = 0; j < n; ++j) {
        const float* row = x + j * ld;
        for (int64_t d = 0; d < cols; ++d) t[d * Tkp + j] = row[d];
    }
}

inline void few_keys_zero(float* t, int64_t n) {
    for (int64_t e = 0; e < n; ++e) t[e] = 0.0f;
}

/// r[v] = k * sum_d a[d] * t[d * Tkp + v W ..]: one row of scores (or dP) against the transposed
/// keys, four independent accumulator sets over d for the FMA latency.
template <class S, int NKV>
__attribute__((always_inline)) inline void few_keys_row(const float* a, float k, const float* t, int64_t n,
                                                        typename S::V* r) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t Tkp  = int64_t(NKV) * W;
    V                 acc[4][NKV];
    for (int u = 0; u < 4; ++u)
        for (int v = 0; v < NKV; ++v) acc[u][v] = S::zero();
    int64_t d = 0;
    for (; d + 4 <= n; d += 4)
        for (int u = 0; u < 4; ++u) {
            const V x = S::set1(a[d + u]);
            for (int v = 0; v < NKV; ++v) acc[u][v] = S::fmadd(x, S::load(t + (d + u) * Tkp + v * W), acc[u][v]);
        }
    for (; d < n; ++d) {
        const V x = S::set1(a[d]);
        for (int v = 0; v < NKV; ++v) acc[0][v] = S::fmadd(x, S::load(t + d * Tkp + v * W), acc[0][v]);
    }
    const V kv = S::set1(k);
    for (int v = 0; v < NKV; ++v) r[v] = S::mul(kv, S::add(S::add(acc[0][v], acc[1][v]), S::add(acc[2][v], acc[3][v])));
}

/// dst[e0, e0 + NV W) = k * sum_{j < n, w[j] != 0} w[j] * rows[j * ld + e0 ..] (acc: dst +=), the
/// last vector through lane mask m when Masked; accumulators in registers.
template <class S, int NV, bool Masked>
__attribute__((always_inline)) inline void few_keys_weighted_chunk(const float* w, int64_t n, const float* rows,
                                                                   int64_t ld, typename S::M m, float k, float* dst,
                                                                   bool acc) {
    using V         = typename S::V;
    constexpr int W = S::W;
    V             a[NV];
    for (int u = 0; u < NV; ++u) a[u] = S::zero();
    for (int64_t j = 0; j < n; ++j) {
        if (w[j] == 0.0f) continue;
        const V      x = S::set1(w[j]);
        const float* r = rows + j * ld;
        for (int u = 0; u < NV; ++u)
            a[u] = S::fmadd(x, Masked && u == NV - 1 ? S::loadm(r + u * W, m) : S::load(r + u * W), a[u]);
    }
    const V kv = S::set1(k);
    for (int u = 0; u < NV; ++u) {
        float*     o    = dst + u * W;
        const bool mask = Masked && u == NV - 1;
        V          y    = S::mul(kv, a[u]);
        if (acc) y = S::add(y, mask ? S::loadm(o, m) : S::load(o));
        if (mask) S::storem(o, y, m);
        else S::store(o, y);
    }
}

/// dst[0, width) = k * sum_{j < n, w[j] != 0} w[j] * rows[j * ld ..] (acc: dst += instead). Rows
/// whose weight is 0 are never read, so a non-finite value in a key the row does not see (or
/// dropped) cannot reach dst (as pv_skipping_zeros in the flash kernels).
template <class S>
void few_keys_weighted_rows(const float* w, int64_t n, const float* rows, int64_t ld, int64_t width, float k,
                            float* dst, bool acc) {
    constexpr int W  = S::W;
    const auto    m0 = S::tail(W);
    int64_t       e0 = 0;
    for (; e0 + 4 * W <= width; e0 += 4 * W)
        few_keys_weighted_chunk<S, 4, false>(w, n, rows + e0, ld, m0, k, dst + e0, acc);
    for (; e0 + W <= width; e0 += W) few_keys_weighted_chunk<S, 1, false>(w, n, rows + e0, ld, m0, k, dst + e0, acc);
    if (e0 < width)
        few_keys_weighted_chunk<S, 1, true>(w, n, rows + e0, ld, S::tail(int(width - e0)), k, dst + e0, acc);
}

/// y[0, n) += a * x[0, n).
template <class S>
__attribute__((always_inline)) inline void few_keys_axpy(float a, const float* x, float* y, int64_t n) {
    constexpr int W  = S::W;
    const auto    av = S::set1(a);
    int64_t       e  = 0;
    for (; e + W <= n; e += W) S::store(y + e, S::fmadd(av, S::load(x + e), S::load(y + e)));
    if (e < n) {
        const auto m = S::tail(int(n - e));
        S::storem(y + e, S::fmadd(av, S::loadm(x + e, m), S::loadm(y + e, m)), m);
    }
}

/// sum_e a[e] b[e] over [0, n) in few_keys_row's order (four fused chains over e mod 4, the rest
/// on the first, then (c0 + c1) + (c2 + c3)): D = rowsum(dO o O) then equals dP_j = dO . v_j
/// exactly where O is one row of V (a single visible key), so dS = P (dP - D) is 0 there, as
/// in the reference.
inline float few_keys_dot(const float* a, const float* b, int64_t n) {
    float   c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t e    = 0;
    for (; e + 4 <= n; e += 4)
        for (int u = 0; u < 4; ++u) c[u] = std::fma(a[e + u], b[e + u], c[u]);
    for (; e < n; ++e) c[0] = std::fma(a[e], b[e], c[0]);
    return (c[0] + c[1]) + (c[2] + c[3]);
}

/// The key index of every lane, as floats (exact below 2^24).
template <class S, int NKV>
void few_keys_lanes(typename S::V* jv) {
    alignas(64) float idx[NKV * S::W];
    for (int j = 0; j < NKV * S::W; ++j) idx[j] = float(j);
    for (int v = 0; v < NKV; ++v) jv[v] = S::load(idx + v * S::W);
}

/// The dropout factors of head (b, h), z[i * Tk + j] = keepval or 0: its Tq * Tk Philox counters
/// are contiguous, so one tile of one lane and Tq * Tk keys draws them all (dropout_tile).
template <class S>
void few_keys_dropout(const AttentionParams<float>& p, int64_t b, int64_t h, float* z, float keepval) {
    const ScoreTile tile{p, b, h, 0, 1, 0, p.Tq * p.Tk, 0, 0, nullptr, nullptr};
    dropout_tile<S, 1>(tile, z, attention_dropout_threshold(p.dropout_p), keepval);
}

/// Workspace of a few-keys call, in floats (Carve offsets).
template <int64_t Tkp>
struct FewKeysLayout {
    int64_t kt, vt, z, srow, prow, dsrow, dk, dv, total;
    FewKeysLayout(const AttentionParams<float>& p, bool backward) {
        Carve c;
        kt = c.take(p.D * Tkp), vt = c.take(backward ? p.Dv * Tkp : 0);
        z = c.take(p.dropout_p > 0.0f ? p.Tq * p.Tk : 0);
        srow = c.take(Tkp), prow = c.take(Tkp), dsrow = c.take(Tkp);
        dk = c.take(backward ? p.Tk * p.D : 0), dv = c.take(backward ? p.Tk * p.Dv : 0);
        total = c.at;
    }
};

/// Forward of head (b, h): per query the score vector s = scale q K^T, masked to the row's key
/// limit, m = max, P = e^(s - m), l = sum P, lse = m + log l (finish_row), out = (P Z) V / l.
template <class S, int NKV>
void few_keys_forward_head(const AttentionParams<float>& p, const FewKeysLayout<NKV * S::W>& L, float* ws,
                           int64_t b, int64_t h) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t Tkp  = int64_t(NKV) * W;
    const int64_t     hk   = h / (p.H / p.Hkv);
    const float*      k0   = p.k + b * p.k_stride_b + hk * p.k_stride_h;
    const float*      v0   = p.v + b * p.v_stride_b + hk * p.v_stride_h;
    const float*      q0   = p.q + b * p.q_stride_b + h * p.q_stride_h;
    float*            out0 = p.out + b * p.o_stride_b + h * p.o_stride_h;
    const int64_t     row0 = (b * p.H + h) * p.Tq;
    float *kt = ws + L.kt, *z = ws + L.z, *srow = ws + L.srow, *prow = ws + L.prow;
    few_keys_transpose<Tkp>(kt, k0, p.Tk, p.k_stride_t, p.D);
    if (p.dropout_p > 0.0f) few_keys_dropout<S>(p, b, h, z, 1.0f);
    const float keep = dropout_keep_factor(p.dropout_p);
    V           jv[NKV], s[NKV];
    few_keys_lanes<S, NKV>(jv);
    for (int64_t i = 0; i < p.Tq; ++i) {
        float*        out = out0 + i * p.o_stride_t;
        float*        lse = p.lse ? p.lse + row0 + i : nullptr;
        float*        lo  = p.lse_lo ? p.lse_lo + row0 + i : nullptr;
        const int64_t lim = attention_key_limit(p, b, i);
        if (lim < 0) {  // sees no key: out 0, lse -inf
            for (int64_t e = 0; e < p.Dv; ++e) out[e] = 0.0f;
            if (lse) *lse = -INFINITY;
            if (lo) *lo = 0.0f;
            continue;
        }
        few_keys_row<S, NKV>(q0 + i * p.q_stride_t, p.scale, kt, p.D, s);
        const V lv = S::set1(float(lim));
        for (int v = 0; v < NKV; ++v) S::store(srow + v * W, S::mask_gt(s[v], jv[v], lv));
        float m = srow[0];
        for (int64_t j = 1; j <= lim; ++j) m = srow[j] > m ? srow[j] : m;
        const float ms = m == -INFINITY ? 0.0f : m;  // every visible score -inf: P = 0, l = 0
        for (int v = 0; v < NKV; ++v) S::store(prow + v * W, S::exp(S::sub(S::load(srow + v * W), S::set1(ms))));
        float l = 0.0f;
        for (int64_t j = 0; j <= lim; ++j) l += prow[j];
        const float inv = finish_row(ms, l, keep, lse, lo);
        if (p.dropout_p > 0.0f)
            for (int64_t j = 0; j <= lim; ++j) prow[j] *= z[i * p.Tk + j];
        few_keys_weighted_rows<S>(prow, lim + 1, v0, p.v_stride_t, p.Dv, inv, out, false);
    }
}

/// Backward of kv head (b, hk), summed over its query heads: per query P = exp((s - lse) - lse_lo),
/// dP = dO V^T, dS = scale P (Z dP - D) with D = dO . O, then dQ_i = dS K, dK += dS^T q_i,
/// dV += (P Z)^T dO_i (FlashAttention-2, Alg. 2, one query row at a time).
template <class S, int NKV>
void few_keys_backward_group(const AttentionParams<float>& p, const AttentionGradParams<float>& g,
                             const FewKeysLayout<NKV * S::W>& L, float* ws, int64_t b, int64_t hk) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t Tkp  = int64_t(NKV) * W;
    const float*      k0   = p.k + b * p.k_stride_b + hk * p.k_stride_h;
    const float*      v0   = p.v + b * p.v_stride_b + hk * p.v_stride_h;
    float *kt = ws + L.kt, *vt = ws + L.vt, *z = ws + L.z, *prow = ws + L.prow,
          *dsrow = ws + L.dsrow, *dk = ws + L.dk, *dv = ws + L.dv;
    few_keys_transpose<Tkp>(kt, k0, p.Tk, p.k_stride_t, p.D);
    few_keys_transpose<Tkp>(vt, v0, p.Tk, p.v_stride_t, p.Dv);
    for (int64_t t = 0; t < p.Tk * p.D; ++t) dk[t] = 0.0f;
    for (int64_t t = 0; t < p.Tk * p.Dv; ++t) dv[t] = 0.0f;
    const float keep  = dropout_keep_factor(p.dropout_p);
    const int64_t grp = p.H / p.Hkv;
    V             jv[NKV], s[NKV], dp[NKV];
    few_keys_lanes<S, NKV>(jv);
    for (int64_t h = hk * grp; h < (hk + 1) * grp; ++h) {
        const float* q0  = p.q + b * p.q_stride_b + h * p.q_stride_h;
        const float* o0  = p.out + b * p.o_stride_b + h * p.o_stride_h;
        const float* do0 = g.dout + b * p.o_stride_b + h * p.o_stride_h;
        float*       dq0 = g.dq + b * g.dq_stride_b + h * g.dq_stride_h;
        const int64_t row0 = (b * p.H + h) * p.Tq;
        if (p.dropout_p > 0.0f) few_keys_dropout<S>(p, b, h, z, keep);
        for (int64_t i = 0; i < p.Tq; ++i) {
            float*        dq  = dq0 + i * g.dq_stride_t;
            const int64_t lim = attention_key_limit(p, b, i);
            const float   lse = p.lse[row0 + i];
            if (lim < 0 || lse == -INFINITY) {  // sees no key: zero gradients
                for (int64_t e = 0; e < p.D; ++e) dq[e] = 0.0f;
                continue;
            }
            const float* qi  = q0 + i * p.q_stride_t;
            const float* doi = do0 + i * p.o_stride_t;
            const float* oi  = o0 + i * p.o_stride_t;
            const float  dd  = few_keys_dot(doi, oi, p.Dv);  // D = rowsum(dO o O)
            few_keys_row<S, NKV>(qi, p.scale, kt, p.D, s);
            few_keys_row<S, NKV>(doi, 1.0f, vt, p.Dv, dp);
            const V lv = S::set1(float(lim)), lsev = S::set1(lse);
            const V lov = S::set1(p.lse_lo ? p.lse_lo[row0 + i] : 0.0f);
            for (int v = 0; v < NKV; ++v) {
                const V pv = S::exp(S::sub(S::sub(S::mask_gt(s[v], jv[v], lv), lsev), lov));
                S::store(prow + v * W, pv);
                S::store(dsrow + v * W, dp[v]);
            }
            // dS and P Z over the visible keys only (hidden lanes may hold dP of non-finite V rows).
            for (int64_t j = 0; j <= lim; ++j) {
                const float zj = p.dropout_p > 0.0f ? z[i * p.Tk + j] : 1.0f;
                dsrow[j]       = p.scale * prow[j] * (zj * dsrow[j] - dd);
                prow[j] *= zj;
            }
            few_keys_weighted_rows<S>(dsrow, lim + 1, k0, p.k_stride_t, p.D, 1.0f, dq, false);
            for (int64_t j = 0; j <= lim; ++j) {
                if (dsrow[j] != 0.0f) few_keys_axpy<S>(dsrow[j], qi, dk + j * p.D, p.D);
                if (prow[j] != 0.0f) few_keys_axpy<S>(prow[j], doi, dv + j * p.Dv, p.Dv);
            }
        }
    }
    float* dk0 = g.dk + b * g.dk_stride_b + hk * g.dk_stride_h;
    float* dv0 = g.dv + b * g.dv_stride_b + hk * g.dv_stride_h;
    for (int64_t j = 0; j < p.Tk; ++j) {
        for (int64_t e = 0; e < p.D; ++e) dk0[j * g.dk_stride_t + e] = dk[j * p.D + e];
        for (int64_t e = 0; e < p.Dv; ++e) dv0[j * g.dv_stride_t + e] = dv[j * p.Dv + e];
    }
}

template <class S, int NKV>
void few_keys_forward_with(const AttentionParams<float>& p) {
    const FewKeysLayout<NKV * S::W> L(p, false);
    const int64_t                   items = p.B * p.H;
#pragma omp parallel
    {
        float* ws = detail::flash_thread_workspace(L.total);
        few_keys_zero(ws + L.kt, p.D * NKV * S::W);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; ++it) few_keys_forward_head<S, NKV>(p, L, ws, it / p.H, it % p.H);
    }
}

template <class S, int NKV>
void few_keys_backward_with(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    const FewKeysLayout<NKV * S::W> L(p, true);
    const int64_t                   items = p.B * p.Hkv;
#pragma omp parallel
    {
        float* ws = detail::flash_thread_workspace(L.total);
        few_keys_zero(ws + L.kt, p.D * NKV * S::W);
        few_keys_zero(ws + L.vt, p.Dv * NKV * S::W);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; ++it) few_keys_backward_group<S, NKV>(p, g, L, ws, it / p.Hkv, it % p.Hkv);
    }
}

/// The few-keys forward for 1 <= Tk <= kFewKeysMax: key vectors NKV = ceil(Tk / W).
template <class S>
void few_keys_forward(const AttentionParams<float>& p) {
    QKV_ASSERT(p.Tk >= 1 && p.Tk <= detail::kFewKeysMax && !p.bf16);
    const int64_t nkv = (p.Tk + S::W - 1) / S::W;
    if (nkv == 1) return few_keys_forward_with<S, 1>(p);
    if constexpr (S::W * 2 >= detail::kFewKeysMax) return few_keys_forward_with<S, 2>(p);
    else if (nkv == 2) return few_keys_forward_with<S, 2>(p);
    else return few_keys_forward_with<S, detail::kFewKeysMax / S::W>(p);
}

template <class S>
void few_keys_backward(const AttentionParams<float>& p, const AttentionGradParams<float>& g) {
    QKV_ASSERT(p.Tk >= 1 && p.Tk <= detail::kFewKeysMax && !p.bf16);
    const int64_t nkv = (p.Tk + S::W - 1) / S::W;
    if (nkv == 1) return few_keys_backward_with<S, 1>(p, g);
    if constexpr (S::W * 2 >= detail::kFewKeysMax) return few_keys_backward_with<S, 2>(p, g);
    else if (nkv == 2) return few_keys_backward_with<S, 2>(p, g);
    else return few_keys_backward_with<S, detail::kFewKeysMax / S::W>(p, g);
}

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
