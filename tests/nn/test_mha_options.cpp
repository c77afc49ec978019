// nn::MultiHeadAttention beyond D2L: grouped-query attention, RoPE, ALiBi, a sliding window, and the
// KV cache (prefill + token-by-token decoding = the full causal forward; left-padded batches =
// each sequence alone). Float32 modules (modules hold float32 parameters).
#include <gtest/gtest.h>

#include "qkv/autograd/grad_mode.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

// The same float32 sums of <= 24 products and softmaxes over <= 9 keys in two evaluation orders
// (cached vs full, GQA vs repeated heads, flash vs math): O(1) values, a few ulps each; the
// absolute bound the flash-vs-math tests use.
constexpr double kF32Tol = 1e-5;

double max_abs_diff(const Tensor& a, const Tensor& b) {
    const auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
    EXPECT_EQ(x.size(), y.size());
    double m = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
    return m;
}

std::shared_ptr<nn::MultiHeadAttention> make_mha(const nn::MultiHeadAttentionConfig& c, uint64_t seed) {
    manual_seed(seed);
    auto m = std::make_shared<nn::MultiHeadAttention>(c);
    m->eval();
    return m;
}

TEST(MhaOptions, GqaEqualsMhaWithRepeatedKeyValueHeads) {
    nn::MultiHeadAttentionConfig g;
    g.num_hiddens = 16, g.num_heads = 4, g.num_kv_heads = 2;
    auto gqa = make_mha(g, 3);
    EXPECT_EQ(gqa->W_k->weight.shape(), (Shape{8, 16}));  // Hkv · C/H outputs
    nn::MultiHeadAttentionConfig f = g;
    f.num_kv_heads = 0;
    auto full = make_mha(f, 4);
    // Full W_k/W_v rows: head h takes GQA head h / 2's rows (4 rows of width C/H = 4 each).
    for (auto [src, dst] : {std::pair{gqa->W_k, full->W_k}, std::pair{gqa->W_v, full->W_v}}) {
        const auto w = src->weight.to_vector<float>();
        std::vector<float> r;
        for (int64_t h = 0; h < 4; ++h)
            for (int64_t row = 0; row < 4; ++row)
                for (int64_t c = 0; c < 16; ++c) r.push_back(w[size_t(((h / 2) * 4 + row) * 16 + c)]);
        copy_(dst->weight, from_vector(r, {16, 16}));
    }
    copy_(full->W_q->weight, gqa->W_q->weight);
    copy_(full->W_o->weight, gqa->W_o->weight);
    Generator gen(1);
    Tensor x = randn({2, 5, 16}, &gen);
    nn::AttentionCall call;
    call.causal = CausalAlign::top_left;
    EXPECT_LE(max_abs_diff(gqa->forward(x, x, x, call), full->forward(x, x, x, call)), kF32Tol);
    nn::MultiHeadAttentionConfig bad = g;
    bad.num_kv_heads = 3;
    EXPECT_NE(error_of([&] { nn::MultiHeadAttention m(bad); }).find("num_kv_heads (3) must divide num_heads (4)"),
              std::string::npos);
}

TEST(MhaOptions, RopeIsAppliedToEveryQueryAndKeyHead) {
    nn::MultiHeadAttentionConfig c;
    c.num_hiddens = 16, c.num_heads = 2, c.rope = true;
    auto m = make_mha(c, 5);
    Generator gen(2);
    Tensor x = randn({1, 6, 16}, &gen);
    nn::AttentionCall call;
    call.causal = CausalAlign::top_left;
    const Tensor got = m->forward(x, x, x, call);
    // By hand: projections, heads, rotary_embedding on q and k, the op, W_o.
    auto heads = [](const Tensor& t, int64_t n) { return t.reshape({1, 6, n, 8}).permute({0, 2, 1, 3}); };
    const Tensor q = rotary_embedding(heads(m->W_q->forward(x), 2)), k = rotary_embedding(heads(m->W_k->forward(x), 2));
    AttentionMask mask;
    mask.causal = CausalAlign::top_left;
    const Tensor o = scaled_dot_product_attention(q, k, heads(m->W_v->forward(x), 2), mask);
    const Tensor want = m->W_o->forward(o.permute({0, 2, 1, 3}).reshape({1, 6, 16}));
    EXPECT_LE(max_abs_diff(got, want), kF32Tol);
    // And it changes the result (positions matter).
    nn::MultiHeadAttentionConfig plain = c;
    plain.rope = false;
    auto p = make_mha(plain, 5);
    EXPECT_GT(max_abs_diff(p->forward(x, x, x, call), got), 1e-3);
}

// Prefill of the first P tokens, then one token per call with the cache, equals the causal
// forward of the whole sequence, for plain, GQA + RoPE, and ALiBi + window + soft cap layers.
TEST(MhaOptions, CachedDecodingEqualsTheFullCausalForward) {
    std::vector<nn::MultiHeadAttentionConfig> cfgs(3);
    for (auto& c : cfgs) c.num_hiddens = 24, c.num_heads = 4;
    cfgs[1].num_kv_heads = 1, cfgs[1].rope = true;
    cfgs[2].num_kv_heads = 2, cfgs[2].alibi = true, cfgs[2].window = {3, 0, CausalAlign::top_left};
    cfgs[2].softcap = 2.0;
    for (size_t n = 0; n < cfgs.size(); ++n) {
        SCOPED_TRACE(n);
        auto m = make_mha(cfgs[n], 10 + n);
        Generator gen(7);
        const int64_t B = 2, T = 9, P = 4;
        Tensor x = randn({B, T, 24}, &gen);
        NoGradGuard ng;
        nn::AttentionCall full;
        full.causal = CausalAlign::top_left;
        const Tensor want = m->forward(x, x, x, full);
        nn::KVCache cache;
        nn::AttentionCall step;
        step.causal = CausalAlign::top_left;
        step.cache  = &cache;
        const Tensor xp = x.slice(1, 0, P);
        std::vector<Tensor> rows = {m->forward(xp, xp, xp, step)};
        EXPECT_EQ(cache.length(), P);
        for (int64_t t = P; t < T; ++t) {
            const Tensor xt = x.slice(1, t, t + 1);
            rows.push_back(m->forward(xt, xt, xt, step));
        }
        EXPECT_EQ(cache.length(), T);
        EXPECT_EQ(cache.k.size(1), cfgs[n].num_kv_heads ? cfgs[n].num_kv_heads : 4);
        EXPECT_LE(max_abs_diff(concat(rows, 1), want), kF32Tol);
    }
}

// A left-padded batch with a key-padding mask gives each sequence's rows as it alone does (RoPE
// depends on position differences only, so the padding's shift of positions does not matter), in
// the prefill and in cached decoding.
TEST(MhaOptions, LeftPaddedBatchEqualsEachSequenceAlone) {
    nn::MultiHeadAttentionConfig c;
    c.num_hiddens = 16, c.num_heads = 4, c.num_kv_heads = 2, c.rope = true;
    auto m = make_mha(c, 21);
    Generator gen(9);
    const int64_t T = 6, pad = 2;
    Tensor a = randn({1, T, 16}, &gen), b_real = randn({1, T - pad, 16}, &gen);
    Tensor b = concat({zeros({1, pad, 16}), b_real}, 1);  // left padding
    Tensor batch = concat({a, b}, 0);
    NoGradGuard ng;
    // Prefill T - 1 tokens, then one more, with the padding masked for every query.
    auto keep = [&](int64_t Tk) {
        std::vector<bool> k(size_t(2 * Tk), true);
        for (int64_t j = 0; j < pad; ++j) k[size_t(Tk + j)] = false;
        return from_vector<bool>(k, {2, 1, 1, Tk});
    };
    nn::KVCache cache;
    nn::AttentionCall call;
    call.causal = CausalAlign::top_left, call.cache = &cache, call.mask = keep(T - 1);
    const Tensor pre = batch.slice(1, 0, T - 1);
    const Tensor out1 = m->forward(pre, pre, pre, call);
    call.mask = keep(T);
    const Tensor last = batch.slice(1, T - 1, T);
    const Tensor out2 = concat({out1, m->forward(last, last, last, call)}, 1);
    nn::AttentionCall alone;
    alone.causal = CausalAlign::top_left;
    const Tensor ra = m->forward(a, a, a, alone), rb = m->forward(b_real, b_real, b_real, alone);
    EXPECT_LE(max_abs_diff(out2.slice(0, 0, 1), ra), kF32Tol);
    EXPECT_LE(max_abs_diff(out2.slice(0, 1, 2).slice(1, pad, T), rb), kF32Tol);
}

TEST(MhaOptions, CacheReorderFollowsTheIndex) {
    nn::KVCache c;
    c.k = from_vector<float>({1, 2, 3}, {3, 1, 1, 1});
    c.v = from_vector<float>({4, 5, 6}, {3, 1, 1, 1});
    c.reorder(from_vector<int64_t>({2, 2, 0}, {3}));
    EXPECT_EQ(c.k.to_vector<float>(), (std::vector<float>{3, 3, 1}));
    EXPECT_EQ(c.v.to_vector<float>(), (std::vector<float>{6, 6, 4}));
}

/// A fixed cache (cross-attention on an encoder's outputs, projected once) gives the forward over
/// that memory, without reading the call's keys and values; it refuses appends.
TEST(MhaOptions, FixedMemoryCacheEqualsTheCrossAttentionForward) {
    nn::MultiHeadAttentionConfig c;
    c.num_hiddens = 16, c.num_heads = 4;
    auto m = make_mha(c, 31);
    Generator gen(5);
    const Tensor q = randn({2, 3, 16}, &gen), mem = randn({2, 5, 16}, &gen);
    NoGradGuard ng;
    nn::AttentionCall plain;
    plain.valid_lens = from_vector<int64_t>({5, 2}, {2});
    const Tensor want = m->forward(q, mem, mem, plain);
    nn::KVCache cache;
    m->cache_memory(mem, mem, cache);
    EXPECT_TRUE(cache.fixed());
    EXPECT_EQ(cache.length(), 5);
    nn::AttentionCall call = plain;
    call.cache = &cache;
    EXPECT_EQ(max_abs_diff(m->forward(q, Tensor(), Tensor(), call), want), 0.0);
    Tensor w;
    call.weights = &w;  // the math path: the same sums in another order
    EXPECT_LE(max_abs_diff(m->forward(q, Tensor(), Tensor(), call), want), kF32Tol);
    EXPECT_EQ(w.shape(), (Shape{2, 4, 3, 5}));
    EXPECT_EQ(cache.length(), 5);  // nothing appended
    EXPECT_THROW(cache.append(cache.k, cache.v), Error);
}

/// Appending past the buffer's capacity (16) keeps every position; a reorder gathers rows.
TEST(MhaOptions, CacheBufferGrowsAndReorders) {
    Generator gen(6);
    nn::KVCache cache;
    std::vector<Tensor> ks, vs;
    for (int64_t t = 0; t < 21; ++t) {
        const int64_t n = t == 0 ? 3 : 1;  // a prefill, then one position at a time
        ks.push_back(randn({3, 2, n, 4}, &gen)), vs.push_back(randn({3, 2, n, 4}, &gen));
        cache.append(ks.back(), vs.back());
    }
    EXPECT_EQ(cache.length(), 23);
    EXPECT_EQ(max_abs_diff(cache.k, concat(ks, 2)), 0.0);
    EXPECT_EQ(max_abs_diff(cache.v, concat(vs, 2)), 0.0);
    const Tensor index = from_vector<int64_t>({2, 0, 2, 1}, {4});
    cache.reorder(index);
    EXPECT_EQ(max_abs_diff(cache.k, index_select(concat(ks, 2), 0, index)), 0.0);
    EXPECT_EQ(max_abs_diff(cache.v, index_select(concat(vs, 2), 0, index)), 0.0);
    const Tensor k1 = randn({4, 2, 1, 4}, &gen), v1 = randn({4, 2, 1, 4}, &gen);
    cache.append(k1, v1);
    EXPECT_EQ(max_abs_diff(cache.k.slice(2, 23, 24), k1), 0.0);
    EXPECT_THROW(cache.append(randn({3, 2, 1, 4}, &gen), randn({3, 2, 1, 4}, &gen)), Error);  // batch 3 != 4
    EXPECT_THROW(cache.reorder(from_vector<int64_t>({4}, {1})), Error);
}

}  // namespace
}  // namespace qkv::test
