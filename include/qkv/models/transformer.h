#pragma once
// D2L's Transformer encoder–decoder (D2L 11.7 "The Transformer Architecture"; Vaswani et al.
// 2017; spec §1.8–1.10): post-LN blocks, sinusoidal positions, embeddings scaled by √C, a
// biased output Linear. Parameter names equal the PyTorch state_dict of D2L EN's model
// ("encoder.blks.0.attention.W_q.weight", "decoder.blks.1.addnorm3.ln.bias", "decoder.dense.weight").
// Incremental decoding runs the same decoder blocks with an nn::KVCache per attention layer
// (projected keys/values, not D2L's cached block inputs; the encoder's projected once).
// Dim legend: B batch, Ts/Tt source/target length, C num_hiddens, H heads, D = C/H, F FFN width,
// V vocabulary.
#include <memory>
#include <vector>

#include "qkv/models/encoder_decoder.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/packing.h"

namespace qkv::models {

struct TransformerConfig {
    int64_t src_vocab_size = 0;
    int64_t tgt_vocab_size = 0;
    int64_t num_hiddens = 256;      // C; divisible by num_heads
    int64_t num_blks = 2;           // blocks in the encoder and (again) in the decoder
    int64_t num_heads = 4;          // H
    int64_t ffn_num_hiddens = 64;   // F
    double dropout = 0.2;           // embeddings+PE, attention weights, AddNorm
    int64_t max_len = 1000;         // positional-encoding table length
    /// D2L's inference quirk (spec §1.9): the decoder adds PE position 0 at every decoding step.
    /// false (default): step t uses position t, as in training.
    bool pe_position_zero_at_inference = false;
    /// Weight tying (Press & Wolf 2017; Vaswani et al. 2017 §3.4): the source embedding, the
    /// target embedding and the output layer's weight are one (V, C) parameter; needs
    /// src_vocab_size == tgt_vocab_size (a shared vocabulary). It is initialised N(0, 1/C) (std
    /// C^-1/2) instead of the untied N(0, 1) embeddings and U(±1/√C) output weight, so the
    /// √C-scaled embeddings keep unit-scale entries and the logits of unit-scale LayerNorm
    /// outputs start with std ≈ 1. named_parameters() lists it once, as
    /// "encoder.embedding.weight"; state_dict() and model files list it under all three
    /// PyTorch names (encoder.embedding.weight, decoder.embedding.weight, decoder.dense.weight);
    /// loading accepts any of them and re-ties (identical values required). The output bias
    /// stays separate.
    bool tie_weights = false;
};

/// Encoder block (D2L TransformerEncoderBlock): Y = AddNorm1(X, MHA(X, X, X, valid_lens));
/// out = AddNorm2(Y, FFN(Y)). X (B, Ts, C), valid_lens (B) -> (B, Ts, C). With `rows` (the
/// pad-free path, nn/packing.h) X and the result are the kept rows (N, C) instead; rows must keep
/// at least min(valid_lens[b], Ts) positions of every sequence (MultiHeadAttention's rule).
class TransformerEncoderBlock : public nn::Module {
public:
    TransformerEncoderBlock(const TransformerConfig& cfg);
    Tensor forward(const Tensor& X, const Tensor& valid_lens, const nn::RowPacking* rows = nullptr);
    std::shared_ptr<nn::MultiHeadAttention> attention;
    std::shared_ptr<nn::AddNorm> addnorm1;
    std::shared_ptr<nn::PositionWiseFFN> ffn;
    std::shared_ptr<nn::AddNorm> addnorm2;
};

/// Encoder (D2L TransformerEncoder): X = PE(Embedding(src)·√C), then the blocks.
/// src (B, Ts) i64, valid_lens (B) i64 -> (B, Ts, C); with `rows` the blocks run on the kept
/// rows and the result is (N, C) (TransformerEncoderBlock).
class TransformerEncoder : public nn::Module {
public:
    TransformerEncoder(const TransformerConfig& cfg);
    Tensor forward(const Tensor& src, const Tensor& valid_lens, const nn::RowPacking* rows = nullptr);
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::PositionalEncoding> pos_encoding;
    std::vector<std::shared_ptr<TransformerEncoderBlock>> blks;
    int64_t num_hiddens;
};

/// Incremental decoding's cache of one decoder block (nn::KVCache, as the LM's blocks use):
/// `self` holds the self-attention keys/values of the target positions decoded so far (appended
/// per step), `cross` the cross-attention keys/values of the encoder outputs, projected once
/// (TransformerDecoderBlock::cache_encoder). With `record` set, the block's last cached forward
/// leaves its attention weights in self_weights (B, H, Tn, steps) and cross_weights (B, H, Tn, Ts).
struct DecoderBlockCache {
    nn::KVCache self, cross;
    bool record = false;
    Tensor self_weights, cross_weights;
    /// Rows `index` (i64 (B')) of the batch in both caches (beam search); throws on a bad index.
    void reorder(const Tensor& index) { self.reorder(index), cross.reorder(index); }
};

/// Decoder block (D2L TransformerDecoderBlock): causal self-attention → AddNorm1, cross-attention
/// on the encoder outputs masked by the source valid lengths → AddNorm2, FFN → AddNorm3.
class TransformerDecoderBlock : public nn::Module {
public:
    TransformerDecoderBlock(const TransformerConfig& cfg);
    /// Teacher forcing: X (B, Tt, C), enc_outputs (B, Ts, C), enc_valid_lens (B) -> (B, Tt, C).
    /// Pad-free path (nn/packing.h): with `rows` X and the result are the kept target rows
    /// (N, C) (each sequence a prefix, so the causal mask hides the skipped ones); with
    /// `enc_rows` enc_outputs are the kept source rows (N_s, C), which must cover
    /// min(enc_valid_lens[b], Ts) positions of every sequence.
    /// Incremental decoding (`cache`, padded inputs only): X (B, Tn, C) are the Tn positions after
    /// the cache.self.length() cached ones; their keys/values are appended to cache.self, the
    /// cross-attention reads cache.cross (enc_outputs is not read and may be undefined). The
    /// same sub-layers as teacher forcing, so the rows equal its rows at those positions (tested).
    Tensor forward(const Tensor& X, const Tensor& enc_outputs, const Tensor& enc_valid_lens,
                   const nn::RowPacking* rows = nullptr, const nn::RowPacking* enc_rows = nullptr,
                   DecoderBlockCache* cache = nullptr);
    /// Fills cache.cross with the cross-attention keys/values of enc_outputs (B, Ts, C) and empties
    /// cache.self (the start of incremental decoding). No autograd history.
    void cache_encoder(const Tensor& enc_outputs, DecoderBlockCache& cache) const;
    std::shared_ptr<nn::MultiHeadAttention> attention1;
    std::shared_ptr<nn::AddNorm> addnorm1;
    std::shared_ptr<nn::MultiHeadAttention> attention2;
    std::shared_ptr<nn::AddNorm> addnorm2;
    std::shared_ptr<nn::PositionWiseFFN> ffn;
    std::shared_ptr<nn::AddNorm> addnorm3;
};

/// Decoder (D2L TransformerDecoder): X = PE(Embedding(tgt)·√C), the blocks, dense (C -> V, bias).
class TransformerDecoder : public nn::Module {
public:
    TransformerDecoder(const TransformerConfig& cfg);
    /// Teacher forcing: tgt (B, Tt) i64 -> hidden (B, Tt, C) (dense not applied); `rows` and
    /// `enc_rows` as TransformerDecoderBlock::forward (hidden is then (N, C)).
    /// Incremental decoding: with `caches` (one per block, TransformerDecoderBlock::forward) tgt
    /// holds the next positions, their positional encodings start at `pe_offset`.
    Tensor forward_hidden(const Tensor& tgt, const Tensor& enc_outputs, const Tensor& enc_valid_lens,
                          const nn::RowPacking* rows = nullptr, const nn::RowPacking* enc_rows = nullptr,
                          std::vector<DecoderBlockCache>* caches = nullptr, int64_t pe_offset = 0);
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::PositionalEncoding> pos_encoding;
    std::vector<std::shared_ptr<TransformerDecoderBlock>> blks;
    std::shared_ptr<nn::Linear> dense;
    int64_t num_hiddens;
};

/// D2L's Transformer (EncoderDecoder with children "encoder" and "decoder"). Initialisation is
/// PyTorch's default (D2L EN): Linear U(±1/√fan_in), Embedding N(0, 1), LayerNorm (1, 0), drawn
/// from the default generator in registration order.
/// D2L EN's book model (src/tgt vocab 194/214, C 256, 2 blocks, 4 heads, F 64) has 1,869,782
/// parameters.
class Transformer : public EncoderDecoder {
public:
    /// Throws qkv::Error when a size is not positive, num_heads does not divide num_hiddens,
    /// or dropout is outside [0, 1).
    explicit Transformer(const TransformerConfig& cfg);

    Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                          const Tensor& dec_input) override;
    /// The pad-free path (EncoderDecoder::forward_hidden_rows): the ordinary encoder and
    /// decoder forwards with a packing (nn::RowPacking) of source positions t < src_valid_len[b]
    /// and target positions up to each sequence's last requested row; position-wise layers run
    /// on the kept rows, attention sees them unpacked to (B, T, C) with zeros at the skipped
    /// positions, which no kept row can attend to (valid_lens and causal masks). Falls back to
    /// forward_hidden + row selection when attention weights are kept or a src_valid_len is 0.
    Tensor forward_hidden_rows(const Tensor& src, const Tensor& src_valid_len, const Tensor& dec_input,
                               const Tensor& rows) override;
    Tensor output_logits(const Tensor& hidden) override;
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override;
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override;
    /// decoder.dense: greedy_next and output_loss fuse it (no (B, V) logits).
    nn::Linear* output_linear() override { return decoder->dense.get(); }
    int64_t src_vocab_size() const override { return cfg_.src_vocab_size; }
    int64_t tgt_vocab_size() const override { return cfg_.tgt_vocab_size; }

    /// Keeps every multi-head attention's weights on each forward (math path) for heatmaps:
    /// encoder->blks[i]->attention->attention_weights() is then (B, H, Ts, Ts).
    void keep_attention_weights(bool on);

    const TransformerConfig& config() const { return cfg_; }
    void set_pe_position_zero_at_inference(bool on) { cfg_.pe_position_zero_at_inference = on; }

    std::shared_ptr<TransformerEncoder> encoder;
    std::shared_ptr<TransformerDecoder> decoder;

private:
    TransformerConfig cfg_;
};

}  // namespace qkv::models
