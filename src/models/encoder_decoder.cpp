// EncoderDecoder's defaults: forward_hidden_rows (the full teacher-forced pass, then the rows) and
// greedy_next (fused with an output_linear(), else the logits, then argmax_allowed: the first
// allowed maximum per row) and output_loss (fused, else the logits, then cross_entropy).
#include "qkv/models/encoder_decoder.h"

#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/nn/layers.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::models {

namespace detail {

void check_hidden_rows(const Tensor& rows, int64_t total) {
    QKV_CHECK(rows.defined() && rows.dtype() == DType::i64 && rows.dim() == 1,
              "forward_hidden_rows: rows must be 1-D int64, got ",
              rows.defined() ? rows.shape() : Shape{});
    const std::vector<int64_t> r = rows.to_vector<int64_t>();
    for (size_t i = 0; i < r.size(); ++i) {
        QKV_CHECK(r[i] >= 0 && r[i] < total, "forward_hidden_rows: row ", r[i], " at position ", i,
                  " out of range [0, ", total, ")");
        QKV_CHECK(i == 0 || r[i] > r[i - 1], "forward_hidden_rows: rows must be strictly increasing, "
                  "got ", r[i - 1], " then ", r[i]);
    }
}

}  // namespace detail

Tensor EncoderDecoder::forward_hidden_rows(const Tensor& src, const Tensor& src_valid_len,
                                           const Tensor& dec_input, const Tensor& rows) {
    const Tensor h = forward_hidden(src, src_valid_len, dec_input);  // (B, Tt, C)
    const int64_t B = h.size(0), T = h.size(1), C = h.size(2);
    detail::check_hidden_rows(rows, B * T);
    return index_select(h.reshape({B * T, C}), 0, rows);
}

Tensor Autoregressive::greedy_next(const Tensor& hidden, const std::vector<char>& banned) {
    if (nn::Linear* d = output_linear()) {
        if (const Int8Weight* q = d->int8_weight())  // int8 inference
            return linear_int8_argmax(hidden, *q, d->bias, banned);
        return linear_argmax(hidden, d->weight, d->bias, banned);
    }
    NoGradGuard ng;
    const Tensor logits = output_logits(hidden);  // (B, V)
    QKV_CHECK(logits.dim() == 2, "greedy_next: hidden must be (B, C), got ", hidden.shape());
    const int64_t V = logits.size(1);
    QKV_CHECK(banned.empty() || int64_t(banned.size()) == V, "greedy_next: banned has ",
              banned.size(), " flags, expected 0 or V = ", V);
    return argmax_allowed(logits, banned);  // linear_argmax's rule, on the logits
}

Tensor EncoderDecoder::output_loss(const Tensor& hidden, const Tensor& target, const CrossEntropyOptions& opt) {
    if (nn::Linear* d = output_linear()) return linear_cross_entropy(hidden, d->weight, d->bias, target, opt);
    return cross_entropy(output_logits(hidden), target, Tensor(), opt);
}

// ---- TeacherForcedDecoding ----

namespace {

/// The source and the target prefix decoded so far.
class PrefixState : public DecoderState {
public:
    Tensor src, src_valid_len;  // (B, Ts), (B)
    Tensor prefix;              // (B, t) i64; undefined before the first step
    int64_t t = 0;

    void reorder(const Tensor& index) override {
        QKV_CHECK(index.defined() && index.dim() == 1 && index.dtype() == DType::i64,
                  "DecoderState::reorder: index must be int64 (B'), got ", index.defined() ? index.shape() : Shape{});
        src           = index_select(src, 0, index).contiguous();
        src_valid_len = index_select(src_valid_len, 0, index).contiguous();
        if (prefix.defined()) prefix = index_select(prefix, 0, index).contiguous();
    }
    int64_t steps() const override { return t; }
    int64_t batch_size() const override { return src.size(0); }
};

}  // namespace

std::unique_ptr<DecoderState> TeacherForcedDecoding::init_state(const Tensor& src, const Tensor& src_valid_len) {
    QKV_CHECK(src.defined() && src.dim() == 2 && src.dtype() == DType::i64 && src_valid_len.defined() &&
                  src_valid_len.dim() == 1 && src_valid_len.size(0) == src.size(0),
              "TeacherForcedDecoding: src must be int64 (B, Ts) and src_valid_len (B)");
    auto st           = std::make_unique<PrefixState>();
    st->src           = src.contiguous();
    st->src_valid_len = src_valid_len.contiguous();
    return st;
}

Tensor TeacherForcedDecoding::decode_step_hidden(const Tensor& tokens, DecoderState& state) {
    auto* st = dynamic_cast<PrefixState*>(&state);
    QKV_CHECK(st != nullptr, "TeacherForcedDecoding: the state was not made by its init_state");
    const int64_t B = st->batch_size();
    QKV_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.size(0) == B && tokens.dtype() == DType::i64,
              "TeacherForcedDecoding: tokens must be int64 (B) with B = ", B);
    NoGradGuard ng;
    const Tensor col = tokens.reshape({B, 1});
    st->prefix       = st->prefix.defined() ? concat({st->prefix, col}, 1).contiguous() : col.contiguous();
    const Tensor h   = model_.forward_hidden(st->src, st->src_valid_len, st->prefix).select(1, st->t);
    st->t += 1;
    return h;
}

}  // namespace qkv::models
