#pragma once
// A decoder-only Transformer language model (GPT; D2L 11.9.3, Radford et al. 2018): token
// embedding, num_blks pre-norm blocks x + MHA(LN(x)) then x + FFN(LN(x)) (GPT-2's placement,
// Radford et al. 2019 §2.3), a final layer norm and an output layer to the vocabulary. Positions
// by RoPE inside every attention layer (default) or by D2L's sinusoidal table added to the
// embeddings; grouped-query attention and a sliding window as options. It is Autoregressive
// (models/autoregressive.h): init_state takes the prompts, decode_step_hidden decodes with an
// nn::KVCache per block, and decode::generate searches it as it does the translators. The Trainer
// sees it through LMTrainingView (an EncoderDecoder with no encoder), so checkpoints, resume and
// data-parallel training serve it unchanged.
// Dim legend: B batch, T positions, C num_hiddens, V vocabulary, H heads.
#include <memory>
#include <vector>

#include "qkv/models/autoregressive.h"
#include "qkv/models/encoder_decoder.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/layers.h"

namespace qkv::models {

struct TransformerLMConfig {
    int64_t vocab_size = 0;
    int64_t num_hiddens = 128;      // C
    int64_t num_heads = 4;          // H, divides C
    int64_t num_kv_heads = 0;       // GQA: key/value heads (divides H); 0 = H
    int64_t num_blks = 2;
    int64_t ffn_num_hiddens = 512;
    double dropout = 0.1;           // on attention weights, the FFN output and the residual branches
    bool rope = true;               // false: sinusoidal positions added to the embeddings
    int64_t window = -1;            // sliding window: each token sees itself and `window` - 1 before (-1: all)
    int64_t max_len = 4096;         // positions the sinusoidal table covers (RoPE has no limit)
};

/// One pre-norm decoder block: x + attention(ln1(x)) (causal), then x + ffn(ln2(x)).
class LMBlock : public nn::Module {
public:
    explicit LMBlock(const TransformerLMConfig& cfg);
    /// x (B, T, C) -> (B, T, C); with a cache the T positions follow the cached ones.
    Tensor forward(const Tensor& x, nn::KVCache* cache = nullptr);
    std::shared_ptr<nn::LayerNorm> ln1, ln2;
    std::shared_ptr<nn::MultiHeadAttention> attention;
    std::shared_ptr<nn::PositionWiseFFN> ffn;
    std::shared_ptr<nn::Dropout> dropout;
};

/// Decoding state: one KV cache per block, the number of positions decoded, and (after
/// init_state with prompts) the prompts, the first step's input.
class LMState : public DecoderState {
public:
    std::vector<nn::KVCache> caches;
    int64_t batch = 0, position = 0;
    /// (B, T) i64: read by the next decode_step_hidden instead of its tokens (all T positions in one
    /// pass, the last one's hidden state returned); or undefined.
    Tensor pending;
    /// TransformerLM::recompute_prefix: no caches; the whole sequence so far, (B, t) i64.
    bool recompute = false;
    Tensor sequence;
    void reorder(const Tensor& index) override;
    int64_t steps() const override { return position; }
    int64_t batch_size() const override { return batch; }
};

class TransformerLM : public nn::Module, public Autoregressive {
public:
    /// Throws qkv::Error when a size is not positive, num_heads does not divide num_hiddens,
    /// num_kv_heads does not divide num_heads, RoPE gets an odd head width, or window is 0 or < -1.
    explicit TransformerLM(const TransformerLMConfig& cfg);
    /// tokens (B, T) i64 -> hidden states (B, T, C) after the final layer norm; position t sees
    /// tokens <= t (and, with a window, > t − window).
    Tensor hidden(const Tensor& tokens);
    /// tokens (B, T) -> logits (B, T, V).
    Tensor logits(const Tensor& tokens) { return output_logits(hidden(tokens)); }
    /// The next T tokens of every sequence after state.steps() cached ones: (B, T) i64 -> hidden
    /// (B, T, C), appending to the caches (a prompt at once, then one token per call). Without
    /// autograd history. Equals hidden() of the whole sequence at those positions (tested).
    Tensor hidden_cached(const Tensor& tokens, LMState& state);
    Tensor output_logits(const Tensor& hidden) override;
    /// A state for B = prompts.size(0) sequences: prompts (B, T) i64, T >= 0, every row a whole
    /// prompt (prompt_lens, when defined, must be (B) i64 of T each: no padding). With T >= 1 the
    /// first step reads the whole prompt in one pass (filling the caches) and returns its last
    /// position's hidden state (the search's <bos> given to that step is not read); with T = 0
    /// the caches start empty and the first step reads its tokens. Throws qkv::Error on other
    /// shapes or lengths.
    std::unique_ptr<DecoderState> init_state(const Tensor& prompts, const Tensor& prompt_lens) override;
    /// tokens (B) i64 (or the state's pending prompt token) -> hidden (B, C) of that position.
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override;
    int64_t tgt_vocab_size() const override { return cfg_.vocab_size; }
    const TransformerLMConfig& config() const { return cfg_; }
    /// For comparison (`qkv generate --no-cache`, the KV-cache benchmark): the states init_state
    /// makes from now on keep no caches, and each decode_step_hidden recomputes hidden() over the
    /// whole sequence so far (O(t²) per token instead of O(t)); the same hidden states.
    void set_recompute_prefix(bool on) { recompute_prefix_ = on; }

    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::PositionalEncoding> pos_encoding;  // null with RoPE
    std::vector<std::shared_ptr<LMBlock>> blks;
    std::shared_ptr<nn::LayerNorm> ln_f;
    std::shared_ptr<nn::Linear> dense;

private:
    Tensor embed(const Tensor& tokens, int64_t offset);
    TransformerLMConfig cfg_;
    bool recompute_prefix_ = false;
};

/// The language model as the Trainer (train/trainer.h) sees it: an EncoderDecoder whose source
/// is ignored (NmtArrays rows of zeros) and whose decoder input is the token sequence. It holds
/// the model's own modules under the model's names, so parameters, state_dict, checkpoints and
/// model files are the model's (same names, same tensors); it shares ownership of the model.
class LMTrainingView : public EncoderDecoder {
public:
    /// Throws qkv::Error on a null model.
    explicit LMTrainingView(std::shared_ptr<TransformerLM> model);
    TransformerLM& model() { return *model_; }
    /// dec_input (B, T) i64 -> model.hidden(dec_input) (B, T, C); src and src_valid_len unread.
    Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len, const Tensor& dec_input) override;
    Tensor output_logits(const Tensor& hidden) override { return model_->output_logits(hidden); }
    /// The model's state for src.size(0) empty prompts (decoding through the view).
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override;
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override {
        return model_->decode_step_hidden(tokens, state);
    }
    int64_t src_vocab_size() const override { return 1; }
    int64_t tgt_vocab_size() const override { return model_->tgt_vocab_size(); }

private:
    std::shared_ptr<TransformerLM> model_;
};

}  // namespace qkv::models
