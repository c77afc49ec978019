#pragma once
// Sequence-to-sequence training loss: token cross-entropy over the real target positions
// (D2L EN seq2seq chapter's masked loss, spec §1.12; the quality anchor's loss), or over every
// position including <pad> (what D2L EN's Transformer section actually trains on).
// Dim legend: B batch, T target length, C model width, V target vocabulary.
#include <cstdint>

#include "qkv/models/encoder_decoder.h"

namespace qkv::train {

struct Seq2SeqLossOptions {
    int64_t pad = -1;             // label id of <pad> (required)
    /// false (default): mean CE over label positions != pad; <eos> counts. true: D2L EN's
    /// d2l.Seq2Seq loss, mean over all B·T positions, pads included (spec §1.12, pitfall 1).
    bool on_padding = false;
    /// Label smoothing ε (Szegedy et al. 2016): target (1-ε)·onehot + ε/V. 0 = off.
    double label_smoothing = 0.0;
};

struct Seq2SeqLoss {
    Tensor loss;         // 0-d f32, differentiable
    int64_t tokens = 0;  // non-pad label positions in the batch (the throughput unit)
    int64_t positions = 0;  // positions the mean runs over (tokens, or B·T with on_padding)
};

/// hidden (B, T, C): the model's forward_hidden output; label (B, T) i64. The output layer is
/// applied only to the positions the loss counts (the anchor's trick: same loss and gradients as
/// masking full logits, less work). A batch whose labels are all pad gives loss 0 with no
/// gradient. Throws qkv::Error when pad is unset or shapes disagree.
Seq2SeqLoss seq2seq_loss(models::EncoderDecoder& model, const Tensor& hidden, const Tensor& label,
                         const Seq2SeqLossOptions& opt);

/// The same loss from the model's inputs: src (B, Ts) i64, src_valid_len (B) i64, dec_input
/// (B, T) i64, label (B, T) i64. Masked (on_padding false): the model computes only the hidden
/// rows the loss counts (EncoderDecoder::forward_hidden_rows: the Transformer skips <pad>
/// positions in every block; same loss and gradients as seq2seq_loss(model,
/// model.forward_hidden(...), ...) up to float rounding, other dropout draws). on_padding:
/// exactly seq2seq_loss(model, model.forward_hidden(...), label, opt). Throws like the above.
Seq2SeqLoss seq2seq_loss(models::EncoderDecoder& model, const Tensor& src, const Tensor& src_valid_len,
                         const Tensor& dec_input, const Tensor& label, const Seq2SeqLossOptions& opt);

}  // namespace qkv::train
