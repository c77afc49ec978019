// The decoder-only Transformer language model (models/lm.h).
#include "qkv/models/lm.h"

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::models {

namespace {

nn::MultiHeadAttentionConfig attention_config(const TransformerLMConfig& c) {
    nn::MultiHeadAttentionConfig a;
    a.num_hiddens  = c.num_hiddens;
    a.num_heads    = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.dropout      = c.dropout;
    a.rope         = c.rope;
    if (c.window > 0) a.window = {c.window - 1, 0, CausalAlign::top_left};
    return a;
}

}  // namespace

LMBlock::LMBlock(const TransformerLMConfig& c) {
    ln1       = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{c.num_hiddens}));
    attention = register_module("attention", std::make_shared<nn::MultiHeadAttention>(attention_config(c)));
    ln2       = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{c.num_hiddens}));
    ffn       = register_module("ffn", std::make_shared<nn::PositionWiseFFN>(c.num_hiddens, c.ffn_num_hiddens, c.num_hiddens));
    dropout   = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor LMBlock::forward(const Tensor& x, nn::KVCache* cache) {
    const Tensor h = ln1->forward(x);
    nn::AttentionCall call;
    call.causal = CausalAlign::top_left;  // bottom-right with a cache (MultiHeadAttention)
    call.cache  = cache;
    const Tensor y = add(x, dropout->forward(attention->forward(h, h, h, call)));
    return add(y, dropout->forward(ffn->forward(ln2->forward(y))));
}

void LMState::reorder(const Tensor& index) {
    QKV_CHECK(index.defined() && index.dim() == 1 && index.dtype() == DType::i64,
              "LMState::reorder: index must be (B') int64");
    for (auto& c : caches) c.reorder(index);
    if (pending.defined()) pending = index_select(pending, 0, index).contiguous();
    if (sequence.defined()) sequence = index_select(sequence, 0, index).contiguous();
    batch = index.size(0);
}

TransformerLM::TransformerLM(const TransformerLMConfig& c) : cfg_(c) {
    QKV_CHECK(c.vocab_size > 0 && c.num_hiddens > 0 && c.num_heads > 0 && c.num_blks > 0 && c.ffn_num_hiddens > 0,
              "TransformerLM: vocab_size, num_hiddens, num_heads, num_blks and ffn_num_hiddens must be positive");
    QKV_CHECK(c.num_hiddens % c.num_heads == 0, "TransformerLM: num_heads (", c.num_heads,
              ") must divide num_hiddens (", c.num_hiddens, ")");
    QKV_CHECK(c.dropout >= 0 && c.dropout < 1, "TransformerLM: dropout must be in [0, 1), got ", c.dropout);
    QKV_CHECK(c.window == -1 || c.window >= 1, "TransformerLM: window must be >= 1 (or -1: none), got ", c.window);
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(c.vocab_size, c.num_hiddens));
    if (!c.rope) pos_encoding = register_module("pos_encoding", std::make_shared<nn::PositionalEncoding>(c.num_hiddens, c.dropout, c.max_len));
    for (int64_t i = 0; i < c.num_blks; ++i)
        blks.push_back(register_module("blks." + std::to_string(i), std::make_shared<LMBlock>(c)));
    ln_f  = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{c.num_hiddens}));
    dense = register_module("dense", std::make_shared<nn::Linear>(c.num_hiddens, c.vocab_size));
}

Tensor TransformerLM::embed(const Tensor& tokens, int64_t offset) {
    QKV_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.dtype() == DType::i64,
              "TransformerLM: tokens must be (B, T) int64, got ", tokens.defined() ? tokens.shape() : Shape{});
    Tensor x = embedding->forward(tokens);
    return pos_encoding ? pos_encoding->forward(x, offset) : x;
}

Tensor TransformerLM::hidden(const Tensor& tokens) {
    Tensor x = embed(tokens, 0);
    for (auto& b : blks) x = b->forward(x);
    return ln_f->forward(x);
}

Tensor TransformerLM::hidden_cached(const Tensor& tokens, LMState& state) {
    NoGradGuard ng;
    QKV_CHECK(int64_t(state.caches.size()) == cfg_.num_blks, "TransformerLM: the state has ", state.caches.size(),
              " caches for ", cfg_.num_blks, " blocks (a state of another model?)");
    QKV_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(0) == state.batch,
              "TransformerLM: tokens must be (B = ", state.batch, ", T), got ",
              tokens.defined() ? tokens.shape() : Shape{});
    Tensor x = embed(tokens, state.position);
    for (size_t i = 0; i < blks.size(); ++i) x = blks[i]->forward(x, &state.caches[i]);
    state.position += tokens.size(1);
    return ln_f->forward(x);
}

Tensor TransformerLM::output_logits(const Tensor& hidden) { return dense->forward(hidden); }

std::unique_ptr<DecoderState> TransformerLM::init_state(const Tensor& prompts, const Tensor& prompt_lens) {
    QKV_CHECK(prompts.defined() && prompts.dim() == 2 && prompts.dtype() == DType::i64,
              "TransformerLM::init_state: prompts must be (B, T) int64, got ",
              prompts.defined() ? prompts.shape() : Shape{});
    const int64_t B = prompts.size(0), T = prompts.size(1);
    if (prompt_lens.defined()) {
        QKV_CHECK(prompt_lens.dim() == 1 && prompt_lens.size(0) == B && prompt_lens.dtype() == DType::i64,
                  "TransformerLM::init_state: prompt_lens must be (B) int64 with B = ", B, ", got ", prompt_lens.shape());
        for (int64_t l : prompt_lens.contiguous().to_vector<int64_t>())
            QKV_CHECK(l == T, "TransformerLM::init_state: every prompt must fill the ", T,
                      " columns (no padding), got a length of ", l);
    }
    auto s       = std::make_unique<LMState>();
    s->batch     = B;
    s->recompute = recompute_prefix_;
    s->caches.resize(size_t(cfg_.num_blks));
    if (T >= 1) s->pending = prompts.contiguous();
    if (s->recompute) s->sequence = prompts.contiguous();
    return s;
}

Tensor TransformerLM::decode_step_hidden(const Tensor& tokens, DecoderState& state) {
    auto* s = dynamic_cast<LMState*>(&state);
    QKV_CHECK(s != nullptr, "TransformerLM::decode_step: the state is not a TransformerLM's");
    QKV_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.dtype() == DType::i64 && tokens.size(0) == s->batch,
              "TransformerLM::decode_step: tokens must be (B) int64 with B = ", s->batch);
    const bool prompt = s->pending.defined();
    const Tensor in   = prompt ? s->pending : tokens.reshape({s->batch, 1});
    s->pending        = Tensor();
    Tensor h;
    if (s->recompute) {  // the prompt is already the sequence's start
        NoGradGuard ng;
        if (!prompt) s->sequence = s->sequence.size(1) == 0 ? in : concat({s->sequence, in}, 1).contiguous();
        h = hidden(s->sequence);
        s->position = s->sequence.size(1);
    } else {
        h = hidden_cached(in, *s);
    }
    const int64_t T = h.size(1);
    return h.slice(1, T - 1, T).reshape({s->batch, cfg_.num_hiddens});
}

// ---- LMTrainingView ----

LMTrainingView::LMTrainingView(std::shared_ptr<TransformerLM> model) : model_(std::move(model)) {
    QKV_CHECK(model_ != nullptr, "LMTrainingView: null model");
    // The model's registration order and names (TransformerLM's constructor).
    register_module("embedding", model_->embedding);
    if (model_->pos_encoding) register_module("pos_encoding", model_->pos_encoding);
    for (size_t i = 0; i < model_->blks.size(); ++i) register_module("blks." + std::to_string(i), model_->blks[i]);
    register_module("ln_f", model_->ln_f);
    register_module("dense", model_->dense);
}

Tensor LMTrainingView::forward_hidden(const Tensor&, const Tensor&, const Tensor& dec_input) {
    return model_->hidden(dec_input);
}

std::unique_ptr<DecoderState> LMTrainingView::init_state(const Tensor& src, const Tensor&) {
    QKV_CHECK(src.defined() && src.dim() >= 1, "LMTrainingView::init_state: src must give the batch size");
    return model_->init_state(Tensor::empty({src.size(0), 0}, DType::i64), Tensor());
}

}  // namespace qkv::models
