#pragma once
// A decoder-only Transformer language model (GPT; D2L 11.9.3, Radford et al. 2018): token
// embedding, num_blks pre-norm blocks x + MHA(LN(x)) then x + FFN(LN(x)) (GPT-2's placement,
// Radford et al. 2019 §2.3), a final layer norm and an output layer to the vocabulary. Positions
// by RoPE inside every attention layer (default) or by D2L's sinusoidal table added to the
// embeddings; grouped-query attention and a sliding window as options. It implements the
// EncoderDecoder interface with no encoder (the source is ignored), so the Trainer, checkpoints,
// resume and data-parallel training serve it unchanged, and init_state/decode_step decode with a
// KV cache per block.
// Dim legend: B batch, T positions, C num_hiddens, V vocabulary, H heads.
#include <memory>
#include <vector>

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

/// Decoding state: one KV cache per block and the number of positions decoded.
class LMState : public DecoderState {
public:
    std::vector<nn::KVCache> caches;
    int64_t batch = 0, position = 0;
    void reorder(const Tensor& index) override;
    int64_t steps() const override { return position; }
    int64_t batch_size() const override { return batch; }
};

class TransformerLM : public EncoderDecoder {
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

    // EncoderDecoder: the source is ignored (a language model has none).
    Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len, const Tensor& dec_input) override;
    Tensor output_logits(const Tensor& hidden) override;
    /// A state for `src.size(0)` sequences with empty caches (src's values are ignored).
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override;
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override;
    int64_t src_vocab_size() const override { return 1; }
    int64_t tgt_vocab_size() const override { return cfg_.vocab_size; }

    const TransformerLMConfig& config() const { return cfg_; }
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::PositionalEncoding> pos_encoding;  // null with RoPE
    std::vector<std::shared_ptr<LMBlock>> blks;
    std::shared_ptr<nn::LayerNorm> ln_f;
    std::shared_ptr<nn::Linear> dense;

private:
    Tensor embed(const Tensor& tokens, int64_t offset);
    TransformerLMConfig cfg_;
};

}  // namespace qkv::models
