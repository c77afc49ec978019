// Masked (or D2L EN's unmasked) token cross-entropy computed on the counted positions only.
#include "qkv/train/loss.h"

#include <vector>

#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::train {

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
    const std::vector<int64_t> lab = label.to_vector<int64_t>();
    std::vector<int64_t> rows;
    rows.reserve(lab.size());
    for (int64_t i = 0; i < B * T; ++i)
        if (lab[size_t(i)] != opt.pad) rows.push_back(i);

    CrossEntropyOptions ce;
    ce.reduction       = Reduction::mean;
    ce.label_smoothing = opt.label_smoothing;
    Seq2SeqLoss out;
    out.tokens = int64_t(rows.size());
    if (opt.on_padding) {
        out.positions = B * T;
        out.loss = cross_entropy(model.output_logits(hidden.reshape({B * T, C})), label.reshape({B * T}),
                                 Tensor(), ce);
        return out;
    }
    out.positions = out.tokens;
    if (rows.empty()) {
        out.loss = scalar_tensor(0.0);
        return out;
    }
    const Tensor idx = from_vector(rows, {int64_t(rows.size())});
    std::vector<int64_t> target(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) target[i] = lab[size_t(rows[i])];
    const Tensor h = index_select(hidden.reshape({B * T, C}), 0, idx);  // (N, C)
    out.loss = cross_entropy(model.output_logits(h), from_vector(target, {int64_t(rows.size())}),
                             Tensor(), ce);
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
    const std::vector<int64_t> lab = label.to_vector<int64_t>();
    std::vector<int64_t> rows, target;
    for (size_t i = 0; i < lab.size(); ++i)
        if (lab[i] != opt.pad) rows.push_back(int64_t(i)), target.push_back(lab[i]);
    Seq2SeqLoss out;
    out.tokens = out.positions = int64_t(rows.size());
    if (rows.empty()) {
        out.loss = scalar_tensor(0.0);
        return out;
    }
    const int64_t n = int64_t(rows.size());
    const Tensor h = model.forward_hidden_rows(src, src_valid_len, dec_input, from_vector(rows, {n}));  // (N, C)
    CrossEntropyOptions ce;
    ce.reduction       = Reduction::mean;
    ce.label_smoothing = opt.label_smoothing;
    out.loss = cross_entropy(model.output_logits(h), from_vector(target, {n}), Tensor(), ce);
    return out;
}

}  // namespace qkv::train
