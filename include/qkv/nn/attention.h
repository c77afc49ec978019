#pragma once
// D2L's attention modules (chapter 11, "Attention Mechanisms and Transformers"), with the
// parameter names PyTorch's state_dict of the D2L classes has (e.g. "W_q.weight"), built as
// compositions of differentiable ops (ops/attention.h, ops/masked_softmax.h). Golden parity with
// PyTorch: tests/nn/test_attention_modules.cpp (fixtures from tools/gen_fixtures.py).
// Dim legend: B batch, Tq queries, Tk keys, D query/key width, Dv value width, C num_hiddens,
// H heads, F FFN width. All modules take f32 (or f64) tensors.
//
// Masking everywhere follows masked_softmax: valid_lens (B) gives every query of batch b the
// first valid_lens[b] keys, (B, Tq) one length per query; masked weights are exactly 0. A query
// with no valid key (valid_len 0) gets weights 0 and output 0 — D2L's −1e6 fill gives uniform
// weights 1/Tk there instead; partially masked rows equal D2L's result.
// Dropout (inverted, on the attention weights or outputs) acts only in training mode
// (Module::train(); modules start in training mode like torch.nn.Module).
#include <memory>
#include <vector>

#include "qkv/nn/layers.h"
#include "qkv/nn/module.h"
#include "qkv/nn/packing.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/rope.h"

namespace qkv::nn {

/// Scaled dot-product attention (D2L 11.3.2; Vaswani et al. 2017 eq. 1): q (B, Tq, D),
/// k (B, Tk, D), v (B, Tk, Dv), valid_lens undefined, (B) or (B, Tq) (int64 or float) ->
/// softmax(q kᵀ/√D) v of shape (B, Tq, Dv). Dropout on the weights in training.
/// attention_weights() holds the last call's weights (B, Tq, Tk) before dropout (detached).
/// Throws qkv::Error on rank/shape mismatches (naming the shapes) or dropout outside [0, 1).
class DotProductAttention : public Module {
public:
    explicit DotProductAttention(double dropout);
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    const Tensor& attention_weights() const { return attention_weights_; }
    double dropout;

private:
    Tensor attention_weights_;
};

/// Additive attention (D2L 11.3.3; Bahdanau et al. 2015): score = w_vᵀ tanh(W_q q + W_k k),
/// all three bias-free (W_q: query_size -> num_hiddens, W_k: key_size -> num_hiddens, w_v:
/// num_hiddens -> 1), so query and key sizes may differ. q (B, Tq, query_size),
/// k (B, Tk, key_size), v (B, Tk, Dv), valid_lens as DotProductAttention -> (B, Tq, Dv).
/// Forms the (B, Tq, Tk, num_hiddens) features explicitly. attention_weights(): (B, Tq, Tk)
/// before dropout. Throws qkv::Error when the input widths differ from the constructor's.
class AdditiveAttention : public Module {
public:
    AdditiveAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens, double dropout);
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor());
    const Tensor& attention_weights() const { return attention_weights_; }
    std::shared_ptr<Linear> W_k, W_q, w_v;
    double dropout;

private:
    Tensor attention_weights_;
};

struct MultiHeadAttentionConfig {
    int64_t num_hiddens = 0;  // C: output width and total width of all heads
    int64_t num_heads = 1;    // H: must divide num_hiddens
    double dropout = 0.0;     // on attention weights
    bool bias = false;        // D2L default: no bias in W_q, W_k, W_v, W_o
    int64_t query_size = 0, key_size = 0, value_size = 0;  // input widths; 0 means num_hiddens
    /// Hkv key/value heads (grouped-query attention, Ainslie et al. 2023; multi-query when 1):
    /// W_k and W_v project to Hkv·(C/H), query head h reads key/value head h / (H / Hkv). Must
    /// divide num_heads; 0 means num_heads (plain multi-head attention, D2L's).
    int64_t num_kv_heads = 0;
    /// Rotary position embeddings (ops/rope.h) on every query and key head after the projections,
    /// at positions cache length + t (rope_options.position_offset is set per call).
    bool rope = false;
    RopeOptions rope_options;
    /// ALiBi with alibi_slopes(num_heads) (ops/attention.h).
    bool alibi = false;
    /// Passed to the attention op (ops/attention.h); with a KV cache the window aligns
    /// bottom-right.
    SlidingWindow window;
    double softcap = 0.0;
};

/// Keys and values of one attention layer already computed, for incremental decoding (the one KV
/// cache of qkv: the LM's blocks and the Transformer decoder's self- and cross-attention use it).
/// k (B, Hkv, T, C/H) after RoPE, v (B, Hkv, T, C/H); undefined when empty. Held without autograd
/// history. Appended keys/values live in a buffer of doubling capacity (no copy of the past per
/// step); k and v are then views of its first length() positions.
/// A fixed cache (set_memory) holds the projected keys/values of a memory that does not grow (the
/// encoder outputs a cross-attention reads): projected once, never appended to.
struct KVCache {
    Tensor k, v;
    int64_t length() const { return k.defined() ? k.size(2) : 0; }
    bool fixed() const { return fixed_; }
    void clear() { k = Tensor(), v = Tensor(), kbuf_ = Tensor(), vbuf_ = Tensor(), fixed_ = false; }
    /// Appends k_new, v_new (B, Hkv, Tn, D) after the cached positions (same B, Hkv, D and dtype as
    /// the cache; throws qkv::Error otherwise or on a fixed cache).
    void append(const Tensor& k_new, const Tensor& v_new);
    /// Makes this a fixed cache holding k_mem, v_mem (B, Hkv, Tm, D) (kept as given).
    void set_memory(const Tensor& k_mem, const Tensor& v_mem);
    /// Rows `index` (i64 (B')) of the batch, e.g. to follow beam back-pointers; B' may differ
    /// from B. Throws qkv::Error on an index out of range.
    void reorder(const Tensor& index);

private:
    Tensor kbuf_, vbuf_;  // (B, Hkv, capacity, D) when appended to; k, v view their prefix
    bool fixed_ = false;
};

/// The per-call inputs of MultiHeadAttention::forward beyond queries, keys and values.
struct AttentionCall {
    Tensor valid_lens;                      // (B) or (B, Tq), as ops/attention.h reads it
    CausalAlign causal = CausalAlign::none;
    /// bool (true = attend) or additive float mask broadcastable to (B, H, Tq, Tk), Tk counting
    /// the cached keys (e.g. (B, 1, 1, Tk) key padding for left-padded batches).
    Tensor mask;
    /// Self-attention with a cache: the new keys/values are appended to it and attention runs
    /// over all of them; RoPE positions start at the cached length; causal masks and the window
    /// align bottom-right (query t of the call is position cache length + t). With a fixed cache
    /// (KVCache::set_memory, MultiHeadAttention::cache_memory) attention runs over its keys/values
    /// and the call's keys and values are not read (they may be undefined). nullptr: none.
    KVCache* cache = nullptr;
    /// When non-null, receives this call's attention weights (B, H, Tq, Tk) before dropout
    /// (requesting them selects the math path, as keep_attention_weights does).
    Tensor* weights = nullptr;
};

/// Pad-free inputs of MultiHeadAttention::forward (nn/packing.h). queries: the queries are the
/// packed rows (N_q, query_size) of a (B, Tq) batch; keys: keys and values are the packed rows
/// (N_k, ·) of a (B, Tk) batch. nullptr: that input is padded (B, T, ·). Not owned.
struct AttentionPacking {
    const RowPacking* queries = nullptr;
    const RowPacking* keys = nullptr;
};

/// Multi-head attention (D2L 11.5; Vaswani et al. 2017 §3.2.2). queries (B, Tq, query_size),
/// keys (B, Tk, key_size), values (B, Tk, value_size) -> (B, Tq, C). The projections are split
/// into H heads of width C/H as (B, H, T, C/H) views (D2L's transpose_qkv without the copy) and
/// passed to scaled_dot_product_attention with scale 1/√(C/H); valid_lens (B) or (B, Tq) apply to
/// every head (D2L's repeat_interleave over heads); the heads are concatenated in order and
/// projected by W_o. `causal` adds a top-left causal mask (D2L's training dec_valid_lens = 1..T
/// is this mask). Uses the fused flash kernel when the dispatcher allows and weights are not kept
/// (keep_attention_weights(false)); keeping them runs the math path. Throws qkv::Error when
/// num_heads does not divide num_hiddens, or on input widths/shapes that do not match.
///
/// Pad-free forward (`packing`): a packed input runs through its projections as kept rows only,
/// is unpacked to (B, T, ·) with zeros at the skipped positions for the attention kernel, and
/// the output (queries packed) is packed again before W_o, so it is (N_q, C). Every kept
/// query must be unable to see a skipped key: with packed keys, valid_lens must be int64 (B)
/// with min(valid_lens[b], Tk) <= the kept key length of b, or (no valid_lens) causal with each
/// kept key length >= the kept query length (Tq when the queries are padded); throws qkv::Error
/// otherwise. Then the kept rows equal the padded forward's rows at those positions.
class MultiHeadAttention : public Module {
public:
    explicit MultiHeadAttention(const MultiHeadAttentionConfig& cfg);
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                   const Tensor& valid_lens = Tensor(), bool causal = false,
                   const AttentionPacking& packing = {});
    /// The general form: any mask the op takes, both causal alignments, the config's GQA, RoPE,
    /// ALiBi, window and soft cap, and a KV cache. Prefill (the prompt with causal) then one token
    /// at a time with the same cache equals the full causal forward (tested). Padded inputs only
    /// (no packing). Throws as forward above, and when a cache is given with keys other than the
    /// queries' rows count or a batch size other than the cache's.
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionCall& call);
    /// Projects a fixed memory once for later calls with that cache (cross-attention on the
    /// encoder outputs): keys (B, Tm, key_size), values (B, Tm, value_size) -> cache holds
    /// W_k(keys), W_v(values) as contiguous (B, Hkv, Tm, C/H) (RoPE at positions 0.. when on),
    /// without autograd history. Throws qkv::Error on widths or shapes that do not match.
    void cache_memory(const Tensor& keys, const Tensor& values, KVCache& cache) const;
    /// Last call's weights (B, H, Tq, Tk) before dropout (undefined when not kept).
    const Tensor& attention_weights() const { return attention_weights_; }
    /// Keep the weights on every call (math path) — for heatmaps; off by default.
    void keep_attention_weights(bool on) { keep_weights_ = on; }
    bool keeps_attention_weights() const { return keep_weights_; }
    std::shared_ptr<Linear> W_q, W_k, W_v, W_o;
    MultiHeadAttentionConfig cfg;

private:
    Tensor attention_weights_;
    /// scaled_dot_product_attention's options of this layer (dropout while training, softcap, ALiBi).
    AttentionOptions attention_options() const {
        AttentionOptions opt;
        opt.dropout      = cfg.dropout;
        opt.training     = is_training();
        opt.softcap      = cfg.softcap;
        opt.alibi_slopes = alibi_;
        return opt;
    }
    Tensor alibi_;  // (H) slopes when cfg.alibi
    bool keep_weights_ = false;
};

/// Sinusoidal positional encoding (D2L 11.6.3): P[i, 2j] = sin(i / 10000^(2j/C)),
/// P[i, 2j+1] = cos(i / 10000^(2j/C)), computed in float32 step by step as D2L does; row 0 is
/// [0, 1, 0, 1, ...]; odd C works (the last column is a sin; D2L requires an even C).
/// forward(X (B, T, C), offset) adds P[offset : offset+T] (D2L always uses offset 0) then
/// dropout. P is a plain member, not a parameter or buffer (as in D2L's state_dict). Throws
/// when X is not (B, T, C) or offset + T > max_len.
class PositionalEncoding : public Module {
public:
    PositionalEncoding(int64_t num_hiddens, double dropout, int64_t max_len = 1000);
    Tensor forward(const Tensor& X, int64_t offset = 0) const;
    Tensor P;  // (1, max_len, C), not a parameter
    std::shared_ptr<Dropout> dropout;
};

/// Position-wise FFN (D2L 11.7.2): dense2(relu(dense1(X))), both with bias; X (..., ffn_num_input)
/// -> (..., ffn_num_outputs). No dropout inside.
class PositionWiseFFN : public Module {
public:
    PositionWiseFFN(int64_t ffn_num_input, int64_t ffn_num_hiddens, int64_t ffn_num_outputs);
    Tensor forward(const Tensor& X) const;
    std::shared_ptr<Linear> dense1, dense2;
};

/// Residual + layer norm (D2L 11.7.3, post-LN): ln(dropout(Y) + X); X, Y of the same shape
/// (..., *norm_shape) (throws otherwise). LayerNorm: eps 1e-5, weight 1, bias 0.
class AddNorm : public Module {
public:
    AddNorm(Shape norm_shape, double dropout);
    Tensor forward(const Tensor& X, const Tensor& Y) const;
    std::shared_ptr<Dropout> dropout;
    std::shared_ptr<LayerNorm> ln;
};

}  // namespace qkv::nn
