// D2L attention modules as compositions of ops: DotProductAttention and MultiHeadAttention call
// scaled_dot_product_attention; AdditiveAttention forms its (B, Tq, Tk, h) features explicitly.
#include "qkv/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qkv/autograd/grad_mode.h"

#include "qkv/ops/dropout.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/matmul.h"

namespace qkv::nn {

namespace {

void check_qkv3(const char* who, const Tensor& q, const Tensor& k, const Tensor& v) {
    QKV_CHECK(q.defined() && k.defined() && v.defined(), who, ": undefined queries, keys or values");
    QKV_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, who, ": queries, keys and values must "
              "be (B, T, ·), got ", q.shape(), ", ", k.shape(), ", ", v.shape());
    QKV_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0) && k.size(1) == v.size(1), who,
              ": keys ", k.shape(), " and values ", v.shape(), " must share B and Tk with queries ",
              q.shape());
}

/// MultiHeadAttention's input checks when some input is packed: ranks, row counts, batch, and
/// that no kept query can attend to a skipped (zero) key.
void check_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
                  bool causal, const AttentionPacking& p) {
    const char* who = "MultiHeadAttention (packed)";
    QKV_CHECK(q.defined() && k.defined() && v.defined(), who, ": undefined queries, keys or values");
    QKV_CHECK(q.dim() == (p.queries ? 2 : 3) && k.dim() == (p.keys ? 2 : 3) && v.dim() == k.dim(), who,
              ": queries must be ", p.queries ? "(N_q, ·)" : "(B, Tq, ·)", " and keys, values ",
              p.keys ? "(N_k, ·)" : "(B, Tk, ·)", ", got ", q.shape(), ", ", k.shape(), ", ", v.shape());
    QKV_CHECK(k.size(0) == v.size(0) && (p.keys || k.size(1) == v.size(1)), who, ": keys ", k.shape(),
              " and values ", v.shape(), " differ in rows");
    QKV_CHECK(!p.queries || q.size(0) == p.queries->rows(), who, ": queries ", q.shape(), " but the query packing keeps ",
              p.queries ? p.queries->rows() : 0, " rows");
    QKV_CHECK(!p.keys || k.size(0) == p.keys->rows(), who, ": keys ", k.shape(), " but the key packing keeps ",
              p.keys ? p.keys->rows() : 0, " rows");
    const int64_t B = p.queries ? p.queries->batch() : q.size(0);
    QKV_CHECK(B == (p.keys ? p.keys->batch() : k.size(0)), who, ": queries and keys differ in batch size");
    if (!p.keys) return;
    const std::vector<int64_t>& klen = p.keys->lengths();
    if (valid_lens.defined()) {
        QKV_CHECK(valid_lens.dim() == 1 && valid_lens.size(0) == B && valid_lens.dtype() == DType::i64, who,
                  ": with packed keys valid_lens must be int64 (", B, "), got ", valid_lens.shape());
        const std::vector<int64_t> vl = valid_lens.to_vector<int64_t>();
        for (int64_t b = 0; b < B; ++b)
            QKV_CHECK(std::min(vl[size_t(b)], p.keys->steps()) <= klen[size_t(b)], who, ": valid_lens[", b,
                      "] = ", vl[size_t(b)], " reaches past the ", klen[size_t(b)], " kept keys");
    } else {
        QKV_CHECK(causal, who, ": packed keys need valid_lens or a causal mask (a kept query must not see "
                  "a skipped key)");
        for (int64_t b = 0; b < B; ++b) {
            const int64_t lq = p.queries ? p.queries->lengths()[size_t(b)] : q.size(1);
            QKV_CHECK(lq <= klen[size_t(b)], who, ": causal attention of ", lq, " kept queries over ",
                      klen[size_t(b)], " kept keys in sequence ", b);
        }
    }
}

void check_dropout(const char* who, double p) {
    QKV_CHECK(p >= 0 && p < 1, who, ": dropout must be in [0, 1), got ", p);
}

}  // namespace

// ---- DotProductAttention ----

DotProductAttention::DotProductAttention(double p) : dropout(p) {
    check_dropout("DotProductAttention", p);
}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys,
                                    const Tensor& values, const Tensor& valid_lens) {
    check_qkv3("DotProductAttention", queries, keys, values);
    AttentionMask mask;
    mask.valid_lens = valid_lens;
    AttentionOptions opt;
    opt.dropout  = dropout;
    opt.training = is_training();
    Tensor w;  // requesting the weights selects the math path: scale 1/√d, masked_softmax, dropout
    Tensor out = scaled_dot_product_attention(queries, keys, values, mask, opt, &w);
    attention_weights_ = w.detach();
    return out;
}

// ---- AdditiveAttention ----

AdditiveAttention::AdditiveAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens,
                                     double p)
    : dropout(p) {
    check_dropout("AdditiveAttention", p);
    W_k = register_module("W_k", std::make_shared<Linear>(key_size, num_hiddens, false));
    W_q = register_module("W_q", std::make_shared<Linear>(query_size, num_hiddens, false));
    w_v = register_module("w_v", std::make_shared<Linear>(num_hiddens, 1, false));
}

Tensor AdditiveAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                  const Tensor& valid_lens) {
    check_qkv3("AdditiveAttention", queries, keys, values);
    QKV_CHECK(queries.size(2) == W_q->in_features && keys.size(2) == W_k->in_features,
              "AdditiveAttention: expected query size ", W_q->in_features, " and key size ",
              W_k->in_features, ", got queries ", queries.shape(), ", keys ", keys.shape());
    // (B, Tq, 1, h) + (B, 1, Tk, h) -> (B, Tq, Tk, h): every query against every key.
    Tensor features = tanh(add(W_q->forward(queries).unsqueeze(2), W_k->forward(keys).unsqueeze(1)));
    Tensor scores   = w_v->forward(features).squeeze(-1);  // (B, Tq, Tk)
    Tensor w        = masked_softmax(scores, valid_lens);
    attention_weights_ = w.detach();
    return matmul(qkv::dropout(w, dropout, is_training()), values);  // (B, Tq, Dv)
}

// ---- MultiHeadAttention ----

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& c) : cfg(c) {
    QKV_CHECK(cfg.num_hiddens > 0 && cfg.num_heads > 0, "MultiHeadAttention: num_hiddens and num_heads must be "
              ">= 1, got num_hiddens ", cfg.num_hiddens, " and num_heads ", cfg.num_heads);
    QKV_CHECK(cfg.num_hiddens % cfg.num_heads == 0, "MultiHeadAttention: num_heads (", cfg.num_heads,
              ") must divide num_hiddens (", cfg.num_hiddens, ")");
    check_dropout("MultiHeadAttention", cfg.dropout);
    if (cfg.query_size == 0) cfg.query_size = cfg.num_hiddens;
    if (cfg.key_size == 0) cfg.key_size = cfg.num_hiddens;
    if (cfg.value_size == 0) cfg.value_size = cfg.num_hiddens;
    if (cfg.num_kv_heads == 0) cfg.num_kv_heads = cfg.num_heads;
    QKV_CHECK(cfg.num_kv_heads > 0 && cfg.num_heads % cfg.num_kv_heads == 0, "MultiHeadAttention: num_kv_heads (",
              cfg.num_kv_heads, ") must divide num_heads (", cfg.num_heads, ")");
    QKV_CHECK(!cfg.rope || (cfg.num_hiddens / cfg.num_heads) % 2 == 0, "MultiHeadAttention: rope needs an even "
              "head width, got num_hiddens / num_heads = ", cfg.num_hiddens / cfg.num_heads);
    const int64_t C = cfg.num_hiddens, Ckv = cfg.num_kv_heads * (C / cfg.num_heads);
    W_q = register_module("W_q", std::make_shared<Linear>(cfg.query_size, C, cfg.bias));
    W_k = register_module("W_k", std::make_shared<Linear>(cfg.key_size, Ckv, cfg.bias));
    W_v = register_module("W_v", std::make_shared<Linear>(cfg.value_size, Ckv, cfg.bias));
    if (cfg.alibi) alibi_ = alibi_slopes(cfg.num_heads);
    W_o = register_module("W_o", std::make_shared<Linear>(C, C, cfg.bias));
}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys,
                                   const Tensor& values, const Tensor& valid_lens, bool causal,
                                   const AttentionPacking& packing) {
    const RowPacking* qp = packing.queries;
    const RowPacking* kp = packing.keys;
    if (qp || kp) check_packed(queries, keys, values, valid_lens, causal, packing);
    else check_qkv3("MultiHeadAttention", queries, keys, values);
    QKV_CHECK(queries.size(-1) == cfg.query_size && keys.size(-1) == cfg.key_size &&
                  values.size(-1) == cfg.value_size,
              "MultiHeadAttention: expected query/key/value sizes ", cfg.query_size, "/",
              cfg.key_size, "/", cfg.value_size, ", got ", queries.shape(), ", ", keys.shape(),
              ", ", values.shape());
    const int64_t B = qp ? qp->batch() : queries.size(0);
    const int64_t Tq = qp ? qp->steps() : queries.size(1), Tk = kp ? kp->steps() : keys.size(1);
    const int64_t H = cfg.num_heads, D = cfg.num_hiddens / H, Hkv = cfg.num_kv_heads;
    // D2L's transpose_qkv without the copy: (B, T, C) -> (B, T, H, D) -> view (B, H, T, D).
    // Packed rows are projected first, then unpacked (zeros at skipped positions).
    auto heads = [&](const Tensor& x, int64_t T, int64_t n, const RowPacking* p) {
        return (p ? p->unpack(x) : x).reshape({B, T, n, D}).permute({0, 2, 1, 3});
    };
    Tensor q = heads(W_q->forward(queries), Tq, H, qp);
    Tensor k = heads(W_k->forward(keys), Tk, Hkv, kp);
    Tensor v = heads(W_v->forward(values), Tk, Hkv, kp);
    if (cfg.rope) q = rotary_embedding(q, cfg.rope_options), k = rotary_embedding(k, cfg.rope_options);
    AttentionMask mask;
    mask.valid_lens = valid_lens;  // (B) or (B, Tq): the same lengths for every head
    mask.causal     = causal ? CausalAlign::top_left : CausalAlign::none;
    mask.window     = cfg.window;
    const AttentionOptions opt = attention_options();
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, mask, opt, keep_weights_ ? &w : nullptr);
    attention_weights_ = keep_weights_ ? w.detach() : Tensor();
    // transpose_output: (B, H, Tq, D) -> (B, Tq, H, D) -> (B, Tq, C), heads in order; packed
    // queries keep only their rows for W_o.
    const Tensor merged = out.permute({0, 2, 1, 3}).reshape({B, Tq, cfg.num_hiddens});
    return W_o->forward(qp ? qp->pack(merged) : merged);
}

Tensor MultiHeadAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                   const AttentionCall& call) {
    KVCache* cache   = call.cache;
    const bool fixed = cache && cache->fixed();
    if (fixed) {
        QKV_CHECK(queries.defined() && queries.dim() == 3, "MultiHeadAttention: queries must be (B, Tq, ·), got ",
                  queries.defined() ? queries.shape() : Shape{});
        QKV_CHECK(queries.size(-1) == cfg.query_size, "MultiHeadAttention: expected query size ", cfg.query_size,
                  ", got ", queries.shape());
        QKV_CHECK(cache->k.size(0) == queries.size(0), "MultiHeadAttention: the cache holds a batch of ",
                  cache->k.size(0), ", the call has ", queries.size(0));
    } else {
        check_qkv3("MultiHeadAttention", queries, keys, values);
        QKV_CHECK(queries.size(-1) == cfg.query_size && keys.size(-1) == cfg.key_size &&
                      values.size(-1) == cfg.value_size,
                  "MultiHeadAttention: expected query/key/value sizes ", cfg.query_size, "/", cfg.key_size, "/",
                  cfg.value_size, ", got ", queries.shape(), ", ", keys.shape(), ", ", values.shape());
    }
    const int64_t B = queries.size(0), Tq = queries.size(1);
    const int64_t H = cfg.num_heads, D = cfg.num_hiddens / H, Hkv = cfg.num_kv_heads;
    const int64_t offset = cache && !fixed ? cache->length() : 0;
    if (cache && offset > 0)
        QKV_CHECK(cache->k.size(0) == B, "MultiHeadAttention: the cache holds a batch of ", cache->k.size(0),
                  ", the call has ", B);
    auto heads = [&](const Tensor& x, int64_t T, int64_t n) { return x.reshape({B, T, n, D}).permute({0, 2, 1, 3}); };
    Tensor q = heads(W_q->forward(queries), Tq, H);
    Tensor k, v;
    if (fixed) {
        k = cache->k, v = cache->v;
    } else {
        k = heads(W_k->forward(keys), keys.size(1), Hkv);
        v = heads(W_v->forward(values), keys.size(1), Hkv);
    }
    if (cfg.rope) {
        RopeOptions ro     = cfg.rope_options;
        ro.position_offset = offset;
        q = rotary_embedding(q, ro);
        if (!fixed) k = rotary_embedding(k, ro);
    }
    if (cache && !fixed) {
        // Appended without history: the cache serves inference (decoding under NoGradGuard).
        cache->append(k.detach(), v.detach());
        k = cache->k, v = cache->v;
    }
    AttentionMask mask;
    mask.valid_lens = call.valid_lens;
    // With a cache the causal mask aligns bottom-right; one query (a decoding step) then sees
    // every cached key, so no mask is needed.
    mask.causal = call.causal;
    if (cache && call.causal != CausalAlign::none) mask.causal = Tq == 1 ? CausalAlign::none : CausalAlign::bottom_right;
    mask.mask   = call.mask;
    mask.window = cfg.window;
    if (cache) mask.window.align = CausalAlign::bottom_right;
    const AttentionOptions opt = attention_options();
    Tensor w;
    const bool want_weights = keep_weights_ || call.weights != nullptr;
    Tensor out = scaled_dot_product_attention(q, k, v, mask, opt, want_weights ? &w : nullptr);
    attention_weights_ = keep_weights_ ? w.detach() : Tensor();
    if (call.weights) *call.weights = w.detach();
    return W_o->forward(out.permute({0, 2, 1, 3}).reshape({B, Tq, cfg.num_hiddens}));
}

void MultiHeadAttention::cache_memory(const Tensor& keys, const Tensor& values, KVCache& cache) const {
    check_qkv3("MultiHeadAttention::cache_memory", keys, keys, values);
    QKV_CHECK(keys.size(-1) == cfg.key_size && values.size(-1) == cfg.value_size,
              "MultiHeadAttention::cache_memory: expected key/value sizes ", cfg.key_size, "/", cfg.value_size,
              ", got ", keys.shape(), ", ", values.shape());
    NoGradGuard ng;
    const int64_t B = keys.size(0), Tm = keys.size(1), Hkv = cfg.num_kv_heads, D = cfg.num_hiddens / cfg.num_heads;
    auto heads = [&](const Tensor& x) { return x.reshape({B, Tm, Hkv, D}).permute({0, 2, 1, 3}); };
    Tensor k = heads(W_k->forward(keys)), v = heads(W_v->forward(values));
    if (cfg.rope) k = rotary_embedding(k, cfg.rope_options);
    cache.set_memory(k.contiguous(), v.contiguous());
}

namespace {

/// buf (B, H, cap, D) contiguous -> a fresh (B', H, cap, D) buffer with rows `rows`, copying
/// only the first `len` positions of each head (the rest is never read before it is written).
Tensor gather_prefix(const Tensor& buf, const std::vector<int64_t>& rows, int64_t len) {
    const int64_t B = buf.size(0), H = buf.size(1), cap = buf.size(2), D = buf.size(3);
    for (int64_t r : rows)
        QKV_CHECK(r >= 0 && r < B, "KVCache::reorder: index ", r, " is outside [0, ", B, ")");
    Tensor out = Tensor::empty({int64_t(rows.size()), H, cap, D}, buf.dtype());
    const int64_t es = dtype_size(buf.dtype());
    const char* src = static_cast<const char*>(buf.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    const size_t run = size_t(len * D * es);
    const int64_t head = cap * D * es;
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t h = 0; h < H; ++h)
            std::memcpy(dst + (int64_t(i) * H + h) * head, src + (rows[i] * H + h) * head, run);
    return out;
}

}  // namespace

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
    QKV_CHECK(!fixed_, "KVCache::append: the cache holds a fixed memory (set_memory)");
    QKV_CHECK(k_new.defined() && v_new.defined() && k_new.dim() == 4 && v_new.dim() == 4 &&
                  k_new.shape() == v_new.shape(),
              "KVCache::append: keys and values must be (B, Hkv, Tn, D) of one shape, got ",
              k_new.defined() ? k_new.shape() : Shape{}, ", ", v_new.defined() ? v_new.shape() : Shape{});
    const int64_t B = k_new.size(0), H = k_new.size(1), Tn = k_new.size(2), D = k_new.size(3);
    const int64_t len = length();
    if (!kbuf_.defined() && len > 0) {
        // Set by hand (k, v assigned): becomes the start of a buffer.
        const Tensor k0 = k, v0 = v;
        kbuf_ = Tensor(), vbuf_ = Tensor();
        k = Tensor(), v = Tensor();
        append(k0, v0);
    }
    if (kbuf_.defined())
        QKV_CHECK(kbuf_.size(0) == B && kbuf_.size(1) == H && kbuf_.size(3) == D && kbuf_.dtype() == k_new.dtype(),
                  "KVCache::append: the cache holds ", kbuf_.shape(), " ", dtype_name(kbuf_.dtype()), ", got ",
                  k_new.shape(), " ", dtype_name(k_new.dtype()));
    const int64_t cap = kbuf_.defined() ? kbuf_.size(2) : 0;
    if (len + Tn > cap) {  // grow by doubling (at least 16 positions)
        const int64_t new_cap = std::max({int64_t(16), cap * 2, len + Tn});
        // Positions past the cached length are written before they are read: no zero fill.
        Tensor kb = Tensor::empty({B, H, new_cap, D}, k_new.dtype()), vb = Tensor::empty({B, H, new_cap, D}, k_new.dtype());
        if (len > 0) {
            Tensor ks = kb.slice(2, 0, len), vs = vb.slice(2, 0, len);
            copy_(ks, k);
            copy_(vs, v);
        }
        kbuf_ = kb, vbuf_ = vb;
    }
    Tensor kd = kbuf_.slice(2, len, len + Tn), vd = vbuf_.slice(2, len, len + Tn);
    copy_(kd, k_new);
    copy_(vd, v_new);
    k = kbuf_.slice(2, 0, len + Tn), v = vbuf_.slice(2, 0, len + Tn);
}

void KVCache::set_memory(const Tensor& k_mem, const Tensor& v_mem) {
    QKV_CHECK(k_mem.defined() && v_mem.defined() && k_mem.dim() == 4 && v_mem.dim() == 4 &&
                  k_mem.size(0) == v_mem.size(0) && k_mem.size(2) == v_mem.size(2),
              "KVCache::set_memory: keys and values must be (B, Hkv, Tm, D), got ",
              k_mem.defined() ? k_mem.shape() : Shape{}, ", ", v_mem.defined() ? v_mem.shape() : Shape{});
    kbuf_ = Tensor(), vbuf_ = Tensor();
    k = k_mem, v = v_mem;
    fixed_ = true;
}

void KVCache::reorder(const Tensor& index) {
    if (!k.defined()) return;
    QKV_CHECK(index.defined() && index.dim() == 1 && index.dtype() == DType::i64,
              "KVCache::reorder: index must be int64 (B'), got ", index.defined() ? index.shape() : Shape{});
    NoGradGuard ng;
    if (!kbuf_.defined()) {
        k = index_select(k, 0, index), v = index_select(v, 0, index);
        return;
    }
    const int64_t len = length();
    const std::vector<int64_t> rows = index.contiguous().to_vector<int64_t>();
    kbuf_ = gather_prefix(kbuf_, rows, len);
    vbuf_ = gather_prefix(vbuf_, rows, len);
    k = kbuf_.slice(2, 0, len), v = vbuf_.slice(2, 0, len);
}

// ---- PositionalEncoding ----

PositionalEncoding::PositionalEncoding(int64_t num_hiddens, double p, int64_t max_len) {
    QKV_CHECK(num_hiddens > 0 && max_len > 0, "PositionalEncoding: num_hiddens and max_len must "
              "be positive, got ", num_hiddens, ", ", max_len);
    dropout = register_module("dropout", std::make_shared<Dropout>(p));
    // Computed in float32 step by step as D2L does (arange / 10000^(2j/C), then sin/cos), so the
    // table matches PyTorch's to float rounding.
    std::vector<float> table(size_t(max_len * num_hiddens));
    for (int64_t c = 0; c < num_hiddens; ++c) {
        const float expo = float(c - c % 2) / float(num_hiddens);  // 2j / C for columns 2j, 2j+1
        const float den  = std::pow(10000.0f, expo);
        for (int64_t i = 0; i < max_len; ++i) {
            const float a = float(i) / den;
            table[size_t(i * num_hiddens + c)] = c % 2 == 0 ? std::sin(a) : std::cos(a);
        }
    }
    P = from_vector(table, {1, max_len, num_hiddens});
}

Tensor PositionalEncoding::forward(const Tensor& X, int64_t offset) const {
    const int64_t max_len = P.size(1), C = P.size(2);
    QKV_CHECK(X.defined() && X.dim() == 3 && X.size(2) == C, "PositionalEncoding: X must be "
              "(B, T, ", C, "), got ", X.defined() ? X.shape() : Shape{});
    QKV_CHECK(offset >= 0 && offset + X.size(1) <= max_len, "PositionalEncoding: positions ",
              offset, "..", offset + X.size(1) - 1, " exceed max_len ", max_len);
    Tensor p = P.slice(1, offset, offset + X.size(1));
    if (p.dtype() != X.dtype()) p = p.to(X.dtype());
    return dropout->forward(add(X, p));
}

// ---- PositionWiseFFN ----

PositionWiseFFN::PositionWiseFFN(int64_t ffn_num_input, int64_t ffn_num_hiddens,
                                 int64_t ffn_num_outputs) {
    dense1 = register_module("dense1", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens));
    dense2 = register_module("dense2", std::make_shared<Linear>(ffn_num_hiddens, ffn_num_outputs));
}

Tensor PositionWiseFFN::forward(const Tensor& X) const {
    return dense2->forward(relu(dense1->forward(X)));
}

// ---- AddNorm ----

AddNorm::AddNorm(Shape norm_shape, double p) {
    dropout = register_module("dropout", std::make_shared<Dropout>(p));
    ln      = register_module("ln", std::make_shared<LayerNorm>(std::move(norm_shape)));
}

Tensor AddNorm::forward(const Tensor& X, const Tensor& Y) const {
    QKV_CHECK(X.defined() && Y.defined() && X.shape() == Y.shape(), "AddNorm: X and Y must have "
              "the same shape, got ", X.defined() ? X.shape() : Shape{}, " and ",
              Y.defined() ? Y.shape() : Shape{});
    // One fused op (sum and normalisation in one pass, one backward node) instead of add + LN.
    return add_layer_norm(dropout->forward(Y), X, ln->normalized_shape, ln->weight, ln->bias, ln->eps);
}

}  // namespace qkv::nn
