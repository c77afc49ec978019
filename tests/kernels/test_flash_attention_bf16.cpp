// bf16 compute (AttentionParams::bf16): the fast kernel on bf16-rounded q, k, v, dO against float64
// math on the same rounded inputs (the reference), on every bf16 path this CPU has. The
// flash rule's baseline is a plain bf16 computation (plain_bf16) instead of float32: err_fast <=
// kErrFactor·err_plain_bf16 + floor. Also: gradients written through strides, every path.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_kernel_test_util.h"
#include "qkv/core/bf16.h"
#include "qkv/core/philox.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

// The fp32 paths' overloads stay visible next to the bf16 paths' below.
using qkv::test::flash_backward;
using qkv::test::flash_forward;

/// make_attn with q, k, v and dout rounded to bf16 (the values the bf16 path computes with).
template <class T>
AttnData<T> make_attn_bf16(const AttnSpec& s) {
    auto a = make_attn<T>(s);
    for (auto* x : {&a.q, &a.k, &a.v, &a.dout})
        for (auto& e : *x) e = T(round_to_bf16(float(e)));
    return a;
}

/// Attention as a framework computing in bf16 does it: every product's result is rounded to bf16
/// (scores q·kᵀ·scale, P·V, dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO; fp32 accumulation inside each product), the
/// softmax and its backward run in fp32 on bf16 values and round their outputs, masks and score
/// modifiers are applied in fp32 and rounded. Reads a.q, a.k, a.v, a.dout (already bf16); writes
/// a.out, a.lse (fp32, of the rounded scores) and, with bwd, a.dq, a.dk, a.dv.
void plain_bf16(AttnData<float>& a, bool bwd) {
    const auto&   p     = a.p;
    const int64_t group = p.H / p.Hkv;
    const auto    bf    = [](float x) { return round_to_bf16(x); };
    const size_t  Tk    = size_t(p.Tk);
    std::vector<float> s(Tk), P(Tk), z(Tk), dcap(Tk), dp(Tk);
    std::vector<float> dk(size_t(p.B * p.Hkv * p.Tk * p.D), 0.0f), dv(size_t(p.B * p.Hkv * p.Tk * p.Dv), 0.0f);
    const uint32_t thr  = kernels::attention_dropout_threshold(p.dropout_p);
    const float    keep = 1.0f / (1.0f - p.dropout_p);
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < p.Tq; ++i) {
                const int64_t hk    = h / group;
                const float*  qi    = p.q + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_t;
                const int64_t lim   = kernels::attention_key_limit(p, b, i);
                const int64_t first = kernels::attention_key_first(p, i);
                const int64_t mo    = b * p.m_stride_b + h * p.m_stride_h + i * p.m_stride_q;
                float         mx    = -INFINITY;
                for (int64_t j = 0; j < p.Tk; ++j) {
                    const size_t u = size_t(j);
                    dcap[u]        = 1.0f;
                    s[u]           = -INFINITY;
                    if (j > lim || j < first || (p.bool_mask && p.bool_mask[mo + j * p.m_stride_k] == 0)) continue;
                    const float* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_t;
                    float        dot = 0.0f;
                    for (int64_t d = 0; d < p.D; ++d) dot += qi[d] * kj[d];
                    float x = bf(p.scale * dot);
                    if (p.softcap > 0.0f) {
                        const float t = std::tanh(x / p.softcap);
                        x             = bf(p.softcap * t);
                        dcap[u]       = 1.0f - t * t;
                    }
                    if (p.alibi_slopes) {
                        const int64_t dist = i + p.Tk - p.Tq - j;
                        x = bf(x - p.alibi_slopes[h] * float(dist < 0 ? -dist : dist));
                    }
                    if (p.additive_mask) {
                        const float am = p.additive_mask[mo + j * p.m_stride_k];
                        x              = am == -INFINITY ? -INFINITY : bf(x + am);
                    }
                    s[u] = x;
                    mx   = std::max(mx, x);
                }
                float sum = 0.0f;
                for (size_t j = 0; j < Tk; ++j) sum += mx == -INFINITY ? 0.0f : std::exp(s[j] - mx);
                for (size_t j = 0; j < Tk; ++j) P[j] = mx == -INFINITY ? 0.0f : bf(std::exp(s[j] - mx) / sum);
                a.lse[size_t((b * p.H + h) * p.Tq + i)] = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
                const uint64_t base = p.dropout_offset + uint64_t(((b * p.H + h) * p.Tq + i) * p.Tk);
                for (size_t j = 0; j < Tk; ++j)
                    z[j] = p.dropout_p > 0.0f
                               ? ((philox::bits(p.dropout_seed, 0, base + j) >> 8) >= thr ? keep : 0.0f)
                               : 1.0f;
                float* oi = p.out + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                for (int64_t e = 0; e < p.Dv; ++e) {
                    float acc = 0.0f;
                    for (size_t j = 0; j < Tk; ++j) {
                        const float w = bf(P[j] * z[j]);
                        if (w != 0.0f) acc += w * p.v[b * p.v_stride_b + hk * p.v_stride_h + int64_t(j) * p.v_stride_t + e];
                    }
                    oi[e] = bf(acc);
                }
                if (!bwd) continue;
                const float* doi = a.g.dout + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_t;
                float        D   = 0.0f;
                for (size_t j = 0; j < Tk; ++j) {
                    const float* vj  = p.v + b * p.v_stride_b + hk * p.v_stride_h + int64_t(j) * p.v_stride_t;
                    float        acc = 0.0f;
                    for (int64_t e = 0; e < p.Dv; ++e) acc += doi[e] * vj[e];
                    dp[j] = bf(bf(acc) * z[j]);
                    if (P[j] != 0.0f) D += P[j] * dp[j];
                }
                float* dqi = a.g.dq + ((b * p.H + h) * p.Tq + i) * p.D;
                std::vector<float> dqa(size_t(p.D), 0.0f);
                for (size_t j = 0; j < Tk; ++j) {
                    if (P[j] == 0.0f) continue;
                    const float  ds  = bf(bf(bf(P[j] * (dp[j] - D)) * dcap[j]) * p.scale);
                    const float* kj  = p.k + b * p.k_stride_b + hk * p.k_stride_h + int64_t(j) * p.k_stride_t;
                    float*       dkj = dk.data() + ((b * p.Hkv + hk) * p.Tk + int64_t(j)) * p.D;
                    float*       dvj = dv.data() + ((b * p.Hkv + hk) * p.Tk + int64_t(j)) * p.Dv;
                    for (int64_t d = 0; d < p.D; ++d) dqa[size_t(d)] += ds * kj[d], dkj[d] += ds * qi[d];
                    const float w = bf(P[j] * z[j]);
                    for (int64_t e = 0; e < p.Dv; ++e) dvj[e] += w * doi[e];
                }
                for (int64_t d = 0; d < p.D; ++d) dqi[d] = bf(dqa[size_t(d)]);
            }
    if (!bwd) return;
    for (size_t t = 0; t < dk.size(); ++t) a.g.dk[t] = round_to_bf16(dk[t]);
    for (size_t t = 0; t < dv.size(); ++t) a.g.dv[t] = round_to_bf16(dv[t]);
}

// The bf16 paths: every tier of isas() (rounded_fp32 on the fp32 tiles); where the CPU has
// AVX-512-BF16, the avx512_bf16 tier's vdpbf16ps build (Bf16AttentionPath::dot, forced even where
// `automatic` would keep the fp32 tiles) and the AMX kernels with their tiles emulated in plain
// code (set_amx_tile_emulation); where Linux grants the AMX tiles, the AMX kernels on them.
struct Bf16Path {
    cpu::Isa               isa;
    cpu::Bf16AttentionPath path;
    bool                   emulate;
    std::string            name;
};
std::vector<Bf16Path> bf16_isas() {
    std::vector<Bf16Path> out;
    for (auto isa : isas()) out.push_back({isa, cpu::Bf16AttentionPath::dot, false, cpu::isa_name(isa)});
    if (cpu::cpu_isa() >= cpu::Isa::avx512_bf16) {
        out.push_back({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot, false, "avx512_bf16 (vdpbf16ps)"});
        out.push_back({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::amx, true, "amx tiles emulated"});
    }
    if (cpu::cpu_isa() == cpu::Isa::amx && cpu::amx_permitted())
        out.push_back({cpu::Isa::amx, cpu::Bf16AttentionPath::amx, false, "amx tiles"});
    return out;
}
/// Runs a kernel call on `b`'s path: its cap, path and tile emulation, restored afterwards.
struct Bf16PathGuard {
    IsaGuard               cap;
    cpu::Bf16AttentionPath old_path;
    bool                   old_emu;
    explicit Bf16PathGuard(const Bf16Path& b)
        : cap(b.isa), old_path(cpu::set_bf16_attention_path(b.path)), old_emu(cpu::set_amx_tile_emulation(b.emulate)) {}
    ~Bf16PathGuard() {
        cpu::set_bf16_attention_path(old_path);
        cpu::set_amx_tile_emulation(old_emu);
    }
};
void flash_forward(const kernels::AttentionParams<float>& p, const Bf16Path& b) {
    const Bf16PathGuard g(b);
    cpu::flash_attention_forward(p);
}
void flash_backward(const kernels::AttentionParams<float>& p, const kernels::AttentionGradParams<float>& g,
                    const Bf16Path& b) {
    const Bf16PathGuard guard(b);
    cpu::flash_attention_backward(p, g);
}
const std::string& isa_label(const Bf16Path& b) { return b.name; }

// bf16 fast kernel (each ISA) vs float64 on the rounded inputs, baseline plain_bf16.
void expect_bf16_matches_ref(const AttnSpec& s, bool bwd = true) {
    auto r64 = make_attn_bf16<double>(s);
    auto pl  = make_attn_bf16<float>(s);
    ref::attention_forward(r64.p);
    if (bwd) ref::attention_backward(r64.p, r64.g);
    plain_bf16(pl, bwd);
    const Results want = results(r64), base = results(pl);
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(::testing::Message() << "bf16 compute, " << isa_label(isa));
        auto a   = make_attn_bf16<float>(s);
        a.p.bf16 = true;
        flash_forward(a.p, isa);
        if (bwd) flash_backward(a.p, a.g, isa);
        const Results got = results(a);
        expect_results_within_rule(got, want, base, bwd);
    }
}

TEST(FlashAttentionBf16, MatchesFloat64OnRoundedInputs_TileEdgeSizes) {
    const int64_t cases[][4] = {{1, 1, 8, 0},     {7, 200, 8, 8},     {63, 65, 31, 31},   {64, 64, 64, 64},
                                {97, 128, 128, 128}, {200, 7, 64, 33}, {300, 1000, 64, 64}, {129, 257, 256, 256}};
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << c[0] << " Tk " << c[1] << " D " << c[2] << " Dv " << c[3]);
        expect_bf16_matches_ref(shape(1, 2, c[0], c[1], c[2], c[3]));
    }
    // One (batch, head): the backward splits key blocks across threads with private dQ rows.
    expect_bf16_matches_ref(shape(1, 1, 150, 400, 64, 48));
}

// Every feature on the bf16 path: valid_lens (rank 1 and 2, incl. fully masked), both causal
// alignments, bool/additive masks with masked rows, GQA/MQA with strides, dropout, sliding
// window, soft cap and ALiBi, the few-query path.
TEST(FlashAttentionBf16, MatchesFloat64OnRoundedInputs_EveryFeature) {
    AttnSpec vl = shape(3, 2, 97, 200, 32);
    vl.valid_lens_rank = 1, vl.valid_lens = {0, 130, 500};
    expect_bf16_matches_ref(vl);
    vl.valid_lens_rank = 2, vl.valid_lens.clear();
    for (int64_t t = 0; t < 3 * 97; ++t) vl.valid_lens.push_back((t * 37) % 230);
    expect_bf16_matches_ref(vl);
    for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
        AttnSpec c = shape(1, 2, 150, 300, 64);
        c.causal   = align;
        expect_bf16_matches_ref(c);
    }
    for (auto kind : {MaskKind::boolean, MaskKind::additive, MaskKind::both}) {
        AttnSpec m    = shape(2, 2, 70, 150, 24);
        m.mask        = kind;
        m.mask_shape  = kind == MaskKind::additive ? MaskShape::key_padding : MaskShape::full;
        m.masked_rows = {1, 1, 5, 0, 0, 69};
        expect_bf16_matches_ref(m);
    }
    AttnSpec g = shape(2, 4, 80, 140, 32, 48);
    g.Hkv = 2, g.strided = true;
    expect_bf16_matches_ref(g);
    g.Hkv = 1, g.causal = CausalAlign::bottom_right;
    expect_bf16_matches_ref(g);
    AttnSpec d = shape(2, 2, 97, 200, 32);
    d.dropout = 0.2f, d.causal = CausalAlign::bottom_right;
    expect_bf16_matches_ref(d);
    AttnSpec w = shape(1, 2, 300, 300, 32);
    w.window_left = 40, w.window_right = 10;
    expect_bf16_matches_ref(w);
    w.window_left = 41, w.window_right = 0;  // odd first keys (the tile forward's V^T words start mid-word)
    expect_bf16_matches_ref(w);
    AttnSpec sc = shape(2, 4, 100, 150, 32);
    sc.amp = 2.0f, sc.softcap = 5.0f, sc.alibi = {0.5f, 0.25f, 0.0625f, 0.01f};
    expect_bf16_matches_ref(sc);
    for (int64_t tq : {1, 5, 16}) {
        AttnSpec f = shape(2, 2, tq, 77, 64);
        f.causal   = CausalAlign::bottom_right;
        expect_bf16_matches_ref(f);
    }
    // Lazy rescaling (FastMatchesRef_ShiftingRowMaxima): scores rising by ~38 per key block force
    // the recomputation of every unmasked block; falling ones never move the shift.
    for (float ramp : {300.0f, -300.0f}) {
        AttnSpec r = shape(2, 2, 70, 1000, 8);
        r.scale = 1.0f, r.key_ramp = ramp;
        expect_bf16_matches_ref(r);
    }
}

// The kernel rounds q, k, v and dO itself (into its workspace): unrounded inputs give bit for bit
// what the rounded ones give, and the inputs are not written.
TEST(FlashAttentionBf16, RoundsItsInputsItself) {
    AttnSpec s = shape(2, 4, 97, 150, 40, 24);
    s.Hkv = 2, s.strided = true, s.causal = CausalAlign::bottom_right;
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        auto raw = make_attn<float>(s), pre = make_attn_bf16<float>(s);
        const auto q0 = raw.q, k0 = raw.k, v0 = raw.v, d0 = raw.dout;
        raw.p.bf16 = pre.p.bf16 = true;
        flash_forward(raw.p, isa), flash_forward(pre.p, isa);
        flash_backward(raw.p, raw.g, isa), flash_backward(pre.p, pre.g, isa);
        EXPECT_NE(raw.q, pre.q);  // the test's inputs differ, ...
        EXPECT_EQ(raw.out, pre.out);  // ... what the kernel computes with does not
        EXPECT_EQ(raw.lse, pre.lse);
        EXPECT_EQ(raw.dq, pre.dq);
        EXPECT_EQ(raw.dk, pre.dk);
        EXPECT_EQ(raw.dv, pre.dv);
        EXPECT_TRUE(raw.q == q0 && raw.k == k0 && raw.v == v0 && raw.dout == d0) << "an input was written";
    }
}

// Each rounding point by hand: one query (q = 1, D = 1, scale 1), keys k = (1, 0), values (0, 1),
// dO = 1. Forward: P~ = (1, e^-1) unnormalised, l = 1 + e^-1 summed in fp32, out = bf16(e^-1) / l
// (fp32 would give e^-1 / l, 5e-4 apart). Backward: P = (1, e^-1) / l, dV_1 = bf16(P_1); dP = (0, 1),
// dS = P ∘ (dP - P_1) = (-s, s) with s = P_0 P_1, dQ = dS_0 k_0 = bf16(-s), dK = bf16(dS).
// Tolerance: the kernels' exp (a few float ulps) and fp32 sums, kHandTol relative; every rounding
// moves its value by more than 1e-3 relative, so a missed rounding fails.
TEST(FlashAttentionBf16, RoundsPAndDsWhereTileKernelsDo) {
    constexpr double kHandTol = 1e-5;
    const double     e1 = std::exp(-1.0), l = 1.0 + e1, p1 = e1 / l, s = (1.0 / l) * p1;
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        for (bool bf16 : {false, true}) {
            auto a = make_attn<float>(shape(1, 1, 1, 2, 1));
            a.q = {1.0f}, a.k = {1.0f, 0.0f}, a.v = {0.0f, 1.0f}, a.dout = {1.0f};
            a.p.scale = 1.0f, a.p.bf16 = bf16;
            flash_forward(a.p, isa);
            flash_backward(a.p, a.g, isa);
            const auto r = [&](double x) { return bf16 ? double(round_to_bf16(float(x))) : x; };
            EXPECT_NEAR(a.out[0], r(e1) / l, kHandTol * p1) << "bf16 " << bf16;
            EXPECT_NEAR(a.dv[1], r(p1), kHandTol * p1) << "bf16 " << bf16;
            EXPECT_NEAR(a.dq[0], r(-s), kHandTol * s) << "bf16 " << bf16;
            EXPECT_NEAR(a.dk[0], r(-s), kHandTol * s) << "bf16 " << bf16;
            EXPECT_NEAR(a.dk[1], r(s), kHandTol * s) << "bf16 " << bf16;
        }
    }
}

// Accumulators do not overflow or lose the exact answer (issue 23): a row of 32,768 equal scores
// with every value row = 300 gives exactly 300 (P = 1 each, l = 32768 and O = 300 · 32768 are exact
// in fp32); huge equal logits (scores up to 2^127, finite) give exactly uniform weights (values 0
// and 1 alternating: out = 0.5 exactly), on every path, with finite gradients.
TEST(FlashAttentionBf16, EqualScoresAndHugeLogitsStayExact) {
    // bf16 forward: every output equals `want`; then the backward: every gradient finite.
    auto expect_exact = [](AttnData<float>& a, const Bf16Path& isa, float want) {
        a.p.bf16 = true;
        flash_forward(a.p, isa);
        for (float x : a.out) ASSERT_EQ(x, want);
        flash_backward(a.p, a.g, isa);
        for (const auto* g : {&a.dq, &a.dk, &a.dv})
            for (float x : *g) ASSERT_TRUE(std::isfinite(x));
    };
    for (auto isa : bf16_isas()) {
        SCOPED_TRACE(isa_label(isa));
        AttnSpec s = shape(1, 1, 3, 32768, 8, 16);
        auto     a = make_attn<float>(s);
        std::fill(a.q.begin(), a.q.end(), 0.5f);
        std::fill(a.k.begin(), a.k.end(), 0.25f);
        std::fill(a.v.begin(), a.v.end(), 300.0f);
        ASSERT_NO_FATAL_FAILURE(expect_exact(a, isa, 300.0f));

        // Scale 1 (D = 8, q = k = 2^60: scores 2^123), and the default 1/sqrt(D) with D = 64 (a power
        // of two, 1/8) and D = 100 (0.1) with q = k = 2^62: the unscaled sums (2^130, 1.6 · 2^130)
        // overflow float, the scaled scores (2^127, 1.25 · 2^127) do not, on every path.
        for (const auto& [D, x, scale1] : {std::tuple{int64_t(8), 0x1p60f, true}, std::tuple{int64_t(64), 0x1p62f, false},
                                           std::tuple{int64_t(100), 0x1p62f, false}}) {
            SCOPED_TRACE(::testing::Message() << "D " << D);
            auto h = make_attn<float>(shape(1, 2, 70, 256, D));
            std::fill(h.q.begin(), h.q.end(), x);
            std::fill(h.k.begin(), h.k.end(), x);
            for (size_t t = 0; t < h.v.size(); ++t) h.v[t] = float((t / size_t(D)) % 2);  // key j's row = j % 2
            if (scale1) h.p.scale = 1.0f;
            ASSERT_NO_FATAL_FAILURE(expect_exact(h, isa, 0.5f));
        }
    }
}

// K and V rows hidden from every query never reach the results on any bf16 path, even when they
// hold NaN, ±inf or a finite value that bf16 rounds to inf (3.4e38): the result is the one for the
// clean inputs (2x rule), and the hidden row's dK and dV are 0. Two ways to hide key 250 of batch
// 0: valid_lens (the forward stops at key 200 there; the backward's key tile holds key 250 next to
// visible keys, so its hand-over to the fp32 tiles runs) and an additive key-padding mask (-inf;
// the forward loads the tile too, so the vdpbf16ps forward's masked-tile fallback runs).
TEST(FlashAttentionBf16, HiddenNonFiniteKeyValueRowsAreNeverRead) {
    // 2 threads for 4 (batch, kv head) tasks: the backwards run one task per (batch, kv head), so
    // other tasks have written gradients when the AMX backward meets the bad row and redoes the call
    struct Threads {
        int saved = omp_get_max_threads();
        Threads() { omp_set_num_threads(2); }
        ~Threads() { omp_set_num_threads(saved); }
    } const two_threads;
    for (bool by_mask : {false, true}) {
    AttnSpec s = shape(2, 2, 100, 300, 32);
    if (!by_mask) s.valid_lens_rank = 1, s.valid_lens = {200, 300};
    std::vector<float> am(size_t(s.Tk), 0.0f);  // by_mask: key 250 hidden in every batch and head
    am[250] = -INFINITY;
    std::vector<double> am64(am.begin(), am.end());
    auto with_mask = [&](auto& x) {
        if (!by_mask) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(*x.p.additive_mask)>, double>) x.p.additive_mask = am64.data();
        else x.p.additive_mask = am.data();
        x.p.m_stride_b = x.p.m_stride_h = x.p.m_stride_q = 0, x.p.m_stride_k = 1;
    };
    auto r64 = make_attn_bf16<double>(s);
    auto pl  = make_attn_bf16<float>(s);
    with_mask(r64), with_mask(pl);
    ref::attention_forward(r64.p);
    ref::attention_backward(r64.p, r64.g);
    plain_bf16(pl, true);
    const Results   want = results(r64), base = results(pl);
    for (const float bad_v : {INFINITY, -INFINITY, 3.4e38f})
        for (auto isa : bf16_isas()) {
            SCOPED_TRACE(::testing::Message() << isa_label(isa) << ", V row " << bad_v << ", by mask " << by_mask);
            auto a = make_attn_bf16<float>(s);
            with_mask(a);
            for (int64_t d = 0; d < s.D; ++d) {  // batch 0 (Hkv = H = 2): key 250 of head 0
                a.k[size_t(250 * s.D + d)] = NAN;
                a.v[size_t(250 * s.D + d)] = bad_v;
            }
            a.p.bf16 = true;
            flash_forward(a.p, isa);
            flash_backward(a.p, a.g, isa);
            // dk/dv of the hidden row are 0 on every path (nothing reads it); the rule covers the rest
            for (int64_t d = 0; d < s.D; ++d) {
                ASSERT_EQ(a.dk[size_t(250 * s.D + d)], 0.0f);
                ASSERT_EQ(a.dv[size_t(250 * s.D + d)], 0.0f);
            }
            expect_results_within_rule(results(a), want, base, true);
        }
    }
}

// The avx512_bf16 tier's forward is its own build (vdpbf16ps): with the dot path it computes in
// another order than the fp32 tiles on rounded values (so some output differs in its last bits,
// D = 128, scale 1/sqrt(128)); the cap below avx512_bf16 and the rounded_fp32 setting turn it off;
// `automatic` takes it exactly where vdpbf16ps runs at full rate.
TEST(FlashAttentionBf16, DotPathWhereTheCpuHasIt) {
    if (cpu::cpu_isa() < cpu::Isa::avx512_bf16) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
    auto run = [](cpu::Isa isa, cpu::Bf16AttentionPath path) {
        const auto old = cpu::set_bf16_attention_path(path);
        auto       a   = make_attn<float>(shape(1, 2, 100, 300, 128));
        a.p.bf16       = true;
        flash_forward(a.p, isa);
        cpu::set_bf16_attention_path(old);
        return a.out;
    };
    EXPECT_NE(run(cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot),
              run(cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::rounded_fp32));
    EXPECT_EQ(run(cpu::Isa::avx512, cpu::Bf16AttentionPath::dot),
              run(cpu::Isa::avx512, cpu::Bf16AttentionPath::rounded_fp32));
    {
        const IsaGuard cap(cpu::Isa::avx512_bf16);
        const auto     old = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_uses_dot(), cpu::cpu_features().bf16_dot_full_rate);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::dot);
        EXPECT_TRUE(cpu::bf16_attention_uses_dot());
        cpu::set_bf16_attention_path(old);
    }
    const IsaGuard cap(cpu::Isa::avx512);
    const auto     old = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::dot);
    EXPECT_FALSE(cpu::bf16_attention_uses_dot());
    cpu::set_bf16_attention_path(old);
}

// The AMX kernels (Bf16AttentionPath::amx): `automatic` takes them exactly where Linux grants the
// tiles and a call has at least kAmxMinQueries queries and kAmxMinKeys keys; the dot and
// rounded_fp32 settings and a
// cap below amx turn them off; the emulation hook runs them on the avx512_bf16 tier (and they
// compute in another order than the vdpbf16ps build: O, dQ, dK and dV accumulate inside the tiles
// across blocks, so some output and some dq of 100 x 300 x 128 differ in their last bits).
TEST(FlashAttentionBf16, AmxTilesWhereTheCpuHasThem) {
    using Tiles      = cpu::Bf16AttentionTiles;
    const bool amx   = cpu::cpu_isa() == cpu::Isa::amx && cpu::amx_permitted();
    const auto old   = cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
    const bool old_e = cpu::set_amx_tile_emulation(false);
    EXPECT_EQ(cpu::bf16_attention_tiles(cpu::kAmxMinQueries, cpu::kAmxMinKeys), amx ? Tiles::amx : Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), amx ? Tiles::amx : Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(cpu::kAmxMinQueries - 1, 1000), Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(1000, cpu::kAmxMinKeys - 1), Tiles::none);
    EXPECT_EQ(cpu::bf16_attention_tiles(10, 10), Tiles::none);  // the D2L training step's shapes
    cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::amx);
    EXPECT_EQ(cpu::bf16_attention_tiles(1, 1), amx ? Tiles::amx : Tiles::none);
    for (auto p : {cpu::Bf16AttentionPath::dot, cpu::Bf16AttentionPath::rounded_fp32}) {
        cpu::set_bf16_attention_path(p);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);
    }
    {
        const IsaGuard cap(cpu::Isa::avx512_bf16);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::amx);
        cpu::set_amx_tile_emulation(true);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000),
                  cpu::cpu_isa() >= cpu::Isa::avx512_bf16 ? Tiles::emulated : Tiles::none);
        cpu::set_bf16_attention_path(cpu::Bf16AttentionPath::automatic);
        EXPECT_EQ(cpu::bf16_attention_tiles(1000, 1000), Tiles::none);  // emulation only when asked for
    }
    cpu::set_amx_tile_emulation(old_e);
    cpu::set_bf16_attention_path(old);
    if (cpu::cpu_isa() < cpu::Isa::avx512_bf16) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
    auto run = [](const Bf16Path& b) {
        auto a   = make_attn<float>(shape(1, 2, 100, 300, 128));
        a.p.bf16 = true;
        flash_forward(a.p, b);
        flash_backward(a.p, a.g, b);
        return std::pair{a.out, a.dq};
    };
    const auto dot = run({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::dot, false, ""});
    const auto emu = run({cpu::Isa::avx512_bf16, cpu::Bf16AttentionPath::amx, true, ""});
    EXPECT_NE(emu.first, dot.first);
    EXPECT_NE(emu.second, dot.second);
    if (amx) {
        const auto hw = run({cpu::Isa::amx, cpu::Bf16AttentionPath::amx, false, ""});
        EXPECT_NE(hw.first, dot.first);
        EXPECT_NE(hw.second, dot.second);
    }
}

// Gradients written through strides (AttentionGradParams::d*_stride_*: dq, dk, dv stored as
// (B, T, H, D), the layout the head split's backward reshapes without a copy) equal the
// contiguous ones bit for bit: the kernels do the same arithmetic at other addresses. Every fp32
// tier, every bf16 path (vdpbf16ps, AMX emulated and on tiles where present), the reference, and
// both schedules (a head per task: B*Hkv >= threads; few heads: key blocks split across threads).
struct StridedGrads {
    std::vector<float> dq, dk, dv;  // (B, T, H, X) storage, poisoned
    kernels::AttentionGradParams<float> g;
};
StridedGrads strided_grads(const AttnData<float>& a) {
    const AttnSpec& s = a.spec;
    StridedGrads r;
    r.dq.assign(a.dq.size(), 7.0f), r.dk.assign(a.dk.size(), 7.0f), r.dv.assign(a.dv.size(), 7.0f);
    r.g      = a.g;
    r.g.dq   = r.dq.data(), r.g.dk = r.dk.data(), r.g.dv = r.dv.data();
    r.g.dq_stride_b = s.Tq * s.H * s.D, r.g.dq_stride_h = s.D, r.g.dq_stride_t = s.H * s.D;
    r.g.dk_stride_b = s.Tk * s.Hkv * s.D, r.g.dk_stride_h = s.D, r.g.dk_stride_t = s.Hkv * s.D;
    r.g.dv_stride_b = s.Tk * s.Hkv * s.Dv, r.g.dv_stride_h = s.Dv, r.g.dv_stride_t = s.Hkv * s.Dv;
    return r;
}
/// (B, T, H, X) storage back in (B, H, T, X) order.
std::vector<float> unstride(const std::vector<float>& x, int64_t B, int64_t H, int64_t T, int64_t X) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e < X; ++e) out[size_t(((b * H + h) * T + t) * X + e)] = x[size_t(((b * T + t) * H + h) * X + e)];
    return out;
}
void expect_strided_grads_equal(const AttnData<float>& a, const StridedGrads& r) {
    const AttnSpec& s = a.spec;
    EXPECT_EQ(unstride(r.dq, s.B, s.H, s.Tq, s.D), a.dq);
    EXPECT_EQ(unstride(r.dk, s.B, s.Hkv, s.Tk, s.D), a.dk);
    EXPECT_EQ(unstride(r.dv, s.B, s.Hkv, s.Tk, s.Dv), a.dv);
}

TEST(FlashAttentionKernels, StridedGradientsEqualContiguousOnes) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    // {B, H, Hkv}: 4 kv heads (a head per task) and 1 (key blocks split over 2 threads); Tk spans
    // several key blocks, D != Dv, dropout and a causal mask on.
    const int64_t heads[][3] = {{2, 4, 2}, {1, 2, 1}};
    for (const auto& hd : heads) {
        AttnSpec s = shape(hd[0], hd[1], 37, 300, 24);
        s.Hkv = hd[2], s.Dv = 40, s.dropout = 0.2f, s.causal = CausalAlign::bottom_right;
        SCOPED_TRACE(::testing::Message() << "B " << hd[0] << " H " << hd[1] << " Hkv " << hd[2]);
        {
            SCOPED_TRACE("reference");
            auto a = make_attn<float>(s);
            ref::attention_forward(a.p);
            StridedGrads r = strided_grads(a);
            ref::attention_backward(a.p, a.g);
            ref::attention_backward(a.p, r.g);
            expect_strided_grads_equal(a, r);
        }
        for (auto isa : isas()) {
            SCOPED_TRACE(cpu::isa_name(isa));
            auto a = make_attn<float>(s);
            flash_forward(a.p, isa);
            StridedGrads r = strided_grads(a);
            flash_backward(a.p, a.g, isa);
            flash_backward(a.p, r.g, isa);
            expect_strided_grads_equal(a, r);
        }
        for (const auto& path : bf16_isas()) {
            SCOPED_TRACE(::testing::Message() << "bf16 compute, " << isa_label(path));
            auto a   = make_attn_bf16<float>(s);
            a.p.bf16 = true;
            flash_forward(a.p, path);
            StridedGrads r = strided_grads(a);
            flash_backward(a.p, a.g, path);
            flash_backward(a.p, r.g, path);
            expect_strided_grads_equal(a, r);
        }
    }
    omp_set_num_threads(saved);
}

// Few queries (Tq <= 16) take the backward with one-vector query blocks (SimdAvx512ShortQ,
// SimdAvx512DotShortQ) on the AVX-512 tiers: every feature in bf16 as FewQueriesEveryFeature does
// in fp32, and both backward schedules (a head per task; key blocks split over 2 threads) in both.
TEST(FlashAttentionBf16, FewQueriesEveryFeatureAndBothSchedules) {
    for (int64_t tq : {1, 10, 16}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(3, 4, tq, 37, 64);
        s.valid_lens_rank = 1, s.valid_lens = {0, 12, 500};
        expect_bf16_matches_ref(s);
        AttnSpec c = shape(2, 2, tq, 29, 16);
        c.causal   = CausalAlign::bottom_right;
        expect_bf16_matches_ref(c);
        AttnSpec m   = shape(2, 2, tq, 50, 24);
        m.mask       = MaskKind::both;
        m.mask_shape = MaskShape::full;
        expect_bf16_matches_ref(m);
        AttnSpec d = shape(2, 2, tq, 45, 32);
        d.dropout = 0.2f, d.mask = MaskKind::additive, d.mask_shape = MaskShape::key_padding;
        expect_bf16_matches_ref(d);
        AttnSpec g = shape(2, 4, tq, 33, 32, 48);
        g.Hkv = 1, g.strided = true;
        expect_bf16_matches_ref(g);
    }
    const int saved = omp_get_max_threads();
    AttnSpec  split = shape(1, 1, 10, 700, 64);  // one head, six key blocks of 128
    split.causal    = CausalAlign::bottom_right;
    for (int nt : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << nt << " threads");
        omp_set_num_threads(nt);
        expect_fast_matches_ref(split);
        expect_bf16_matches_ref(split);
    }
    omp_set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::test
