#pragma once
// The encoder–decoder interface (D2L 10.6 "The Encoder–Decoder Architecture", spec §1.10) that
// training (train/) and decoding (decode/) program against: a teacher-forced forward pass, and
// incremental decoding from a DecoderState. The Transformer (models/transformer.h) implements it.
// Dim legend: B batch, Ts source length, Tt target length, C model width, V target vocabulary.
#include <memory>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/module.h"
#include "qkv/ops/cross_entropy.h"

namespace qkv::models {

/// Attention weights recorded during incremental decoding (for heatmaps), one entry per decoded
/// step and decoder block: self[step][blk] is (B, H, 1, step+1) (the new query against every
/// target position so far), cross[step][blk] is (B, H, 1, Ts). Weights are before dropout.
struct DecoderAttentionTrace {
    std::vector<std::vector<Tensor>> self, cross;
};

/// What incremental decoding carries from one step to the next: the encoder outputs and whatever
/// the decoder caches. Owned by the caller; one state per batch of sources.
class DecoderState {
public:
    virtual ~DecoderState() = default;
    /// Rows of the batch in the new order (beam search): index i64 (B'), values in [0, B). Every
    /// cached tensor is gathered along its batch dim; B' may differ from B. Throws on a bad index.
    virtual void reorder(const Tensor& index) = 0;
    /// Number of target tokens decoded so far (the next step's position).
    virtual int64_t steps() const = 0;
    /// Batch size B.
    virtual int64_t batch_size() const = 0;
    /// When non-null, decode_step appends the step's attention weights here.
    DecoderAttentionTrace* trace = nullptr;
};

namespace detail {
/// Throws qkv::Error unless rows is 1-D i64, strictly increasing, inside [0, total).
void check_hidden_rows(const Tensor& rows, int64_t total);
}  // namespace detail

/// A sequence-to-sequence model: encoder (source ids -> states) and decoder (target prefix +
/// encoder states -> next-token logits). Inputs are i64 token ids; valid lengths are i64 (B).
class EncoderDecoder : public nn::Module {
public:
    /// Teacher-forced pass (D2L EncoderDecoder.forward): src (B, Ts), src_valid_len (B),
    /// dec_input (B, Tt) (<bos> + target[:-1]) -> decoder hidden states (B, Tt, C), before the
    /// output layer. Causally masked: position t sees target positions <= t only.
    virtual Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                                  const Tensor& dec_input) = 0;
    /// The output layer: hidden (..., C) -> logits (..., V). Separate so that a loss can apply it
    /// to the positions it counts only (the anchor skips <pad> rows; same loss, less work).
    virtual Tensor output_logits(const Tensor& hidden) = 0;
    /// forward_hidden's rows `rows` only: rows (N) i64, strictly increasing flat positions
    /// b·Tt + t -> (N, C) = forward_hidden(...).reshape({B·Tt, C}) rows `rows`, the same values
    /// and gradients (up to float rounding). A model may skip work that cannot reach those rows
    /// (the Transformer runs its blocks on the source positions inside src_valid_len and on each
    /// target prefix up to its last requested position); with dropout active its random draws then
    /// differ from forward_hidden's. This default runs forward_hidden and selects the rows.
    /// Throws qkv::Error when rows is not 1-D i64, not increasing or out of range.
    virtual Tensor forward_hidden_rows(const Tensor& src, const Tensor& src_valid_len,
                                       const Tensor& dec_input, const Tensor& rows);
    /// forward_hidden then output_logits: (B, Tt, V).
    Tensor forward(const Tensor& src, const Tensor& src_valid_len, const Tensor& dec_input) {
        return output_logits(forward_hidden(src, src_valid_len, dec_input));
    }

    /// Runs the encoder and prepares incremental decoding (D2L init_state). No autograd history
    /// is needed; callers run decoding under NoGradGuard.
    virtual std::unique_ptr<DecoderState> init_state(const Tensor& src,
                                                     const Tensor& src_valid_len) = 0;
    /// One decoding step before the output layer: tokens (B) i64, the previous output (<bos>
    /// first) -> the decoder's top hidden state (B, C). Costs O(steps) per token (cached
    /// keys/values). Advances state.steps() by one. Throws on a state of another model or a
    /// token batch that is not (state.batch_size()) i64.
    virtual Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) = 0;
    /// One decoding step: tokens (B) i64 -> logits (B, V) = output_logits(decode_step_hidden(...)),
    /// without autograd history.
    Tensor decode_step(const Tensor& tokens, DecoderState& state) {
        NoGradGuard ng;
        return output_logits(decode_step_hidden(tokens, state));
    }
    /// Greedy choice from decoder hidden rows (B, C): the id of each row's largest logit (the
    /// first one on ties), never an id with banned[id] != 0 -> i64 (B). banned: empty or V flags.
    /// Equals argmax(output_logits(hidden), 1) with the banned ids removed. This default computes
    /// the logits; a model whose output layer is one Linear uses the fused linear_argmax
    /// (ops/matmul.h), which never holds the (B, V) logits. Throws on a banned list of the wrong
    /// length.
    virtual Tensor greedy_next(const Tensor& hidden, const std::vector<char>& banned);
    /// The training loss of hidden rows (N, C) against target (N) i64:
    /// cross_entropy(output_logits(hidden), target, Tensor(), opt), a scalar (reduction mean or
    /// sum) or (N) (none). This default computes the logits; a model whose output layer is one
    /// Linear uses the fused linear_cross_entropy of ops/cross_entropy.h (one (N, V) buffer
    /// instead of the logits and their gradient, no separate bias and column-sum passes). Throws
    /// as cross_entropy does.
    virtual Tensor output_loss(const Tensor& hidden, const Tensor& target, const CrossEntropyOptions& opt);

    virtual int64_t src_vocab_size() const = 0;
    virtual int64_t tgt_vocab_size() const = 0;
};

}  // namespace qkv::models
