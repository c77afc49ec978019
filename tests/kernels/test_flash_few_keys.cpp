// The few-keys attention kernels (cpu/flash_few_keys.h, Tk <= 32) against ref<double> with the
// flash rule err_fast <= kErrFactor * err_ref32 + kErrFloor (attention_kernel_test_util.h), on
// every ISA path this CPU has (scalar = the portable build, avx2, avx512 through the cap): key
// counts at the vector edges (1, 2, 7, 8, 9, 15, 16, 17, 31, 32 keys: one to four 8-lane AVX2
// vectors, one or two 16-lane vectors), every option the kernel covers (valid_lens of rank 1 and 2,
// causal in both alignments, dropout, GQA, strides) alone and combined, forward and backward.
// The flash kernels at the same shapes (FewKeysPath::never) pass the same checks, so both paths of
// the dispatch stay tested. Pointer-level: no Tensor.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention_kernel_test_util.h"

namespace qkv::test {
namespace {

/// Sets the few-keys path for a scope.
class FewKeysGuard {
   public:
    explicit FewKeysGuard(cpu::FewKeysPath p) : old_(cpu::set_few_keys_path(p)) {}
    ~FewKeysGuard() { cpu::set_few_keys_path(old_); }
    FewKeysGuard(const FewKeysGuard&)            = delete;
    FewKeysGuard& operator=(const FewKeysGuard&) = delete;

   private:
    cpu::FewKeysPath old_;
};

/// The spec on the few-keys kernels (checked to be taken) and on the flash kernels.
void expect_both_paths_match_ref(const AttnSpec& s, bool bwd = true) {
    {
        const FewKeysGuard on(cpu::FewKeysPath::always);
        auto               a = make_attn<float>(s);
        ASSERT_TRUE(cpu::uses_few_keys(a.p));
        SCOPED_TRACE("few-keys kernels");
        expect_fast_matches_ref(s, bwd);
    }
    const FewKeysGuard off(cpu::FewKeysPath::never);
    SCOPED_TRACE("flash kernels");
    expect_fast_matches_ref(s, bwd);
}

constexpr int64_t kKeyCounts[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32};

// Plain attention at every key count, few and many queries, the D2L head width and odd widths (the
// D and Dv tails of the 16-lane and 8-lane vectors).
TEST(FlashFewKeys, MatchesRef_KeyCountsAndWidths) {
    for (int64_t tk : kKeyCounts)
        for (auto [tq, d, dv] : {std::tuple<int64_t, int64_t, int64_t>{10, 64, 64}, {1, 3, 5}, {37, 17, 33}}) {
            SCOPED_TRACE(::testing::Message() << "Tq " << tq << " Tk " << tk << " D " << d << " Dv " << dv);
            expect_both_paths_match_ref(shape(2, 3, tq, tk, d, dv));
        }
}

// valid_lens of rank 1 (0: a fully masked batch; > Tk: clamped) and rank 2 (per query, incl. 0).
TEST(FlashFewKeys, MatchesRef_ValidLens) {
    for (int64_t tk : kKeyCounts) {
        SCOPED_TRACE(::testing::Message() << "Tk " << tk);
        AttnSpec s        = shape(3, 2, 10, tk, 64);
        s.valid_lens_rank = 1, s.valid_lens = {0, (tk + 1) / 2, tk + 5};
        expect_both_paths_match_ref(s);
        s.valid_lens_rank = 2, s.valid_lens.clear();
        for (int64_t t = 0; t < 3 * 10; ++t) s.valid_lens.push_back((t * 7) % (tk + 2));
        expect_both_paths_match_ref(s);
    }
}

// Causal masks (the decoder's self-attention: Tq = Tk, top-left) and Tq != Tk in both alignments,
// with valid_lens on top.
TEST(FlashFewKeys, MatchesRef_Causal) {
    for (int64_t tk : kKeyCounts)
        for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right})
            for (int64_t tq : {tk, int64_t(1), tk + 3}) {
                SCOPED_TRACE(::testing::Message() << "Tq " << tq << " Tk " << tk << " align " << int(align));
                AttnSpec s = shape(2, 2, tq, tk, 24);
                s.causal   = align;
                expect_both_paths_match_ref(s);
                s.valid_lens_rank = 1, s.valid_lens = {tk / 2, tk};
                expect_both_paths_match_ref(s);
            }
}

// Dropout alone and with every mask the kernel covers, GQA/MQA and (B, T, H, D) strides.
TEST(FlashFewKeys, MatchesRef_DropoutMasksGqa) {
    for (int64_t tk : {1, 9, 16, 17, 32}) {
        SCOPED_TRACE(::testing::Message() << "Tk " << tk);
        AttnSpec s = shape(2, 4, 10, tk, 32);
        s.dropout  = 0.2f;
        expect_both_paths_match_ref(s);
        s.valid_lens_rank = 1, s.valid_lens = {tk / 2 + 1, tk};
        expect_both_paths_match_ref(s);
        s.causal = CausalAlign::top_left;
        expect_both_paths_match_ref(s);
        s.valid_lens_rank = 2, s.valid_lens.clear(), s.causal = CausalAlign::bottom_right;
        for (int64_t t = 0; t < 2 * 10; ++t) s.valid_lens.push_back(t % (tk + 1));
        expect_both_paths_match_ref(s);
        AttnSpec g = shape(2, 4, 9, tk, 32, 48);
        g.Hkv = 2, g.strided = true, g.dropout = 0.3f;
        expect_both_paths_match_ref(g);
        g.Hkv = 1, g.causal = CausalAlign::top_left;
        expect_both_paths_match_ref(g);
    }
}

// Large logits (q, k ~ +-100, D = 1, scale 1): out and lse by the 2x rule, gradients finite. The
// gradients are left out of the rule as in FlashAttentionKernels.FastMatchesRef_ShiftingRowMaxima:
// both fast kernels form D = rowsum(dO o O) from the rounded O, which |sum_j P_j k_j| (~100 here)
// amplifies, where the math path forms D from P and dP; the few-keys and flash kernels gave the
// same dq error (8.3e-5 against the reference's 2.6e-5) when this test was written.
TEST(FlashFewKeys, MatchesRef_LargeLogits) {
    AttnSpec s = shape(1, 2, 20, 13, 1);
    s.amp = 100.0f, s.scale = 1.0f;
    expect_both_paths_match_ref(s, /*bwd=*/false);
    const FewKeysGuard on(cpu::FewKeysPath::always);
    for (auto isa : isas()) {
        const Results r = run_fast(s, isa);
        for (const auto* x : {&r.out, &r.lse, &r.dq, &r.dk, &r.dv})
            for (double e : *x) ASSERT_TRUE(std::isfinite(e)) << cpu::isa_name(isa);
    }
}

// The dropout mask is the flash kernels' and the reference's (one Philox stream), exactly: the
// probe reads it back through out with q = 0 and v = identity (Dv = Tk).
TEST(FlashFewKeys, DropoutMaskMatchesReference) {
    for (int64_t tk : {5, 16, 32}) {
        AttnSpec s = dropout_probe_spec(0.3f);
        s.Tq = 11, s.Tk = tk, s.Dv = tk;
        auto       a    = make_attn<float>(s);
        const auto want = dropout_mask_via([](AttnData<float>& x) { ref::attention_forward(x.p); }, a);
        const FewKeysGuard on(cpu::FewKeysPath::always);
        for (auto isa : isas()) {
            auto       b   = make_attn<float>(s);
            const auto got = dropout_mask_via([isa](AttnData<float>& x) { flash_forward(x.p, isa); }, b);
            EXPECT_EQ(got, want) << cpu::isa_name(isa) << " Tk " << tk;
        }
    }
}

// Keys a row does not see are never read into its results: NaN and infinity in the K and V rows
// past valid_lens leave out, lse and every gradient as with finite values there (bit-equal: the
// kernel skips those rows), and the hidden keys' dk, dv are exactly 0.
TEST(FlashFewKeys, HiddenNonFiniteKeysNotRead) {
    AttnSpec s        = shape(2, 2, 10, 12, 16);
    s.valid_lens_rank = 1, s.valid_lens = {7, 12};
    s.dropout         = 0.1f;
    const FewKeysGuard on(cpu::FewKeysPath::always);
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        auto clean = make_attn<float>(s);
        auto dirty = make_attn<float>(s);
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t j = 7; j < 12; ++j)
                for (int64_t e = 0; e < 16; ++e) {
                    const size_t t = size_t((h * 12 + j) * 16 + e);
                    dirty.k[t]     = std::numeric_limits<float>::quiet_NaN();
                    dirty.v[t]     = e % 2 ? INFINITY : std::numeric_limits<float>::quiet_NaN();
                }
        for (auto* a : {&clean, &dirty}) {
            flash_forward(a->p, isa);
            flash_backward(a->p, a->g, isa);
        }
        const Results c = results(clean), d = results(dirty);
        EXPECT_EQ(c.out, d.out);
        EXPECT_EQ(c.lse, d.lse);
        EXPECT_EQ(c.dq, d.dq);
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t j = 0; j < 12; ++j)
                for (int64_t e = 0; e < 16; ++e) {
                    const size_t t = size_t((h * 12 + j) * 16 + e);
                    ASSERT_EQ(d.dk[t], j < 7 ? c.dk[t] : 0.0) << j;
                    ASSERT_EQ(d.dv[t], j < 7 ? c.dv[t] : 0.0) << j;
                }
    }
}

// Rows that see no key (valid_len 0; bottom-right causal with Tq > Tk): out 0, lse -inf, zero
// gradients, exactly.
TEST(FlashFewKeys, FullyMaskedRowsGiveZero) {
    AttnSpec s        = shape(2, 2, 13, 6, 8);
    s.valid_lens_rank = 1, s.valid_lens = {0, 6}, s.causal = CausalAlign::bottom_right;
    const FewKeysGuard on(cpu::FewKeysPath::always);
    for (auto isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const Results r = run_fast(s, isa);
        for (int64_t t = 0; t < 2 * 13; ++t) EXPECT_EQ(r.lse[size_t(t)], -INFINITY);
        for (int64_t t = 0; t < 2 * 13 * 8; ++t) ASSERT_EQ(r.out[size_t(t)], 0.0);
        for (int64_t t = 0; t < 2 * 13 * 8; ++t) ASSERT_EQ(r.dq[size_t(t)], 0.0);
        for (int64_t t = 0; t < 2 * 6 * 8; ++t) ASSERT_EQ(r.dk[size_t(t)], 0.0);
        for (int64_t h = 0; h < 2; ++h)  // batch 1: rows i < Tq - Tk = 7 see no key
            for (int64_t i = 0; i < 13; ++i) EXPECT_EQ(std::isinf(r.lse[size_t((2 + h) * 13 + i)]), i < 7) << i;
    }
}

// Results do not depend on the thread count: each thread owns whole heads (forward) and whole kv
// heads (backward), so every value is bit-equal on 1 and 2 threads.
TEST(FlashFewKeys, DeterministicAcrossThreadCounts) {
    const int          saved = omp_get_max_threads();
    const FewKeysGuard on(cpu::FewKeysPath::always);
    AttnSpec           s = shape(3, 2, 10, 10, 32);
    s.dropout = 0.25f, s.causal = CausalAlign::top_left, s.Hkv = 1;
    omp_set_num_threads(1);
    const Results one = run_fast(s, cpu::simd_isa());
    omp_set_num_threads(2);
    const Results two = run_fast(s, cpu::simd_isa());
    omp_set_num_threads(saved);
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.lse, two.lse);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
}

// What the kernel does not cover goes to the flash kernels, whatever the setting; the automatic
// setting takes it up to the capped tier's cut (16 keys; 32 on AVX2).
TEST(FlashFewKeys, DispatchCoversOnlyItsOptions) {
    auto a = make_attn<float>(shape(1, 1, 10, 10, 8));
    EXPECT_TRUE(cpu::few_keys_covers(a.p));
    const FewKeysGuard on(cpu::FewKeysPath::always);
    auto               p = a.p;
    p.Tk                 = 33;
    EXPECT_FALSE(cpu::uses_few_keys(p));
    p = a.p, p.bf16 = true;
    EXPECT_FALSE(cpu::uses_few_keys(p));
    p = a.p, p.softcap = 2.0f;
    EXPECT_FALSE(cpu::uses_few_keys(p));
    p = a.p, p.window_left = 3;
    EXPECT_FALSE(cpu::uses_few_keys(p));
    const uint8_t keep[1] = {1};
    p = a.p, p.bool_mask = keep;
    EXPECT_FALSE(cpu::uses_few_keys(p));
    cpu::set_few_keys_path(cpu::FewKeysPath::never);
    EXPECT_FALSE(cpu::uses_few_keys(a.p));
    cpu::set_few_keys_path(cpu::FewKeysPath::automatic);
    for (auto isa : isas()) {
        const IsaGuard cap(isa);
        const int64_t  cut = isa == cpu::Isa::avx2 ? cpu::kFewKeysAutoMaxKeysAvx2 : cpu::kFewKeysAutoMaxKeys;
        EXPECT_EQ(cpu::few_keys_auto_max_keys(), cut) << cpu::isa_name(isa);
        p = a.p, p.Tk = cut;
        EXPECT_TRUE(cpu::uses_few_keys(p)) << cpu::isa_name(isa);
        p.Tk = cut + 1;
        EXPECT_FALSE(cpu::uses_few_keys(p)) << cpu::isa_name(isa);
    }
}

}  // namespace
}  // namespace qkv::test
