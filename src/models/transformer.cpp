// D2L's Transformer: encoder/decoder blocks composed from nn/attention.h modules, teacher-forced
// forward, and incremental decoding with a per-block cache of projected keys and values.
#include "qkv/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::models {

namespace {

nn::MultiHeadAttentionConfig mha_config(const TransformerConfig& cfg) {
    nn::MultiHeadAttentionConfig m;
    m.num_hiddens = cfg.num_hiddens;
    m.num_heads   = cfg.num_heads;
    m.dropout     = cfg.dropout;
    m.bias        = false;  // D2L: bias=False in every attention projection
    return m;
}

void check_config(const TransformerConfig& c) {
    QKV_CHECK(c.src_vocab_size > 0 && c.tgt_vocab_size > 0,
              "Transformer: vocabulary sizes must be positive, got src ", c.src_vocab_size, ", tgt ",
              c.tgt_vocab_size);
    QKV_CHECK(c.num_hiddens > 0 && c.num_blks > 0 && c.num_heads > 0 && c.ffn_num_hiddens > 0,
              "Transformer: num_hiddens, num_blks, num_heads and ffn_num_hiddens must be positive, "
              "got ", c.num_hiddens, ", ", c.num_blks, ", ", c.num_heads, ", ", c.ffn_num_hiddens);
    QKV_CHECK(c.num_hiddens % c.num_heads == 0, "Transformer: num_heads (", c.num_heads,
              ") must divide num_hiddens (", c.num_hiddens, ")");
    QKV_CHECK(c.dropout >= 0 && c.dropout < 1, "Transformer: dropout must be in [0, 1), got ",
              c.dropout);
    QKV_CHECK(c.max_len > 0, "Transformer: max_len must be positive, got ", c.max_len);
}

void check_ids(const Tensor& ids, const char* what) {
    QKV_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i64, "Transformer: ", what,
              " must be int64 (B, T), got ",
              ids.defined() ? std::string(dtype_name(ids.dtype())) : std::string("undefined"), " ",
              ids.defined() ? ids.shape() : Shape{});
}

void check_valid_len(const Tensor& vl, int64_t B) {
    QKV_CHECK(vl.defined() && vl.dim() == 1 && vl.shape()[0] == B && vl.dtype() == DType::i64,
              "Transformer: src_valid_len must be int64 (B) with B = ", B, ", got ",
              vl.defined() ? vl.shape() : Shape{});
}

/// (B, T, C) -> (B, H, T, D), a view.
Tensor split_heads(const Tensor& x, int64_t H) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    return x.reshape({B, T, H, C / H}).permute({0, 2, 1, 3});
}

/// (B, H, T, D) -> (B, T, C) (heads concatenated in order, D2L transpose_output).
Tensor merge_heads(const Tensor& x) {
    const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
    return x.permute({0, 2, 1, 3}).reshape({B, T, H * D});
}

/// Projects X with a multi-head attention's key or value layer, heads split, contiguous.
Tensor project_heads(const nn::Linear& W, const Tensor& X, int64_t H) {
    return split_heads(W.forward(X), H).contiguous();
}

}  // namespace

// ---- encoder --------------------------------------------------------------------------------------

TransformerEncoderBlock::TransformerEncoderBlock(const TransformerConfig& cfg) {
    attention = register_module("attention", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm1  = register_module("addnorm1", std::make_shared<nn::AddNorm>(Shape{cfg.num_hiddens}, cfg.dropout));
    ffn       = register_module("ffn", std::make_shared<nn::PositionWiseFFN>(
                                         cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_hiddens));
    addnorm2  = register_module("addnorm2", std::make_shared<nn::AddNorm>(Shape{cfg.num_hiddens}, cfg.dropout));
}

Tensor TransformerEncoderBlock::forward(const Tensor& X, const Tensor& valid_lens, const nn::RowPacking* rows) {
    Tensor Y = addnorm1->forward(X, attention->forward(X, X, X, valid_lens, false, {rows, rows}));
    return addnorm2->forward(Y, ffn->forward(Y));
}

TransformerEncoder::TransformerEncoder(const TransformerConfig& cfg) : num_hiddens(cfg.num_hiddens) {
    embedding    = register_module("embedding", std::make_shared<nn::Embedding>(cfg.src_vocab_size, cfg.num_hiddens));
    pos_encoding = register_module("pos_encoding", std::make_shared<nn::PositionalEncoding>(
                                                       cfg.num_hiddens, cfg.dropout, cfg.max_len));
    for (int64_t i = 0; i < cfg.num_blks; ++i)
        blks.push_back(register_module("blks." + std::to_string(i),
                                       std::make_shared<TransformerEncoderBlock>(cfg)));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& valid_lens, const nn::RowPacking* rows) {
    // Embedding values are N(0, 1) and PE values lie in [-1, 1]: scale by √C first (D2L 11.7).
    Tensor X = pos_encoding->forward(mul(embedding->forward(src), std::sqrt(double(num_hiddens))));
    if (rows) X = rows->pack(X);
    for (auto& blk : blks) X = blk->forward(X, valid_lens, rows);
    return X;
}

// ---- decoder --------------------------------------------------------------------------------------

TransformerDecoderBlock::TransformerDecoderBlock(const TransformerConfig& cfg) {
    const Shape ns{cfg.num_hiddens};
    attention1 = register_module("attention1", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm1   = register_module("addnorm1", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
    attention2 = register_module("attention2", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm2   = register_module("addnorm2", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
    ffn        = register_module("ffn", std::make_shared<nn::PositionWiseFFN>(
                                          cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_hiddens));
    addnorm3   = register_module("addnorm3", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs,
                                        const Tensor& enc_valid_lens, const nn::RowPacking* rows,
                                        const nn::RowPacking* enc_rows) {
    // Causal self-attention: D2L's training-time dec_valid_lens = [1..Tt] is the top-left causal
    // mask. Unlike D2L EN, the mask stays on in eval mode (spec §1.9 quirk 2 is not reproduced).
    Tensor Y = addnorm1->forward(X, attention1->forward(X, X, X, Tensor(), /*causal=*/true, {rows, rows}));
    Tensor Z = addnorm2->forward(
        Y, attention2->forward(Y, enc_outputs, enc_outputs, enc_valid_lens, false, {rows, enc_rows}));
    return addnorm3->forward(Z, ffn->forward(Z));
}

TransformerDecoder::TransformerDecoder(const TransformerConfig& cfg) : num_hiddens(cfg.num_hiddens) {
    embedding    = register_module("embedding", std::make_shared<nn::Embedding>(cfg.tgt_vocab_size, cfg.num_hiddens));
    pos_encoding = register_module("pos_encoding", std::make_shared<nn::PositionalEncoding>(
                                                       cfg.num_hiddens, cfg.dropout, cfg.max_len));
    for (int64_t i = 0; i < cfg.num_blks; ++i)
        blks.push_back(register_module("blks." + std::to_string(i),
                                       std::make_shared<TransformerDecoderBlock>(cfg)));
    dense = register_module("dense", std::make_shared<nn::Linear>(cfg.num_hiddens, cfg.tgt_vocab_size));
}

Tensor TransformerDecoder::forward_hidden(const Tensor& tgt, const Tensor& enc_outputs,
                                          const Tensor& enc_valid_lens, const nn::RowPacking* rows,
                                          const nn::RowPacking* enc_rows) {
    Tensor X = pos_encoding->forward(mul(embedding->forward(tgt), std::sqrt(double(num_hiddens))));
    if (rows) X = rows->pack(X);
    for (auto& blk : blks) X = blk->forward(X, enc_outputs, enc_valid_lens, rows, enc_rows);
    return X;
}

// ---- the model ------------------------------------------------------------------------------------

Transformer::Transformer(const TransformerConfig& cfg) : cfg_(cfg) {
    check_config(cfg);
    QKV_CHECK(!cfg.tie_weights || cfg.src_vocab_size == cfg.tgt_vocab_size,
              "Transformer: tie_weights needs one shared vocabulary (--shared-vocab), got src ",
              cfg.src_vocab_size, " and tgt ", cfg.tgt_vocab_size, " tokens");
    encoder = register_module("encoder", std::make_shared<TransformerEncoder>(cfg));
    decoder = register_module("decoder", std::make_shared<TransformerDecoder>(cfg));
    if (cfg.tie_weights) {
        // One (V, C) matrix, N(0, 1/C) (Vaswani et al. 2017 §3.4), drawn after the untied init.
        Tensor w = nn::normal_init({cfg.tgt_vocab_size, cfg.num_hiddens}, 0.0,
                                   1.0 / std::sqrt(double(cfg.num_hiddens)));
        encoder->embedding->tie_parameter("weight", w);
        encoder->embedding->weight = w;
        decoder->embedding->tie_parameter("weight", w);
        decoder->embedding->weight = w;
        decoder->dense->tie_parameter("weight", w);
        decoder->dense->weight = w;
    }
}

Tensor Transformer::forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                                   const Tensor& dec_input) {
    check_ids(src, "src");
    check_ids(dec_input, "dec_input");
    check_valid_len(src_valid_len, src.size(0));
    QKV_CHECK(dec_input.size(0) == src.size(0), "Transformer: src ", src.shape(), " and dec_input ",
              dec_input.shape(), " differ in batch size");
    QKV_CHECK(src.size(1) <= cfg_.max_len && dec_input.size(1) <= cfg_.max_len,
              "Transformer: sequences longer than max_len = ", cfg_.max_len, ": src ", src.shape(),
              ", dec_input ", dec_input.shape());
    Tensor enc = encoder->forward(src, src_valid_len);
    return decoder->forward_hidden(dec_input, enc, src_valid_len);
}

// ---- the pad-free training path ----------------------------------------------------------------

Tensor Transformer::forward_hidden_rows(const Tensor& src, const Tensor& src_valid_len,
                                        const Tensor& dec_input, const Tensor& rows) {
    check_ids(src, "src");
    check_ids(dec_input, "dec_input");
    check_valid_len(src_valid_len, src.size(0));
    const int64_t B = src.size(0), Ts = src.size(1), Tt = dec_input.size(1);
    QKV_CHECK(dec_input.size(0) == B, "Transformer: src ", src.shape(), " and dec_input ", dec_input.shape(),
              " differ in batch size");
    detail::check_hidden_rows(rows, B * Tt);
    bool keeps = false;
    for (auto& b : encoder->blks) keeps = keeps || b->attention->keeps_attention_weights();
    for (auto& b : decoder->blks)
        keeps = keeps || b->attention1->keeps_attention_weights() || b->attention2->keeps_attention_weights();
    std::vector<int64_t> slen = src_valid_len.to_vector<int64_t>();
    bool empty_source = false;
    for (int64_t& l : slen) {
        l = std::clamp<int64_t>(l, 0, Ts);
        empty_source = empty_source || l == 0;
    }
    // A source with no valid position makes D2L's masked softmax average over all (pad) keys:
    // their values matter then, so keep them.
    if (keeps || empty_source) return EncoderDecoder::forward_hidden_rows(src, src_valid_len, dec_input, rows);
    QKV_CHECK(Ts <= cfg_.max_len && Tt <= cfg_.max_len, "Transformer: sequences longer than max_len = ",
              cfg_.max_len, ": src ", src.shape(), ", dec_input ", dec_input.shape());

    const std::vector<int64_t> r = rows.to_vector<int64_t>();
    std::vector<int64_t> dlen(size_t(B), 0);
    for (int64_t x : r) dlen[size_t(x / Tt)] = std::max(dlen[size_t(x / Tt)], x % Tt + 1);
    const nn::RowPacking sp(std::move(slen), Ts), dp(std::move(dlen), Tt);
    const Tensor enc = encoder->forward(src, src_valid_len, &sp);
    const Tensor dec = decoder->forward_hidden(dec_input, enc, src_valid_len, &dp, &sp);
    if (dp.rows() == int64_t(r.size())) return dec;  // the requested rows are the kept prefixes
    // Position of each requested row among the kept rows (both increasing).
    const std::vector<int64_t> kept = dp.index().to_vector<int64_t>();
    std::vector<int64_t> pos(r.size());
    size_t j = 0;
    for (size_t i = 0; i < r.size(); ++i) {
        while (kept[j] != r[i]) ++j;
        pos[i] = int64_t(j);
    }
    return index_select(dec, 0, from_vector(pos, {int64_t(pos.size())}));
}

Tensor Transformer::output_logits(const Tensor& hidden) { return decoder->dense->forward(hidden); }

void Transformer::keep_attention_weights(bool on) {
    for (auto& b : encoder->blks) b->attention->keep_attention_weights(on);
    for (auto& b : decoder->blks) {
        b->attention1->keep_attention_weights(on);
        b->attention2->keep_attention_weights(on);
    }
}

// ---- incremental decoding ---------------------------------------------------------------------------

namespace {

/// Per decoder block: self-attention keys/values of the target positions decoded so far, stored
/// in a (B, H, capacity, D) buffer whose first `steps` positions are valid, and the
/// cross-attention keys/values of the encoder outputs (B, H, Ts, D), projected once.
struct BlockCache {
    Tensor k, v;    // (B, H, capacity, D)
    Tensor ck, cv;  // (B, H, Ts, D)
};

class TransformerState : public DecoderState {
public:
    std::vector<BlockCache> blks;
    Tensor enc_valid_lens;  // (B) i64
    int64_t t = 0;          // positions decoded so far
    int64_t capacity = 0;

    void reorder(const Tensor& index) override {
        QKV_CHECK(index.defined() && index.dim() == 1 && index.dtype() == DType::i64,
                  "DecoderState::reorder: index must be int64 (B'), got ",
                  index.defined() ? index.shape() : Shape{});
        NoGradGuard ng;
        enc_valid_lens = index_select(enc_valid_lens, 0, index);  // throws on an out-of-range row
        const std::vector<int64_t> rows = index.to_vector<int64_t>();
        for (auto& b : blks) {
            if (b.k.defined()) {
                b.k = gather_prefix(b.k, rows);
                b.v = gather_prefix(b.v, rows);
            }
            b.ck = index_select(b.ck, 0, index);
            b.cv = index_select(b.cv, 0, index);
        }
    }
    /// buf (B, H, capacity, D) contiguous -> (B', H, capacity, D) with rows `rows`; only the
    /// first t positions are copied (the rest is never read before decode_step writes it), so
    /// greedy decoding's frequent compactions move t/capacity of the buffer.
    Tensor gather_prefix(const Tensor& buf, const std::vector<int64_t>& rows) const {
        const int64_t H = buf.size(1), cap = buf.size(2), D = buf.size(3);
        Tensor out = Tensor::empty({int64_t(rows.size()), H, cap, D}, buf.dtype());
        const int64_t es = dtype_size(buf.dtype());
        const char* src = static_cast<const char*>(buf.raw_data());
        char* dst = static_cast<char*>(out.raw_data());
        const size_t run = size_t(t * D * es), head = size_t(cap * D * es);
        for (size_t i = 0; i < rows.size(); ++i)
            for (int64_t h = 0; h < H; ++h)
                std::memcpy(dst + (int64_t(i) * H + h) * int64_t(head), src + (rows[i] * H + h) * int64_t(head), run);
        return out;
    }
    int64_t steps() const override { return t; }
    int64_t batch_size() const override { return enc_valid_lens.size(0); }

    /// Makes room for position t in every block's self-attention buffer (doubling).
    void reserve(int64_t H, int64_t D) {
        if (t < capacity) return;
        const int64_t B = batch_size();
        const int64_t cap = std::max<int64_t>(16, capacity * 2);
        for (auto& b : blks) {
            Tensor k = zeros({B, H, cap, D}), v = zeros({B, H, cap, D});
            if (capacity > 0) {
                Tensor ks = k.slice(2, 0, capacity), vs = v.slice(2, 0, capacity);
                copy_(ks, b.k);
                copy_(vs, b.v);
            }
            b.k = k;
            b.v = v;
        }
        capacity = cap;
    }
};

}  // namespace

std::unique_ptr<DecoderState> Transformer::init_state(const Tensor& src, const Tensor& src_valid_len) {
    check_ids(src, "src");
    check_valid_len(src_valid_len, src.size(0));
    QKV_CHECK(src.size(1) <= cfg_.max_len, "Transformer: source longer than max_len = ", cfg_.max_len,
              ": ", src.shape());
    NoGradGuard ng;
    auto st = std::make_unique<TransformerState>();
    st->enc_valid_lens = src_valid_len.contiguous();
    // Trailing source columns past every row's valid length only ever act as masked keys, and the
    // positional encoding is absolute, so dropping them changes no output of a real position;
    // a batch of similar lengths (translate_tokens sorts them) then skips most of its padding.
    int64_t keep = 1;
    for (int64_t v : st->enc_valid_lens.to_vector<int64_t>()) keep = std::max(keep, v);
    const Tensor src_used = keep < src.size(1) ? src.slice(1, 0, keep).contiguous() : src;
    Tensor enc = encoder->forward(src_used, src_valid_len);
    for (auto& blk : decoder->blks) {
        BlockCache c;
        c.ck = project_heads(*blk->attention2->W_k, enc, cfg_.num_heads);
        c.cv = project_heads(*blk->attention2->W_v, enc, cfg_.num_heads);
        st->blks.push_back(std::move(c));
    }
    return st;
}

Tensor Transformer::decode_step_hidden(const Tensor& tokens, DecoderState& state_base) {
    auto* st = dynamic_cast<TransformerState*>(&state_base);
    QKV_CHECK(st != nullptr, "Transformer::decode_step: the state was not made by Transformer::init_state");
    const int64_t B = st->batch_size();
    QKV_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.size(0) == B && tokens.dtype() == DType::i64,
              "Transformer::decode_step: tokens must be int64 (B) with B = ", B, ", got ",
              tokens.defined() ? tokens.shape() : Shape{});
    const int64_t pos = cfg_.pe_position_zero_at_inference ? 0 : st->t;
    QKV_CHECK(pos < cfg_.max_len, "Transformer::decode_step: position ", pos, " reaches max_len ",
              cfg_.max_len);
    NoGradGuard ng;
    const int64_t H = cfg_.num_heads, D = cfg_.num_hiddens / H;
    st->reserve(H, D);
    const int64_t t = st->t;

    Tensor X = mul(decoder->embedding->forward(tokens.reshape({B, 1})), std::sqrt(double(cfg_.num_hiddens)));
    X = decoder->pos_encoding->forward(X, pos);  // (B, 1, C)

    AttentionOptions opt;  // eval: no dropout on the weights; scale 1/√D
    AttentionMask cross_mask;
    cross_mask.valid_lens = st->enc_valid_lens;
    DecoderAttentionTrace* trace = st->trace;
    if (trace) {
        trace->self.emplace_back();
        trace->cross.emplace_back();
    }
    for (size_t i = 0; i < decoder->blks.size(); ++i) {
        auto& blk = *decoder->blks[i];
        auto& c = st->blks[i];
        auto& a1 = *blk.attention1;
        // Self-attention: append this position's projected key/value, attend over 0..t. The new
        // query is the last position, so no mask is needed (the cache holds only the past).
        Tensor kd = c.k.slice(2, t, t + 1), vd = c.v.slice(2, t, t + 1);
        copy_(kd, split_heads(a1.W_k->forward(X), H));
        copy_(vd, split_heads(a1.W_v->forward(X), H));
        Tensor q = split_heads(a1.W_q->forward(X), H);
        Tensor w1, w2;
        Tensor o = scaled_dot_product_attention(q, c.k.slice(2, 0, t + 1), c.v.slice(2, 0, t + 1), {},
                                                opt, trace ? &w1 : nullptr);
        Tensor Y = blk.addnorm1->forward(X, a1.W_o->forward(merge_heads(o)));
        // Cross-attention on the cached encoder keys/values, masked by the source lengths.
        auto& a2 = *blk.attention2;
        Tensor q2 = split_heads(a2.W_q->forward(Y), H);
        Tensor o2 = scaled_dot_product_attention(q2, c.ck, c.cv, cross_mask, opt, trace ? &w2 : nullptr);
        Tensor Z = blk.addnorm2->forward(Y, a2.W_o->forward(merge_heads(o2)));
        X = blk.addnorm3->forward(Z, blk.ffn->forward(Z));
        if (trace) {
            trace->self.back().push_back(w1);
            trace->cross.back().push_back(w2);
        }
    }
    st->t += 1;
    return X.reshape({B, cfg_.num_hiddens});
}

Tensor Transformer::greedy_next(const Tensor& hidden, const std::vector<char>& banned) {
    if (const Int8Weight* q = decoder->dense->int8_weight())  // int8 inference
        return linear_int8_argmax(hidden, *q, decoder->dense->bias, banned);
    return linear_argmax(hidden, decoder->dense->weight, decoder->dense->bias, banned);
}

Tensor Transformer::output_loss(const Tensor& hidden, const Tensor& target, const CrossEntropyOptions& opt) {
    return linear_cross_entropy(hidden, decoder->dense->weight, decoder->dense->bias, target, opt);
}

}  // namespace qkv::models
