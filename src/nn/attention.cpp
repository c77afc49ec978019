// D2L attention modules as compositions of ops: DotProductAttention and MultiHeadAttention call
// scaled_dot_product_attention; AdditiveAttention forms its (B, Tq, Tk, h) features explicitly.
#include "qkv/nn/attention.h"

#include <algorithm>
#include <cmath>

#include "qkv/ops/dropout.h"
#include "qkv/ops/elementwise.h"
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
    AttentionOptions opt;
    opt.dropout      = cfg.dropout;
    opt.training     = is_training();
    opt.softcap      = cfg.softcap;
    opt.alibi_slopes = alibi_;
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
    check_qkv3("MultiHeadAttention", queries, keys, values);
    QKV_CHECK(queries.size(-1) == cfg.query_size && keys.size(-1) == cfg.key_size &&
                  values.size(-1) == cfg.value_size,
              "MultiHeadAttention: expected query/key/value sizes ", cfg.query_size, "/", cfg.key_size, "/",
              cfg.value_size, ", got ", queries.shape(), ", ", keys.shape(), ", ", values.shape());
    const int64_t B = queries.size(0), Tq = queries.size(1), Tk = keys.size(1);
    const int64_t H = cfg.num_heads, D = cfg.num_hiddens / H, Hkv = cfg.num_kv_heads;
    KVCache* cache = call.cache;
    const int64_t offset = cache ? cache->length() : 0;
    if (cache && offset > 0)
        QKV_CHECK(cache->k.size(0) == B, "MultiHeadAttention: the cache holds a batch of ", cache->k.size(0),
                  ", the call has ", B);
    auto heads = [&](const Tensor& x, int64_t T, int64_t n) { return x.reshape({B, T, n, D}).permute({0, 2, 1, 3}); };
    Tensor q = heads(W_q->forward(queries), Tq, H);
    Tensor k = heads(W_k->forward(keys), Tk, Hkv);
    Tensor v = heads(W_v->forward(values), Tk, Hkv);
    if (cfg.rope) {
        RopeOptions ro      = cfg.rope_options;
        ro.position_offset  = offset;
        q = rotary_embedding(q, ro), k = rotary_embedding(k, ro);
    }
    if (cache) {
        // Appended without history: the cache serves inference (decoding under NoGradGuard).
        if (offset > 0) k = concat({cache->k, k}, 2), v = concat({cache->v, v}, 2);
        cache->k = k.detach(), cache->v = v.detach();
    }
    AttentionMask mask;
    mask.valid_lens = call.valid_lens;
    mask.causal     = cache && call.causal != CausalAlign::none ? CausalAlign::bottom_right : call.causal;
    mask.mask       = call.mask;
    mask.window     = cfg.window;
    if (cache) mask.window.align = CausalAlign::bottom_right;
    AttentionOptions opt;
    opt.dropout      = cfg.dropout;
    opt.training     = is_training();
    opt.softcap      = cfg.softcap;
    opt.alibi_slopes = alibi_;
    Tensor w;
    Tensor out = scaled_dot_product_attention(q, k, v, mask, opt, keep_weights_ ? &w : nullptr);
    attention_weights_ = keep_weights_ ? w.detach() : Tensor();
    return W_o->forward(out.permute({0, 2, 1, 3}).reshape({B, Tq, cfg.num_hiddens}));
}

void KVCache::reorder(const Tensor& index) {
    if (!k.defined()) return;
    k = index_select(k, 0, index), v = index_select(v, 0, index);
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
    return ln->forward(add(dropout->forward(Y), X));
}

}  // namespace qkv::nn
