#pragma once
// The autoregressive interface that search (decode/generate.h) programs against: a state made
// from a conditioning input, then one token per step -> the top hidden state, the output layer,
// and a fused greedy choice. The encoder-decoder models (models/encoder_decoder.h: Transformer,
// Bahdanau) and the decoder-only language model (models/lm.h) implement it.
// Dim legend: B batch (decoder rows), Ts conditioning length, C model width, V target vocabulary,
// H heads.
#include <memory>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/tensor.h"

namespace qkv::nn {
class Linear;
}

namespace qkv::models {

/// Attention weights recorded during incremental decoding (for heatmaps), one entry per decoded
/// step and decoder block: self[step][blk] is (B, H, 1, step+1) (the new query against every
/// target position so far), cross[step][blk] is (B, H, 1, Ts) (Bahdanau: cross[step] =
/// {(B, 1, 1, Ts)}, no self entries). Weights are before dropout.
struct DecoderAttentionTrace {
    std::vector<std::vector<Tensor>> self, cross;
};

/// What incremental decoding carries from one step to the next (the encoder outputs, the KV
/// caches or a recurrent state). Owned by the caller; one state per batch.
class DecoderState {
public:
    virtual ~DecoderState() = default;
    /// Rows of the batch in the new order (beam search): index i64 (B'), values in [0, B). Every
    /// cached tensor is gathered along its batch dim; B' may differ from B. Throws on a bad index.
    virtual void reorder(const Tensor& index) = 0;
    /// Number of tokens decoded so far (the next step's position).
    virtual int64_t steps() const = 0;
    /// Batch size B.
    virtual int64_t batch_size() const = 0;
    /// When non-null, decode_step appends the step's attention weights here.
    DecoderAttentionTrace* trace = nullptr;
};

/// A model that generates a sequence token by token. Token ids are i64; hidden states and
/// logits are the model's float dtype (f32 for every model of qkv).
class Autoregressive {
public:
    virtual ~Autoregressive() = default;
    /// A decoding state for B sequences conditioned on src (B, Ts) i64 with valid lengths
    /// src_valid_len (B) i64: the source sentences of an encoder-decoder model (runs the
    /// encoder), the prompts of a language model (TransformerLM::init_state). No autograd
    /// history is needed; callers decode under NoGradGuard. Throws qkv::Error on shapes or
    /// dtypes other than these.
    virtual std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) = 0;
    /// One decoding step before the output layer: tokens (B) i64, the previous output (the
    /// search's <bos> first) -> the top hidden state (B, C). Costs O(steps) per token (cached
    /// keys/values). Advances state.steps() by one. Throws on a state of another model or a token
    /// batch that is not (state.batch_size()) i64.
    virtual Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) = 0;
    /// The output layer: hidden (..., C) -> logits (..., V).
    virtual Tensor output_logits(const Tensor& hidden) = 0;
    /// One decoding step: tokens (B) i64 -> logits (B, V) = output_logits(decode_step_hidden(...)),
    /// without autograd history.
    Tensor decode_step(const Tensor& tokens, DecoderState& state) {
        NoGradGuard ng;
        return output_logits(decode_step_hidden(tokens, state));
    }
    /// Greedy choice from hidden rows (B, C): the id of each row's largest logit (the first one on
    /// ties), never an id with banned[id] != 0 -> i64 (B). banned: empty or V flags. Equals
    /// argmax(output_logits(hidden), 1) with the banned ids removed. With an output_linear() it is
    /// the fused linear_argmax (ops/matmul.h; linear_int8_argmax on int8 weights), which never
    /// holds the (B, V) logits; otherwise it computes the logits. Throws on a banned list of the
    /// wrong length or hidden rows that are not (B, C).
    virtual Tensor greedy_next(const Tensor& hidden, const std::vector<char>& banned);
    /// The output layer when it is one nn::Linear (output_logits(h) = h·Wᵀ + b), else nullptr (the
    /// default): greedy_next and EncoderDecoder::output_loss then fuse it with their reduction.
    virtual nn::Linear* output_linear() { return nullptr; }
    /// V: the number of token ids decode_step's logits cover.
    virtual int64_t tgt_vocab_size() const = 0;
};

}  // namespace qkv::models
