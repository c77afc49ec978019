// Masked (or D2L EN's unmasked) token cross-entropy computed on the counted positions only.
#include "qkv/train/loss.h"

#include <vector>

#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::train {

namespace {

/// The counted positions of a (B, T) label: flat indices of the non-pad tokens and their ids.
struct NonPad {
    std::vector<int64_t> rows, target;
};

NonPad non_pad(const Tensor& label, int64_t pad) {
    const std::vector<int64_t> lab = label.to_vector<int64_t>();
    NonPad np;
    np.rows.reserve(lab.size());
    np.target.reserve(lab.size());
    for (size_t i = 0; i < lab.size(); ++i)
        if (lab[i] != pad) np.rows.push_back(int64_t(i)), np.target.push_back(lab[i]);
    return np;
}

/// Mean (smoothed) cross-entropy of the output layer on hidden rows h (N, C) against target (N).
Tensor token_loss(models::EncoderDecoder& model, const Tensor& h, const std::vector<int64_t>& target,
                  const Seq2SeqLossOptions& opt) {
    CrossEntropyOptions ce;
    ce.reduction       = Reduction::mean;
    ce.label_smoothing = opt.label_smoothing;
    return model.output_loss(h, from_vector(target, {int64_t(target.size())}), ce);
}

}  // namespace

Seq2SeqLoss seq2seq_loss(models::EncoderDecoder& model, const Tensor& hidden, const Tensor& label,
                         const Seq2SeqLossOptions& opt) {
    QKV_CHECK(opt.pad >= 0, "seq2seq_loss: the <pad> id is not set");
    QKV_CHECK(hidden.defined() && hidden.dim() == 3, "seq2seq_loss: hidden must be (B, T, C), got ",
              hidden.defined() ? hidden.shape() : Shape{});
    QKV_CHECK(label.defined() && label.dtype() == DType::i64 && label.dim() == 2 &&
                  label.size(0) == hidden.size(0) && label.size(1) == hidden.size(1),
              "seq2seq_loss: label must be int64 (B, T) matching hidden ", hidden.shape(), ", got ",
              label.defined() ? label.shape() : Shape{});
    const int64_t B = hidden.size(0), T = hidden.size(1), C = hidden.size(2);
    const NonPad np = non_pad(label, opt.pad);
    Seq2SeqLoss out;
    out.tokens = int64_t(np.rows.size());
    if (opt.on_padding) {
        CrossEntropyOptions ce;
        ce.reduction       = Reduction::mean;
        ce.label_smoothing = opt.label_smoothing;
        out.positions = B * T;
        out.loss = model.output_loss(hidden.reshape({B * T, C}), label.reshape({B * T}), ce);
        return out;
    }
    out.positions = out.tokens;
    if (np.rows.empty()) {
        out.loss = scalar_tensor(0.0);
        return out;
    }
    const Tensor h = index_select(hidden.reshape({B * T, C}), 0,
                                  from_vector(np.rows, {int64_t(np.rows.size())}));  // (N, C)
    out.loss = token_loss(model, h, np.target, opt);
    return out;
}

Seq2SeqLoss seq2seq_loss(models::EncoderDecoder& model, const Tensor& src, const Tensor& src_valid_len,
                         const Tensor& dec_input, const Tensor& label, const Seq2SeqLossOptions& opt) {
    if (opt.on_padding) return seq2seq_loss(model, model.forward_hidden(src, src_valid_len, dec_input), label, opt);
    QKV_CHECK(opt.pad >= 0, "seq2seq_loss: the <pad> id is not set");
    QKV_CHECK(dec_input.defined() && dec_input.dim() == 2, "seq2seq_loss: dec_input must be (B, T), got ",
              dec_input.defined() ? dec_input.shape() : Shape{});
    QKV_CHECK(label.defined() && label.dtype() == DType::i64 && label.shape() == dec_input.shape(),
              "seq2seq_loss: label must be int64 (B, T) matching dec_input ", dec_input.shape(), ", got ",
              label.defined() ? label.shape() : Shape{});
    const NonPad np = non_pad(label, opt.pad);
    Seq2SeqLoss out;
    out.tokens = out.positions = int64_t(np.rows.size());
    if (np.rows.empty()) {
        out.loss = scalar_tensor(0.0);
        return out;
    }
    const Tensor h = model.forward_hidden_rows(src, src_valid_len, dec_input,
                                               from_vector(np.rows, {int64_t(np.rows.size())}));  // (N, C)
    out.loss = token_loss(model, h, np.target, opt);
    return out;
}

}  // namespace qkv::train
