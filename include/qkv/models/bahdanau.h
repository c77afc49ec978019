#pragma once
// D2L's RNN encoder–decoder with Bahdanau attention (D2L 11.4 "The Bahdanau Attention Mechanism";
// Bahdanau et al. 2015; spec §1.3, §1.10–1.11): a GRU encoder, and a GRU decoder that attends
// (additive attention, masked by the source valid lengths) over the encoder outputs at every
// step, with the context concatenated BEFORE the embedded input token. Parameter names equal the
// PyTorch state_dict of D2L's model ("encoder.rnn.weight_ih_l0", "decoder.attention.W_k.weight",
// "decoder.dense.bias"). Implements models::EncoderDecoder (training and decoding use that).
// Dim legend: B batch, Ts/Tt source/target length, E embed size, H num_hiddens, L layers,
// V vocabulary.
#include <memory>
#include <utility>
#include <vector>

#include "qkv/models/encoder_decoder.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/rnn.h"

namespace qkv::models {

/// Which book's initialisation (spec §1.11, pitfall 4).
enum class BahdanauInit {
    d2l_en,   // Xavier-uniform on every GRU weight*, all else PyTorch defaults (the Lazy layers)
    d2l_zh,   // Xavier-uniform on every GRU weight* and every Linear weight (attention, dense)
    pytorch,  // PyTorch defaults everywhere (GRU U(±1/√H), Linear U(±1/√in), Embedding N(0, 1))
};

struct BahdanauConfig {
    int64_t src_vocab_size = 0;
    int64_t tgt_vocab_size = 0;
    int64_t embed_size = 256;   // E
    int64_t num_hiddens = 256;  // H: GRU width and additive-attention width
    int64_t num_layers = 2;     // L, in the encoder and (again) in the decoder
    double dropout = 0.2;       // between GRU layers and on the attention weights (training)
    BahdanauInit init = BahdanauInit::d2l_en;
    nn::GRUImpl gru_impl = nn::GRUImpl::sequence;  // encoder recurrence (the decoder steps cells)
    /// Compute the GRU's layer-0 input projection of an embedded token as a row of the table
    /// T = Embedding.weight·W_ihᵀ + b_ih (V, 3H) when the vocabulary has fewer rows than the
    /// batch has tokens: the same function with fewer FLOPs (bench/RESULTS_gru.md). false: always
    /// embed, then project (D2L's order of operations).
    bool fold_embedding_projection = true;
    /// A bidirectional encoder (Seq2SeqEncoder below; OpenNMT's "brnn"), as Bahdanau et al.
    /// (2015) used; D2L's model is unidirectional (false). num_hiddens must then be even.
    bool bidirectional = false;
};

/// D2L Seq2SeqEncoder: src (B, Ts) i64 -> embedding (Ts, B, E) -> L-layer GRU from a zero state
/// -> (outputs (Ts, B, H), state (L, B, H)). Runs over the pad positions too (D2L ignores
/// valid_len here; only the attention masks them).
/// bidirectional (beyond D2L; Bahdanau et al. 2015 §3.1, in OpenNMT-py's "brnn" form): the GRU
/// is bidirectional with H/2 per direction (parameters "rnn.weight_ih_l0_reverse", ...), the
/// outputs (Ts, B, H) are [forward | reverse] at each step (the reverse direction reads the
/// sequence from its last position, pads included), and the state's layer l is [layer l's final
/// forward state | its final reverse state] (L, B, H): the GRU's (2L, B, H/2) state reshaped to
/// (L, 2, B, H/2), permuted to (L, B, 2, H/2) and flattened. The decoder is unchanged.
class Seq2SeqEncoder : public nn::Module {
public:
    /// Throws qkv::Error naming num_hiddens when bidirectional and num_hiddens is odd (and as
    /// nn::GRU for sizes that are not positive).
    Seq2SeqEncoder(int64_t vocab_size, int64_t embed_size, int64_t num_hiddens, int64_t num_layers,
                   double dropout, bool bidirectional = false);
    /// src (B, Ts) i64 -> (outputs (Ts, B, H), state (L, B, H)). Throws qkv::Error when src is
    /// not (B, Ts) int64 or an id is outside the vocabulary.
    std::pair<Tensor, Tensor> forward(const Tensor& src) const;
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::GRU> rnn;  // hidden size H, or H/2 per direction when bidirectional
    bool fold_embedding_projection = true;  // see BahdanauConfig
};

/// Additive attention (D2L 11.3.3) with the keys projected once per source batch instead of at
/// every decoder step (D2L recomputes W_k·keys each step; the result and gradients are the same).
/// Parameters W_k (H -> H), W_q (H -> H), w_v (H -> 1), all bias-free.
class BahdanauAttention : public nn::Module {
public:
    BahdanauAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens, double dropout);
    /// keys (B, Ts, key_size) -> W_k·keys (B, Ts, H).
    Tensor project_keys(const Tensor& keys) const;
    /// query (B, query_size), projected keys (B, Ts, H), values (B, Ts, Dv), valid_lens (B) i64
    /// -> context (B, Dv) = dropout(w)·values with w = masked_softmax(w_vᵀ tanh(W_q q + W_k k)).
    /// *weights (if given) receives w (B, Ts) before dropout.
    Tensor forward(const Tensor& query, const Tensor& projected_keys, const Tensor& values,
                   const Tensor& valid_lens, Tensor* weights = nullptr) const;
    std::shared_ptr<nn::Linear> W_k, W_q, w_v;
    double dropout;
};

/// D2L Seq2SeqAttentionDecoder. Per target step t: query = the top layer's state; context =
/// additive attention over the encoder outputs (keys = values, masked by the source lengths);
/// GRU input = [context, embedding(token_t)] (context FIRST); one GRU step through all layers.
/// The dense layer (H -> V) is applied after the loop (output_logits).
class Seq2SeqAttentionDecoder : public nn::Module {
public:
    Seq2SeqAttentionDecoder(int64_t vocab_size, int64_t embed_size, int64_t num_hiddens,
                            int64_t num_layers, double dropout);

    /// What the decoder carries: the encoder outputs batch-first (B, Ts, H) and their projection
    /// by W_k, the source valid lengths (B), and the L layer states (B, H).
    struct State {
        Tensor enc_outputs, projected_keys, valid_lens;
        std::vector<Tensor> hidden;
    };
    /// D2L init_state: enc outputs (Ts, B, H) and state (L, B, H) from the encoder.
    State init_state(const Tensor& enc_outputs, const Tensor& enc_state, const Tensor& valid_lens) const;
    /// One step: tokens (B) i64 -> the top layer's new state (B, H); advances state.hidden.
    /// *weights (if given) receives the step's attention weights (B, Ts).
    Tensor step(const Tensor& tokens, State& state, Tensor* weights = nullptr) const;
    /// Teacher forcing: X (B, Tt) i64 -> top-layer states (B, Tt, H) (dense not applied);
    /// attention_weights() then holds the Tt steps' weights, each (B, Ts).
    Tensor forward_hidden(const Tensor& X, State& state);
    const std::vector<Tensor>& attention_weights() const { return attention_weights_; }

    std::shared_ptr<BahdanauAttention> attention;
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::GRU> rnn;
    std::shared_ptr<nn::Linear> dense;
    bool fold_embedding_projection = true;  // see BahdanauConfig (teacher forcing only)

private:
    /// Layer 0's weight split by input: W_ctx = W_ih_l0[:, :H] (3H, H) and the projected
    /// embedding table Embedding.weight·W_ih_l0[:, H:]ᵀ + b_ih_l0 (V, 3H).
    struct Folded {
        Tensor W_ctx, table;
    };
    /// One step; layer 0's input from `folded` (tokens' table rows) or else from emb (B, E).
    Tensor step_impl(const Tensor& tokens, const Tensor& emb, State& state, Tensor* weights,
                     const Folded* folded) const;
    std::vector<Tensor> attention_weights_;
};

/// The whole model (EncoderDecoder with children "encoder" and "decoder"). D2L EN's book model
/// (src/tgt vocab 194/214, E = H = 256, 2 layers) has 2,066,390 parameters. With
/// cfg.bidirectional the encoder is Seq2SeqEncoder's bidirectional form; the D2L inits then
/// also draw the "_reverse" GRU weights from Xavier-uniform.
class Bahdanau : public EncoderDecoder {
public:
    /// Throws qkv::Error when a size is not positive, dropout is outside [0, 1), or num_hiddens
    /// is odd with bidirectional.
    explicit Bahdanau(const BahdanauConfig& cfg);

    Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                          const Tensor& dec_input) override;
    Tensor output_logits(const Tensor& hidden) override;
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override;
    /// One step; with state.trace set, appends the step's weights as cross[step] = {(B, 1, 1, Ts)}
    /// (one "block" and one "head") and self[step] = {} (no self-attention).
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override;
    /// decoder.dense: greedy_next and output_loss fuse it (no (B, V) logits).
    nn::Linear* output_linear() override { return decoder->dense.get(); }
    int64_t src_vocab_size() const override { return cfg_.src_vocab_size; }
    int64_t tgt_vocab_size() const override { return cfg_.tgt_vocab_size; }

    /// The last forward_hidden's attention weights, one (B, Ts) per target step (heatmaps).
    const std::vector<Tensor>& attention_weights() const { return decoder->attention_weights(); }
    const BahdanauConfig& config() const { return cfg_; }

    std::shared_ptr<Seq2SeqEncoder> encoder;
    std::shared_ptr<Seq2SeqAttentionDecoder> decoder;

private:
    BahdanauConfig cfg_;
};

}  // namespace qkv::models
