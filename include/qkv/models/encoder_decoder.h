#pragma once
// The encoder–decoder interface (D2L 10.6 "The Encoder–Decoder Architecture", spec §1.10) that
// training (train/) programs against: a teacher-forced forward pass; decoding (decode/) programs
// against its Autoregressive side (models/autoregressive.h: init_state from the source, then
// decode_step_hidden). The Transformer (models/transformer.h) and Bahdanau implement it.
// Dim legend: B batch, Ts source length, Tt target length, C model width, V target vocabulary.
#include <memory>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/tensor.h"
#include "qkv/models/autoregressive.h"
#include "qkv/nn/module.h"
#include "qkv/ops/cross_entropy.h"

namespace qkv::models {

namespace detail {
/// Throws qkv::Error unless rows is 1-D i64, strictly increasing, inside [0, total).
void check_hidden_rows(const Tensor& rows, int64_t total);
}  // namespace detail

/// A sequence-to-sequence model: encoder (source ids -> states) and decoder (target prefix +
/// encoder states -> next-token logits). Inputs are i64 token ids; valid lengths are i64 (B).
class EncoderDecoder : public nn::Module, public Autoregressive {
public:
    /// Teacher-forced pass (D2L EncoderDecoder.forward): src (B, Ts), src_valid_len (B),
    /// dec_input (B, Tt) (<bos> + target[:-1]) -> decoder hidden states (B, Tt, C), before the
    /// output layer. Causally masked: position t sees target positions <= t only.
    virtual Tensor forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                                  const Tensor& dec_input) = 0;
    /// The output layer: hidden (..., C) -> logits (..., V). Separate so that a loss can apply it
    /// to the positions it counts only (the anchor skips <pad> rows; same loss, less work).
    Tensor output_logits(const Tensor& hidden) override = 0;
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

    /// Autoregressive::init_state with the source: src (B, Ts) i64, src_valid_len (B) i64. Runs
    /// the encoder and prepares incremental decoding (D2L init_state).
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override = 0;
    /// Autoregressive::decode_step_hidden: the decoder on one more target position.
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override = 0;
    /// The training loss of hidden rows (N, C) against target (N) i64:
    /// cross_entropy(output_logits(hidden), target, Tensor(), opt), a scalar (reduction mean or
    /// sum) or (N) (none). With an output_linear() it is the fused linear_cross_entropy of
    /// ops/cross_entropy.h (one (N, V) buffer instead of the logits and their gradient, no
    /// separate bias and column-sum passes); otherwise it computes the logits. Throws as
    /// cross_entropy does.
    virtual Tensor output_loss(const Tensor& hidden, const Tensor& target, const CrossEntropyOptions& opt);

    virtual int64_t src_vocab_size() const = 0;
    int64_t tgt_vocab_size() const override = 0;
};

/// Decoding without a cache, for checking one: each step runs the model's teacher-forced
/// forward_hidden over the whole target prefix so far (O(t²) per token) and returns its last
/// position, through the same Autoregressive interface the search uses. greedy_next and
/// output_logits are the model's. The model must outlive this object.
class TeacherForcedDecoding : public Autoregressive {
public:
    explicit TeacherForcedDecoding(EncoderDecoder& model) : model_(model) {}
    /// Keeps src (B, Ts) i64 and src_valid_len (B) i64 (the encoder reruns at every step).
    std::unique_ptr<DecoderState> init_state(const Tensor& src, const Tensor& src_valid_len) override;
    /// tokens (B) i64 -> forward_hidden(src, src_valid_len, prefix + tokens)[:, -1] (B, C).
    Tensor decode_step_hidden(const Tensor& tokens, DecoderState& state) override;
    Tensor output_logits(const Tensor& hidden) override { return model_.output_logits(hidden); }
    Tensor greedy_next(const Tensor& hidden, const std::vector<char>& banned) override {
        return model_.greedy_next(hidden, banned);
    }
    int64_t tgt_vocab_size() const override { return model_.tgt_vocab_size(); }

private:
    EncoderDecoder& model_;
};

}  // namespace qkv::models
