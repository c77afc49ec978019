#pragma once
// Flash attention's masks and online softmax on transposed score tiles (keys as rows, queries as
// lanes): per-lane key ranges (valid_lens, causal, sliding window), the score modifiers (soft cap,
// ALiBi), bool and additive masks, dropout factor tiles, the masked two-pass softmax of a block
// and the row finish (logsumexp, 1/l). Part of the kernels over a traits struct S (flash_attention_impl.h).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/flash_gemm.h"

#ifndef QKV_FLASH_NS
#error "define QKV_FLASH_NS (the per-ISA namespace) before including flash_masks.h"
#endif

namespace qkv::kernels::cpu::QKV_FLASH_NS {
namespace {

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

/// A score tile's place and what its masks read: query block [i0, i0 + nq) of (batch b, head h)
/// against keys [j0, j0 + nk), with the block's key ranges from key_limits (lim, kfirst per lane;
/// kmin the smallest limit, fmax the largest first key).
struct ScoreTile {
    const AttentionParams<float>& p;
    int64_t                       b, h, i0, nq, j0, nk;
    int64_t                       kmin, fmax;
    const float*                  lim;
    const float*                  kfirst;
};

/// -inf where key j0 + j lies outside lane i's bound: past bound[i] = lim[i] when Past (causal and
/// valid_lens, derived from indices), before bound[i] = kfirst[i] otherwise (the sliding window's
/// left edge).
template <class S, int64_t Bq, bool Past>
void apply_key_bound(float* t, int64_t nk, int64_t j0, const float* bound) {
    constexpr int64_t NQV = Bq / S::W;
    typename S::V     l[NQV];
    for (int64_t v = 0; v < NQV; ++v) l[v] = S::load(bound + v * S::W);
    for (int64_t j = 0; j < nk; ++j) {
        const auto jv  = S::set1(float(j0 + j));
        float*     row = t + j * Bq;
        for (int64_t v = 0; v < NQV; ++v) {
            const auto x = S::load(row + v * S::W);
            S::store(row + v * S::W, Past ? S::mask_gt(x, jv, l[v]) : S::mask_gt(x, l[v], jv));
        }
    }
}

/// Soft cap and ALiBi (params.h) on a transposed score tile of head h (keys j0 + j, query lanes
/// i0 + i). With a soft cap, dcap (when non-null) receives d cap(x)/dx = 1 - tanh^2 per element
/// (1 in padding lanes). Scalar: score modifiers take the masked two-pass path.
template <int64_t Bq>
void apply_score_mods(const ScoreTile& st, float* t, float* dcap) {
    const AttentionParams<float>& p = st.p;
    const int64_t nk = st.nk, nq = st.nq, h = st.h, i0 = st.i0, j0 = st.j0;
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
void apply_general_mask(const ScoreTile& st, float* t) {
    const AttentionParams<float>& p = st.p;
    const int64_t nk = st.nk, nq = st.nq, b = st.b, h = st.h, i0 = st.i0, j0 = st.j0;
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

/// o[i] = (alpha[i] o[i] when alpha is not null) + sum over the keys j with P_ij != 0 of P_ij v_j:
/// the P.V product of a masked tile whose V rows hold a non-finite value, reading only the rows
/// each query sees (o (nq, Dvp), P transposed (nk, Bq), v rows ld apart).
template <int64_t Bq>
void pv_skipping_zeros(const ScoreTile& st, float* o, int64_t Dvp, const float* pt, const float* v, int64_t ld,
                       const float* alpha) {
    const int64_t nq = st.nq, nk = st.nk, Dv = st.p.Dv;
    for (int64_t i = 0; i < nq; ++i) {
        float* oi = o + i * Dvp;
        if (alpha)
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

/// What every key block of a forward query block asks: general = score modifiers or bool /
/// additive masks (every block takes the masked softmax), dropout and its Philox threshold.
struct FwdFlags {
    bool     general, dropout;
    uint32_t thr;
    explicit FwdFlags(const AttentionParams<float>& p)
        : general(p.bool_mask || p.additive_mask || p.softcap > 0.0f || p.alibi_slopes),
          dropout(p.dropout_p > 0.0f), thr(attention_dropout_threshold(p.dropout_p)) {}
};

/// The score modifiers and every mask on score tile t (nk keys x Bq lanes), in the order of the
/// reference: soft cap and ALiBi (dcap: d cap/dx when non-null), key limits, the window's left
/// edge, bool and additive masks. Tiles inside every lane's key range skip the index masks.
template <class S, int64_t Bq>
void apply_masks(const ScoreTile& st, float* t, float* dcap) {
    const AttentionParams<float>& p = st.p;
    if (p.softcap > 0.0f || p.alibi_slopes) apply_score_mods<Bq>(st, t, p.softcap > 0.0f ? dcap : nullptr);
    if (st.j0 + st.nk - 1 > st.kmin) apply_key_bound<S, Bq, true>(t, st.nk, st.j0, st.lim);
    if (st.j0 < st.fmax) apply_key_bound<S, Bq, false>(t, st.nk, st.j0, st.kfirst);
    if (p.bool_mask || p.additive_mask) apply_general_mask<S, Bq>(st, t);
}

/// Dropout factor tile: dst[j * Bq + i] = Z(i0 + i, j0 + j) for j < nk, i < nq, and 0 for
/// nq <= i < Bq, with Z = keepval when kept and 0 when dropped; element (i, j) of (b, h) uses
/// Philox counter dropout_offset + ((b H + h) Tq + i) Tk + j (params.h:
/// attention_dropout_threshold). 8 Philox blocks (32 counters) per call of S::philox8.
template <class S, int64_t Bq>
void dropout_tile(const ScoreTile& st, float* dst, uint32_t thr, float keepval) {
    const AttentionParams<float>& p = st.p;
    const int64_t  nk = st.nk, nq = st.nq, j0 = st.j0, Tk = p.Tk;
    const uint64_t seed = p.dropout_seed;
    const uint64_t index0 = p.dropout_offset + uint64_t(((st.b * p.H + st.h) * p.Tq + st.i0) * p.Tk);
    uint32_t w[4][8];
    for (int64_t i = 0; i < Bq; ++i) {
        if (i >= nq) {
            for (int64_t j = 0; j < nk; ++j) dst[j * Bq + i] = 0.0f;
            continue;
        }
        const uint64_t first = index0 + uint64_t(i * Tk + j0), last = first + uint64_t(nk);
        for (uint64_t blk = first >> 2; blk <= (last - 1) >> 2; blk += 8) {
            S::philox8(blk, seed, w);
            for (uint64_t l = 0; l < 8; ++l)
                for (uint64_t k = 0; k < 4; ++k) {
                    const uint64_t c = 4 * (blk + l) + k;
                    if (c >= first && c < last)
                        dst[(c - first) * uint64_t(Bq) + uint64_t(i)] = (w[k][l] >> 8) >= thr ? keepval : 0.0f;
                }
        }
    }
}

/// P = e^(s - shift) in place on score tile t (nk keys x Bq lanes; shift: one vector per NQV lane
/// group), with sum[v] += each lane group's P summed over the keys.
template <class S, int64_t Bq>
__attribute__((always_inline)) inline void exp_tile(float* t, int64_t nk, const typename S::V* shift,
                                                    typename S::V* sum) {
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < Bq / S::W; ++v) {
            float*     s = t + j * Bq + v * S::W;
            const auto e = S::exp(S::sub(S::load(s), shift[v]));
            S::store(s, e);
            sum[v] = S::add(sum[v], e);
        }
}

/// P *= Z (0 or 1; 1/(1-p) comes with 1/l at the end) on score tile st of `tile`, kt the scratch
/// for the dropout tile.
template <class S, int64_t Bq>
void apply_dropout_keep(const ScoreTile& tile, float* st, float* kt, uint32_t thr) {
    dropout_tile<S, Bq>(tile, kt, thr, 1.0f);
    for (int64_t t = 0; t < tile.nk * Bq; t += S::W) S::store(st + t, S::mul(S::load(st + t), S::load(kt + t)));
}

/// Lazy rescaling's test of an unmasked block (psum: its per-lane sums of P = e^(s - m)): when
/// every sum stays within kBlockSumLimit, l += psum and true; else false, and the caller recomputes
/// the block with its maximum as the shift (rare).
template <class S, int64_t Bq>
bool accept_block_sums(float* l, const float* psum) {
    constexpr int W    = S::W;
    bool          over = false;
    for (int64_t v = 0; v < Bq / W; ++v) over = over || !S::all_le(S::load(psum + v * W), S::set1(kBlockSumLimit));
    if (over) return false;
    for (int64_t v = 0; v < Bq / W; ++v) S::store(l + v * W, S::add(S::load(l + v * W), S::load(psum + v * W)));
    return true;
}

/// Score tile t (nk keys x Bq lanes) through the score modifiers and masks (apply_masks), then the
/// online softmax, lane-wise: m' = max(m, max_j s), alpha = e^(m - m'), P = e^(s - m') (in t),
/// l' = alpha l + sum_j P. A lane whose max is still -inf uses 0 as its shift (P = 0).
template <class S, int64_t Bq>
void masked_online_softmax(const ScoreTile& tile, float* st, float* m, float* alpha, float* l) {
    using V                = typename S::V;
    constexpr int     W    = S::W;
    constexpr int64_t NQV  = Bq / W;
    const int64_t     nk   = tile.nk;
    apply_masks<S, Bq>(tile, st, nullptr);
    V mx[NQV], ms[NQV], sum[NQV];
    for (int64_t v = 0; v < NQV; ++v) mx[v] = S::load(m + v * W), sum[v] = S::zero();
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t v = 0; v < NQV; ++v) mx[v] = S::max(mx[v], S::load(st + j * Bq + v * W));
    for (int64_t v = 0; v < NQV; ++v) {
        ms[v] = S::neginf_to_zero(mx[v]);
        S::store(alpha + v * W, S::exp(S::sub(S::load(m + v * W), ms[v])));
        S::store(m + v * W, mx[v]);
    }
    exp_tile<S, Bq>(st, nk, ms, sum);
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

/// finish_row for rows [i0, i0 + nq) of (b, h) from their m and l: lse and lse_lo written where
/// the call has them, inv[i] = row i's output factor.
inline void finish_rows(const AttentionParams<float>& p, int64_t b, int64_t h, int64_t i0, int64_t nq, const float* m,
                        const float* l, float* inv) {
    const float keep = dropout_keep_factor(p.dropout_p);
    float*      lse0 = p.lse ? p.lse + (b * p.H + h) * p.Tq + i0 : nullptr;
    float*      lo0  = p.lse_lo ? p.lse_lo + (b * p.H + h) * p.Tq + i0 : nullptr;
    for (int64_t i = 0; i < nq; ++i)
        inv[i] = finish_row(m[i], l[i], keep, lse0 ? lse0 + i : nullptr, lo0 ? lo0 + i : nullptr);
}

/// t[0, n) *= k (n a multiple of W; nothing when k = 1): the fp32 part of a split softmax scale.
template <class S>
void scale_tile(float* t, int64_t n, float k) {
    if (k == 1.0f) return;
    const auto kv = S::set1(k);
    for (int64_t e = 0; e < n; e += S::W) S::store(t + e, S::mul(kv, S::load(t + e)));
}

}  // namespace
}  // namespace qkv::kernels::cpu::QKV_FLASH_NS
