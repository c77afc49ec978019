// D2L's Bahdanau-attention seq2seq (models/bahdanau.h): encoder, additive attention with keys
// projected once, the step-by-step attention decoder, and incremental decoding state.
#include "qkv/models/bahdanau.h"

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/additive_attention.h"
#include "qkv/ops/dropout.h"
#include "qkv/ops/embedding.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/ops.h"

namespace qkv::models {

namespace {

/// Re-draws a (out, in) weight from Xavier-uniform U(±√(6/(in + out))) in place (D2L init_seq2seq).
void xavier_(Tensor& w) {
    NoGradGuard ng;
    Tensor x = nn::xavier_uniform(w.shape(), w.shape()[1], w.shape()[0]);
    copy_(w, x);
}

/// Every layer's and direction's weight_ih and weight_hh, in registration order (D2L's
/// init_seq2seq walks _flat_weights_names: "_reverse" ones included).
void xavier_gru(nn::GRU& rnn) {
    for (size_t i = 0; i < rnn.weight_ih.size(); ++i) {
        xavier_(rnn.weight_ih[i]);
        xavier_(rnn.weight_hh[i]);
    }
}

}  // namespace

// ---- encoder --------------------------------------------------------------------------------

Seq2SeqEncoder::Seq2SeqEncoder(int64_t vocab_size, int64_t embed_size, int64_t num_hiddens,
                               int64_t num_layers, double dropout, bool bidirectional) {
    QKV_CHECK(!bidirectional || num_hiddens % 2 == 0, "Seq2SeqEncoder: a bidirectional encoder needs an even "
              "num_hiddens (H/2 per direction), got num_hiddens ", num_hiddens);
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, embed_size));
    rnn = register_module("rnn", std::make_shared<nn::GRU>(embed_size, bidirectional ? num_hiddens / 2 : num_hiddens,
                                                          num_layers, dropout, bidirectional));
}

std::pair<Tensor, Tensor> Seq2SeqEncoder::forward(const Tensor& src) const {
    QKV_CHECK(src.defined() && src.dim() == 2 && src.dtype() == DType::i64,
              "Seq2SeqEncoder: src must be (B, Ts) int64, got ",
              src.defined() ? dtype_name(src.dtype()) : "undefined", " ",
              src.defined() ? src.shape() : Shape{});
    const Tensor ids = src.transpose(0, 1);  // (Ts, B)
    std::pair<Tensor, Tensor> r;
    if (fold_embedding_projection && embedding->weight.size(0) < ids.numel()) {
        // Row v of the table is embedding v projected by layer 0 (both directions side by side
        // when bidirectional): a lookup replaces the GEMM.
        const Tensor table = rnn->bidirectional ? concat({rnn->input_projection(0, embedding->weight, 0),
                                                          rnn->input_projection(0, embedding->weight, 1)},
                                                         1)                      // (V, 2·3·H/2)
                                                : rnn->input_projection(0, embedding->weight);  // (V, 3H)
        r = rnn->forward_projected(qkv::embedding(ids, table));
    } else {
        r = rnn->forward(embedding->forward(ids));  // (Ts, B, E) -> GRU
    }
    if (!rnn->bidirectional) return r;
    // (2L, B, H/2) ordered l0 forward, l0 reverse, ... -> (L, B, H): layer l = [forward | reverse].
    const int64_t L = rnn->num_layers, B = r.second.size(1), Hd = rnn->hidden_size;
    return {r.first, r.second.reshape({L, 2, B, Hd}).permute({0, 2, 1, 3}).reshape({L, B, 2 * Hd})};
}

// ---- additive attention ---------------------------------------------------------------------

BahdanauAttention::BahdanauAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens,
                                     double p)
    : dropout(p) {
    QKV_CHECK(p >= 0 && p < 1, "BahdanauAttention: dropout must be in [0, 1), got ", p);
    W_k = register_module("W_k", std::make_shared<nn::Linear>(key_size, num_hiddens, false));
    W_q = register_module("W_q", std::make_shared<nn::Linear>(query_size, num_hiddens, false));
    w_v = register_module("w_v", std::make_shared<nn::Linear>(num_hiddens, 1, false));
}

Tensor BahdanauAttention::project_keys(const Tensor& keys) const { return W_k->forward(keys); }

Tensor BahdanauAttention::forward(const Tensor& query, const Tensor& projected_keys,
                                  const Tensor& values, const Tensor& valid_lens,
                                  Tensor* weights) const {
    const int64_t B = query.size(0), Ts = projected_keys.size(1);
    // scores (B, 1, Ts) = w_vᵀ tanh(W_q q + W_k k), fused (no (B, Ts, H) feature tensor).
    const Tensor scores = additive_attention_scores(W_q->forward(query).unsqueeze(1), projected_keys,
                                                    w_v->weight.reshape({w_v->in_features}));
    const Tensor w = masked_softmax(scores, valid_lens);
    if (weights) *weights = w.detach().reshape({B, Ts});
    return matmul(qkv::dropout(w, dropout, is_training()), values).reshape({B, values.size(2)});
}

// ---- decoder --------------------------------------------------------------------------------

Seq2SeqAttentionDecoder::Seq2SeqAttentionDecoder(int64_t vocab_size, int64_t embed_size,
                                                 int64_t num_hiddens, int64_t num_layers,
                                                 double dropout) {
    attention = register_module("attention", std::make_shared<BahdanauAttention>(
                                                 num_hiddens, num_hiddens, num_hiddens, dropout));
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, embed_size));
    rnn = register_module("rnn", std::make_shared<nn::GRU>(embed_size + num_hiddens, num_hiddens,
                                                          num_layers, dropout));
    dense = register_module("dense", std::make_shared<nn::Linear>(num_hiddens, vocab_size));
}

Seq2SeqAttentionDecoder::State Seq2SeqAttentionDecoder::init_state(const Tensor& enc_outputs,
                                                                   const Tensor& enc_state,
                                                                   const Tensor& valid_lens) const {
    const int64_t H = rnn->hidden_size;
    QKV_CHECK(enc_outputs.dim() == 3 && enc_outputs.size(2) == H, "Seq2SeqAttentionDecoder: encoder "
              "outputs must be (Ts, B, ", H, "), got ", enc_outputs.shape());
    const int64_t B = enc_outputs.size(1);
    QKV_CHECK(enc_state.shape() == Shape({rnn->num_layers, B, H}), "Seq2SeqAttentionDecoder: encoder "
              "state must be (", rnn->num_layers, ", ", B, ", ", H, "), got ", enc_state.shape());
    QKV_CHECK(valid_lens.defined() && valid_lens.shape() == Shape({B}), "Seq2SeqAttentionDecoder: "
              "valid_lens must be (B) = (", B, "), got ", valid_lens.defined() ? valid_lens.shape() : Shape{});
    State s;
    s.enc_outputs = enc_outputs.permute({1, 0, 2}).contiguous();  // (B, Ts, H)
    s.projected_keys = attention->project_keys(s.enc_outputs);    // one GEMM for all steps
    s.valid_lens = valid_lens;
    for (int64_t l = 0; l < rnn->num_layers; ++l) s.hidden.push_back(enc_state.select(0, l));
    return s;
}

Tensor Seq2SeqAttentionDecoder::step(const Tensor& tokens, State& s, Tensor* weights) const {
    return step_impl(tokens, embedding->forward(tokens), s, weights, nullptr);
}

Tensor Seq2SeqAttentionDecoder::step_impl(const Tensor& tokens, const Tensor& emb, State& s,
                                          Tensor* weights, const Folded* f) const {
    const Tensor context = attention->forward(s.hidden.back(), s.projected_keys, s.enc_outputs,
                                              s.valid_lens, weights);  // (B, H)
    // Layer 0's input is [context, embedding(token)] (context first): projected as one GEMM on
    // the concatenation, or as W_ctx·context plus the token's row of the folded table.
    const Tensor gi0 = f ? qkv::embedding(tokens, f->table) + linear(context, f->W_ctx)
                         : rnn->input_projection(0, concat({context, emb}, 1));
    s.hidden = rnn->step(gi0, s.hidden);
    return s.hidden.back();
}

Tensor Seq2SeqAttentionDecoder::forward_hidden(const Tensor& X, State& s) {
    QKV_CHECK(X.defined() && X.dim() == 2 && X.dtype() == DType::i64 && X.size(0) == s.enc_outputs.size(0),
              "Seq2SeqAttentionDecoder: X must be (B, Tt) int64 with B = ", s.enc_outputs.size(0), ", got ",
              X.defined() ? dtype_name(X.dtype()) : "undefined", " ", X.defined() ? X.shape() : Shape{});
    const int64_t Tt = X.size(1);
    attention_weights_.assign(size_t(Tt), Tensor());
    std::vector<Tensor> outs;
    outs.reserve(size_t(Tt));
    Folded f;
    const bool fold = fold_embedding_projection && embedding->weight.size(0) < X.numel();
    if (fold) {
        const int64_t H = rnn->hidden_size, E = embedding->weight.size(1);
        const Tensor& W = rnn->weight_ih[0];  // (3H, H + E)
        f.W_ctx = W.slice(1, 0, H).contiguous();
        f.table = linear(embedding->weight, W.slice(1, H, H + E).contiguous(), rnn->bias_ih[0]);
    }
    // Unfolded: embed every step's tokens at once (Tt, B, E) — one dense (V, E) gradient per
    // forward instead of one per step, which matters for large vocabularies.
    const Tensor emb_all = fold ? Tensor() : embedding->forward(X.transpose(0, 1));
    for (int64_t t = 0; t < Tt; ++t)
        outs.push_back(step_impl(X.select(1, t).contiguous(), fold ? Tensor() : emb_all.select(0, t), s,
                                 &attention_weights_[size_t(t)], fold ? &f : nullptr));
    if (Tt == 0) return zeros({X.size(0), 0, rnn->hidden_size});
    return stack(outs, 1);  // (B, Tt, H)
}

// ---- the model ------------------------------------------------------------------------------

namespace {

class BahdanauState : public DecoderState {
public:
    explicit BahdanauState(Seq2SeqAttentionDecoder::State s) : s_(std::move(s)) {}
    void reorder(const Tensor& index) override {
        QKV_CHECK(index.defined() && index.dtype() == DType::i64 && index.dim() == 1,
                  "Bahdanau: reorder needs a 1-D int64 index");
        s_.enc_outputs = index_select(s_.enc_outputs, 0, index);
        s_.projected_keys = index_select(s_.projected_keys, 0, index);
        s_.valid_lens = index_select(s_.valid_lens, 0, index);
        for (Tensor& h : s_.hidden) h = index_select(h, 0, index);
    }
    int64_t steps() const override { return steps_; }
    int64_t batch_size() const override { return s_.enc_outputs.size(0); }
    Seq2SeqAttentionDecoder::State s_;
    int64_t steps_ = 0;
};

}  // namespace

Bahdanau::Bahdanau(const BahdanauConfig& cfg) : cfg_(cfg) {
    QKV_CHECK(cfg.src_vocab_size > 0 && cfg.tgt_vocab_size > 0 && cfg.embed_size > 0 &&
                  cfg.num_hiddens > 0 && cfg.num_layers > 0,
              "Bahdanau: vocabulary sizes, embed_size, num_hiddens and num_layers must be positive");
    QKV_CHECK(cfg.dropout >= 0 && cfg.dropout < 1, "Bahdanau: dropout must be in [0, 1), got ", cfg.dropout);
    encoder = register_module("encoder", std::make_shared<Seq2SeqEncoder>(
                                             cfg.src_vocab_size, cfg.embed_size, cfg.num_hiddens,
                                             cfg.num_layers, cfg.dropout, cfg.bidirectional));
    decoder = register_module("decoder", std::make_shared<Seq2SeqAttentionDecoder>(
                                             cfg.tgt_vocab_size, cfg.embed_size, cfg.num_hiddens,
                                             cfg.num_layers, cfg.dropout));
    encoder->rnn->impl = cfg.gru_impl;
    decoder->rnn->impl = cfg.gru_impl;
    encoder->fold_embedding_projection = cfg.fold_embedding_projection;
    decoder->fold_embedding_projection = cfg.fold_embedding_projection;
    if (cfg.init != BahdanauInit::pytorch) {
        xavier_gru(*encoder->rnn);
        xavier_gru(*decoder->rnn);
    }
    if (cfg.init == BahdanauInit::d2l_zh) {
        for (auto* lin : {decoder->attention->W_k.get(), decoder->attention->W_q.get(),
                          decoder->attention->w_v.get(), decoder->dense.get()})
            xavier_(lin->weight);
    }
}

Tensor Bahdanau::forward_hidden(const Tensor& src, const Tensor& src_valid_len, const Tensor& dec_input) {
    auto [enc_out, enc_state] = encoder->forward(src);
    auto state = decoder->init_state(enc_out, enc_state, src_valid_len);
    return decoder->forward_hidden(dec_input, state);
}

Tensor Bahdanau::output_logits(const Tensor& hidden) { return decoder->dense->forward(hidden); }

std::unique_ptr<DecoderState> Bahdanau::init_state(const Tensor& src, const Tensor& src_valid_len) {
    NoGradGuard ng;
    auto [enc_out, enc_state] = encoder->forward(src);
    return std::make_unique<BahdanauState>(decoder->init_state(enc_out, enc_state, src_valid_len));
}

Tensor Bahdanau::decode_step_hidden(const Tensor& tokens, DecoderState& state) {
    auto* st = dynamic_cast<BahdanauState*>(&state);
    QKV_CHECK(st != nullptr, "Bahdanau: decode_step needs the state made by Bahdanau::init_state");
    QKV_CHECK(tokens.defined() && tokens.dtype() == DType::i64 && tokens.shape() == Shape({st->batch_size()}),
              "Bahdanau: decode_step tokens must be (B) int64 with B = ", st->batch_size(), ", got ",
              tokens.defined() ? tokens.shape() : Shape{});
    NoGradGuard ng;
    Tensor w;
    const Tensor h = decoder->step(tokens.contiguous(), st->s_, &w);
    if (state.trace) {
        const int64_t B = w.size(0), Ts = w.size(1);
        state.trace->cross.push_back({w.reshape({B, 1, 1, Ts})});
        state.trace->self.emplace_back();
    }
    ++st->steps_;
    return h;
}

}  // namespace qkv::models
