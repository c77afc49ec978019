// The fast flash kernel (cpu/flash_attention.h) against ref<double> with the flash-attention rule
// err_fast <= kErrFactor * err_ref32 + kErrFloor on every path (AVX-512, AVX2, scalar) this CPU has:
// sizes at the tile edges (64 queries x 128 keys), masks, valid_lens, causal alignments, windows,
// dropout, GQA, fully masked rows, both backward schedules. Pointer-level: no Tensor.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention_kernel_test_util.h"
#include "qkv/core/error.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

// Sizes next to the tile edges (64 queries x 128 keys on AVX-512/AVX2, 32 x 64 scalar) and head
// dims 1..256 with odd ones; each (Tq, Tk) in {1, 7, 63, 64, 65, 97, 128, 200, 1000} and each
// D in {1, 8, 31, 64, 100, 128, 256} appears at least once.
TEST(FlashAttentionKernels, FastMatchesRef_TileEdgeSizes) {
    const int64_t cases[][5] = {
        {1, 1, 1, 1, 0},    {7, 200, 8, 8, 0},     {63, 65, 31, 31, 0},  {64, 64, 64, 64, 0},
        {65, 63, 100, 100, 0}, {97, 128, 128, 128, 0}, {128, 97, 256, 256, 0}, {200, 7, 64, 33, 0},
        {1, 1000, 64, 64, 0}, {1000, 1, 8, 8, 0},  {129, 257, 17, 1, 0},  {300, 1000, 64, 64, 0},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << c[0] << " Tk " << c[1] << " D " << c[2]
                                          << " Dv " << c[3]);
        expect_fast_matches_ref(shape(1, 2, c[0], c[1], c[2], c[3]));
    }
}

// Few queries (Tq <= one vector: incremental decoding) take query blocks of one vector instead
// of 64 rows: every mask kind, causal alignments, dropout and GQA on that path too.
TEST(FlashAttentionKernels, FastMatchesRef_FewQueriesEveryFeature) {
    for (int64_t tq : {1, 3, 8, 16}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(3, 4, tq, 37, 64);
        s.valid_lens_rank = 1, s.valid_lens = {0, 12, 500};
        expect_fast_matches_ref(s);
        s.valid_lens_rank = 2, s.valid_lens.clear();
        for (int64_t t = 0; t < 3 * tq; ++t) s.valid_lens.push_back((t * 7) % 40);
        expect_fast_matches_ref(s);
        for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
            AttnSpec c = shape(2, 2, tq, 29, 16);
            c.causal   = align;
            expect_fast_matches_ref(c);
        }
        AttnSpec m    = shape(2, 2, tq, 50, 24);
        m.mask        = MaskKind::both;
        m.mask_shape  = MaskShape::full;
        expect_fast_matches_ref(m);
        AttnSpec d = shape(2, 2, tq, 45, 32);
        d.dropout = 0.2f, d.mask = MaskKind::additive, d.mask_shape = MaskShape::key_padding;
        expect_fast_matches_ref(d);
        AttnSpec g = shape(2, 4, tq, 33, 32, 48);
        g.Hkv = 1, g.strided = true;
        expect_fast_matches_ref(g);
    }
}

TEST(FlashAttentionKernels, FastMatchesRef_ValidLens) {
    AttnSpec s = shape(3, 2, 97, 200, 31);
    s.valid_lens_rank = 1, s.valid_lens = {0, 130, 500};  // 0: fully masked batch; > Tk: clamped
    expect_fast_matches_ref(s);
    s.valid_lens_rank = 2;
    s.valid_lens.clear();
    for (int64_t t = 0; t < 3 * 97; ++t) s.valid_lens.push_back((t * 37) % 230);  // incl. 0, > Tk
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_CausalBothAlignments) {
    for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right})
        for (auto [tq, tk] : {std::pair<int64_t, int64_t>{97, 300}, {300, 97}, {200, 200}}) {
            SCOPED_TRACE(::testing::Message() << "align " << int(align) << " Tq " << tq << " Tk " << tk);
            AttnSpec s = shape(1, 2, tq, tk, 64);
            s.causal   = align;
            expect_fast_matches_ref(s);
        }
}

// Sliding windows on the fast kernel: both alignments, one-sided and two-sided, windows narrower
// and wider than a key tile, Tq != Tk, with valid_lens, causal, masks and dropout, the few-query
// path, and rows whose window is empty (window entirely past valid_lens).
TEST(FlashAttentionKernels, FastMatchesRef_SlidingWindow) {
    struct W {
        int64_t tq, tk, left, right;
        bool bottom_right;
    };
    const W cases[] = {{300, 300, 0, 0, false},   {300, 300, 16, 0, false}, {300, 300, 130, 5, false},
                       {200, 500, 64, 64, true},  {500, 200, 3, -1, false}, {257, 257, -1, 40, false},
                       {97, 1000, 256, 0, true},  {1, 700, 128, 0, true},   {8, 300, 20, 20, true},
                       {129, 129, 200, 200, false}};
    for (const W& w : cases) {
        SCOPED_TRACE(::testing::Message() << "Tq " << w.tq << " Tk " << w.tk << " window (" << w.left << ", "
                                          << w.right << ")" << (w.bottom_right ? " bottom-right" : ""));
        AttnSpec s = shape(1, 2, w.tq, w.tk, 32);
        s.window_left = w.left, s.window_right = w.right, s.window_shift = w.bottom_right ? w.tk - w.tq : 0;
        expect_fast_matches_ref(s);
    }
    AttnSpec c = shape(2, 2, 260, 260, 24);
    c.window_left = 70, c.window_right = 0, c.causal = CausalAlign::top_left;
    c.valid_lens_rank = 1, c.valid_lens = {260, 100};  // batch 1: rows >= 170 see no key
    expect_fast_matches_ref(c);
    c.mask = MaskKind::both, c.dropout = 0.1f, c.Hkv = 1;
    expect_fast_matches_ref(c);
}

// Soft cap and ALiBi on the fast kernel (the masked two-pass path), alone and with masks, causal
// bottom-right, a window, dropout, GQA and the few-query path.
TEST(FlashAttentionKernels, FastMatchesRef_SoftcapAndAlibi) {
    const std::vector<float> slopes = {0.5f, 0.25f, 0.0625f, 0.01f};
    for (int64_t tq : {3, 100, 200}) {
        SCOPED_TRACE(::testing::Message() << "Tq " << tq);
        AttnSpec s = shape(2, 4, tq, 150, 32);
        s.amp = 2.0f, s.softcap = 5.0f;
        expect_fast_matches_ref(s);
        s.softcap = 0.0f, s.alibi = slopes;
        expect_fast_matches_ref(s);
        s.softcap = 3.0f, s.causal = CausalAlign::bottom_right, s.mask = MaskKind::both, s.Hkv = 2;
        expect_fast_matches_ref(s);
        s.mask = MaskKind::none, s.causal = CausalAlign::none, s.dropout = 0.15f;
        s.window_left = 40, s.window_right = 10, s.window_shift = 150 - tq;
        expect_fast_matches_ref(s);
    }
}

TEST(FlashAttentionKernels, FastMatchesRef_CausalWithValidLens) {
    AttnSpec s = shape(2, 2, 150, 150, 40);
    s.causal = CausalAlign::top_left, s.valid_lens_rank = 1, s.valid_lens = {70, 150};
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_BoolAndAdditiveMasks) {
    for (auto kind : {MaskKind::boolean, MaskKind::additive, MaskKind::both})
        for (auto shp : {MaskShape::full, MaskShape::key_padding, MaskShape::shared,
                         MaskShape::transposed}) {
            SCOPED_TRACE(::testing::Message() << "kind " << int(kind) << " shape " << int(shp));
            AttnSpec s    = shape(2, 2, 70, 150, 24);
            s.mask        = kind;
            s.mask_shape  = shp;
            s.masked_rows = {1, 1, 5, 0, 0, 69};
            expect_fast_matches_ref(s);
        }
}

TEST(FlashAttentionKernels, FastMatchesRef_GqaMqaStrided) {
    AttnSpec s = shape(2, 4, 80, 140, 32, 48);
    s.Hkv = 2, s.strided = true;
    expect_fast_matches_ref(s);
    s.Hkv = 1, s.causal = CausalAlign::bottom_right;
    expect_fast_matches_ref(s);
}

TEST(FlashAttentionKernels, FastMatchesRef_Dropout) {
    AttnSpec s = shape(2, 2, 97, 200, 32);
    s.dropout = 0.2f, s.causal = CausalAlign::bottom_right, s.mask = MaskKind::additive;
    s.mask_shape = MaskShape::key_padding;
    expect_fast_matches_ref(s);
}

// Logits of magnitude ~1e4 (q, k ~ +-100, D = 1, scale 1): no overflow, no NaN, and with the
// lse residual (AttentionParams::lse_lo) the 2x rule holds. Without it the backward's P carries
// the rounding of lse (~ulp(1e4)/2 relative): still finite, checked below.
TEST(FlashAttentionKernels, FastMatchesRef_LargeLogits) {
    AttnSpec s = shape(1, 2, 70, 140, 1);
    s.amp = 100.0f, s.scale = 1.0f;
    expect_fast_matches_ref(s);
    for (auto isa : isas()) {
        auto a     = make_attn<float>(s);
        a.p.lse_lo = nullptr;
        flash_forward(a.p, isa);
        flash_backward(a.p, a.g, isa);
        const Results r = results(a);
        for (const auto* x : {&r.out, &r.lse, &r.dq, &r.dk, &r.dv})
            for (double e : *x) ASSERT_TRUE(std::isfinite(e)) << cpu::isa_name(isa);
    }
}

// The forward keeps a row's softmax shift across unmasked key blocks until a block's sum of
// e^(s - shift) passes 2^20, then recomputes that block with its maximum (lazy rescaling). Scores
// rising by ~38 along each 128-key block force that recomputation in every block and inside the
// first tile's span; falling scores never move the shift and underflow to 0 far from the max;
// a single late spike moves it once. Checked against the reference with the 2x rule: out and
// lse (what the lazy shift can change; lse lost up to 2x when log l was summed in float), and the
// gradients for the 64-row blocks. With one or a few queries the gradients are left out: dq
// there is dominated by the backward's D = rowsum(dO o O), which multiplies the rounding of O by
// |sum_j P_j k_j| (~40 here) while the math path forms D from P and dP, so a few rows give the
// 2x rule no margin with either forward (the two-pass forward gave dq 3.4e-6 against 3.2e-6).
TEST(FlashAttentionKernels, FastMatchesRef_ShiftingRowMaxima) {
    for (int64_t tq : {70, 1, 16}) {  // 64-row query blocks; one-vector blocks (decoding)
        for (float ramp : {300.0f, -300.0f, 40.0f}) {
            SCOPED_TRACE(::testing::Message() << "Tq " << tq << " key_ramp " << ramp);
            AttnSpec s = shape(2, 2, tq, 1000, 8);
            s.scale = 1.0f, s.key_ramp = ramp;
            expect_fast_matches_ref(s, /*bwd=*/tq > 16);
        }
    }
    AttnSpec s = shape(1, 2, 100, 700, 16);
    s.scale     = 1.0f;
    auto spike  = [](auto& a) {  // key 530 aligned with every query: a score ~+50 above the rest
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t d = 0; d < 16; ++d) a.k[size_t((h * 700 + 530) * 16 + d)] = 0;
        for (size_t i = 0; i < a.q.size(); i += 16) a.q[i] = 1;
        for (int64_t h = 0; h < 2; ++h) a.k[size_t((h * 700 + 530) * 16)] = 50;
    };
    auto r64 = make_attn<double>(s);
    auto r32 = make_attn<float>(s);
    spike(r64), spike(r32);
    ref::attention_forward(r64.p), ref::attention_forward(r32.p);
    const Results want = results(r64), base = results(r32);
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        auto a = make_attn<float>(s);
        spike(a);
        flash_forward(a.p, isa);
        const Results got = results(a);
        EXPECT_TRUE(within_rule("out", max_err(got.out, want.out), max_err(base.out, want.out)));
        EXPECT_TRUE(within_rule("lse", max_err(got.lse, want.lse), max_err(base.lse, want.lse)));
    }
}

// Fully masked rows and key blocks: out 0, lse -inf, zero gradients, exactly; keys 64..255 masked
// for every query of batch 0 (whole key blocks), every key of batch 1 row 3.
TEST(FlashAttentionKernels, FullyMaskedRowsAndBlocksGiveZero) {
    AttnSpec s = shape(2, 1, 100, 300, 16);
    s.mask = MaskKind::boolean, s.mask_keep = 2.0, s.mask_shape = MaskShape::full;
    auto a0 = make_attn<float>(s);
    for (int64_t i = 0; i < 100; ++i)
        for (int64_t j = 64; j < 256; ++j) a0.bool_mask[size_t(i * 300 + j)] = 0;
    for (int64_t j = 0; j < 300; ++j) a0.bool_mask[size_t((100 + 3) * 300 + j)] = 0;
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        auto a = a0;
        a.p.q = a.q.data(), a.p.k = a.k.data(), a.p.v = a.v.data(), a.p.out = a.out.data();
        a.p.lse = a.lse.data(), a.p.lse_lo = a.lse_lo.data(), a.p.bool_mask = a.bool_mask.data();
        a.g.dout = a.dout.data(), a.g.dq = a.dq.data(), a.g.dk = a.dk.data(), a.g.dv = a.dv.data();
        flash_forward(a.p, isa);
        flash_backward(a.p, a.g, isa);
        EXPECT_EQ(a.lse[100 + 3], -INFINITY);
        for (int64_t e = 0; e < 16; ++e) {
            EXPECT_EQ(a.out[size_t((100 + 3) * 16 + e)], 0.0f);
            EXPECT_EQ(a.dq[size_t((100 + 3) * 16 + e)], 0.0f);
        }
        for (int64_t j = 64; j < 256; ++j)
            for (int64_t e = 0; e < 16; ++e) {
                ASSERT_EQ(a.dk[size_t(j * 16 + e)], 0.0f) << j;
                ASSERT_EQ(a.dv[size_t(j * 16 + e)], 0.0f) << j;
            }
        for (float x : a.dq) ASSERT_TRUE(std::isfinite(x));
    }
    // And all values against the reference.
    expect_fast_matches_ref(s);  // (random mask variant of the same shape)
}

// valid_len 0 for a whole batch element and Tq > Tk bottom-right causal (early rows see no key).
TEST(FlashAttentionKernels, FullyMaskedByIndexGiveZero) {
    AttnSpec s = shape(2, 2, 130, 64, 8);
    s.valid_lens_rank = 1, s.valid_lens = {0, 64}, s.causal = CausalAlign::bottom_right;
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const Results r = run_fast(s, isa);
        for (int64_t t = 0; t < 2 * 130; ++t) EXPECT_EQ(r.lse[size_t(t)], -INFINITY);
        for (int64_t t = 0; t < 2 * 130 * 8; ++t) {
            ASSERT_EQ(r.out[size_t(t)], 0.0);
            ASSERT_EQ(r.dq[size_t(t)], 0.0);
        }
        for (int64_t t = 0; t < 2 * 64 * 8; ++t) ASSERT_EQ(r.dk[size_t(t)], 0.0);
        // batch 1: rows i < Tq - Tk = 66 see no key.
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t i = 0; i < 130; ++i)
                EXPECT_EQ(std::isinf(r.lse[size_t((2 + h) * 130 + i)]), i < 66) << i;
    }
    expect_fast_matches_ref(s);
}

// The fast kernel drops exactly the entries the reference drops.
TEST(FlashAttentionKernels, DropoutMaskMatchesReference) {
    auto       a    = make_attn<float>(dropout_probe_spec(0.3f));
    const auto want = dropout_mask_via([](AttnData<float>& x) { ref::attention_forward(x.p); }, a);
    for (auto isa : isas()) {
        auto       b   = make_attn<float>(dropout_probe_spec(0.3f));
        const auto got = dropout_mask_via(
            [isa](AttnData<float>& x) { flash_forward(x.p, isa); }, b);
        EXPECT_EQ(got, want) << cpu::isa_name(isa);
    }
}

// Same seed -> same outputs and gradients, on 1 and on 2 threads. out, lse, dk, dv are bit-equal;
// dq too when each thread owns whole heads (B * Hkv >= threads). With one head on 2 threads the
// backward splits key blocks and sums private dQs: dq then equals the 1-thread dq to rounding.
TEST(FlashAttentionKernels, DropoutDeterministicAcrossThreadCounts) {
    const int saved = omp_get_max_threads();
    for (int64_t B : {1, 2}) {
        AttnSpec s = shape(B, 1, 150, 400, 32);
        s.dropout = 0.25f, s.causal = CausalAlign::top_left;
        omp_set_num_threads(1);
        const Results one = run_fast(s, cpu::simd_isa());
        omp_set_num_threads(2);
        const Results two = run_fast(s, cpu::simd_isa());
        const Results two_again = run_fast(s, cpu::simd_isa());
        EXPECT_EQ(one.out, two.out);
        EXPECT_EQ(one.lse, two.lse);
        EXPECT_EQ(one.dk, two.dk);
        EXPECT_EQ(one.dv, two.dv);
        EXPECT_EQ(two.dq, two_again.dq);
        if (B == 2) EXPECT_EQ(one.dq, two.dq);
        else EXPECT_TRUE(all_close(two.dq, one.dq, 1e-6, 1e-5));  // fp32 re-association only
    }
    omp_set_num_threads(saved);
}

// Both backward work splits (whole heads per thread; key blocks per thread) against the reference.
TEST(FlashAttentionKernels, BackwardBothParallelSplits) {
    const int saved = omp_get_max_threads();
    AttnSpec  s     = shape(1, 1, 260, 700, 64);
    s.causal        = CausalAlign::top_left;
    for (int nt : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << nt << " threads");
        omp_set_num_threads(nt);
        expect_fast_matches_ref(s);
    }
    omp_set_num_threads(saved);
}

TEST(FlashAttentionKernels, EmptyShapesAndNoLse) {
    // Tk = 0: every row fully masked; Tq = 0: dk and dv are written as 0.
    auto a = make_attn<float>(shape(1, 2, 5, 0, 4));
    cpu::flash_attention_forward(a.p);
    cpu::flash_attention_backward(a.p, a.g);
    for (float x : a.out) EXPECT_EQ(x, 0.0f);
    for (float x : a.lse) EXPECT_EQ(x, -INFINITY);
    for (float x : a.dq) EXPECT_EQ(x, 0.0f);
    // lse may be omitted (inference): out is unchanged.
    for (auto isa : isas()) {
        auto c = make_attn<float>(shape(2, 2, 70, 130, 24));
        auto d = make_attn<float>(shape(2, 2, 70, 130, 24));
        flash_forward(c.p, isa);
        d.p.lse = nullptr, d.p.lse_lo = nullptr;
        flash_forward(d.p, isa);
        EXPECT_EQ(c.out, d.out) << cpu::isa_name(isa);
    }
    auto b = make_attn<float>(shape(1, 2, 0, 5, 4));
    cpu::flash_attention_forward(b.p);
    cpu::flash_attention_backward(b.p, b.g);
    for (float x : b.dk) EXPECT_EQ(x, 0.0f);
    for (float x : b.dv) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace qkv::test
