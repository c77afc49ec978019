// Translation for qkv serve (serve/translator.h).
#include "qkv/serve/translator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/beam_search.h"
#include "qkv/decode/greedy.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/translation_data.h"

namespace qkv::serve {
namespace {

bool is_blank(const std::vector<std::string>& tokens) {
    for (const auto& t : tokens)
        for (unsigned char ch : t)
            if (!std::isspace(ch)) return false;
    return true;
}

/// Switches a Transformer's attention-weight keeping on for one scope (off again on a throw).
struct KeepWeights {
    models::Transformer* t;
    explicit KeepWeights(models::Transformer* tr) : t(tr) {
        if (t) t->keep_attention_weights(true);
    }
    ~KeepWeights() {
        if (t) t->keep_attention_weights(false);
    }
    KeepWeights(const KeepWeights&) = delete;
    KeepWeights& operator=(const KeepWeights&) = delete;
};

/// Teacher-forced pass of one hypothesis over its source row as the decoder saw it (padded to
/// num_steps: a Bahdanau encoder runs over the pads, so its states depend on them): the sum of
/// its units' log-probabilities (<eos> counted when it was emitted) and, when att is given, the
/// decoder's cross-attention weights over the valid source positions.
double teacher_force(train::ModelDir& m, const std::vector<int64_t>& src_row, int64_t valid_len,
                     const std::vector<int64_t>& tokens, bool finished, CrossAttention* att) {
    NoGradGuard no_grad;
    std::vector<int64_t> target = tokens;
    if (finished) target.push_back(m.tgt_vocab.eos());
    const int64_t Tt = int64_t(target.size()), Tp = int64_t(src_row.size()), Ts = valid_len;
    if (Tt == 0) return 0;
    std::vector<int64_t> dec_in{m.tgt_vocab.bos()};
    for (int64_t i = 0; i + 1 < Tt; ++i) dec_in.push_back(target[size_t(i)]);
    models::Transformer* tr = att ? m.transformer() : nullptr;
    QKV_CHECK(!att || tr, "serve: attention weights are available for Transformer models only");
    KeepWeights keep(tr);
    const Tensor hidden = m.model->forward_hidden(from_vector(src_row, {1, Tp}), from_vector<int64_t>({Ts}, {1}),
                                                  from_vector(dec_in, {1, Tt}));
    const Tensor lp = log_softmax(m.model->output_logits(hidden), -1).contiguous();  // (1, Tt, V)
    const int64_t V = lp.shape().back();
    const auto v = lp.to_vector<float>();
    double sum = 0;
    for (int64_t t = 0; t < Tt; ++t) sum += double(v[size_t(t * V + target[size_t(t)])]);
    if (att) {
        const int64_t L = int64_t(tr->decoder->blks.size());
        const int64_t H = tr->config().num_heads;
        att->layers = L, att->heads = H;
        att->source = m.src_vocab.decode(std::vector<int64_t>(src_row.begin(), src_row.begin() + Ts));
        att->target = m.tgt_vocab.decode(target);
        att->weights.assign(size_t(L * H * Tt * Ts), 0.f);
        for (int64_t l = 0; l < L; ++l) {
            const Tensor w = tr->decoder->blks[size_t(l)]->attention2->attention_weights();  // (1, H, Tt, Tk)
            QKV_CHECK(w.defined(), "serve: the decoder's attention weights were not kept");
            const auto wv = w.contiguous().to_vector<float>();
            // Tk is Tp, or Ts when the model drops the padded columns; the padded keys have weight 0.
            const int64_t Tk = int64_t(wv.size()) / std::max<int64_t>(1, H * Tt);
            QKV_CHECK(int64_t(wv.size()) == H * Tt * Tk && Tk >= Ts, "serve: cross-attention weights of ", wv.size(),
                      " values for ", H, " heads, ", Tt, " target and ", Ts, " source positions");
            for (int64_t r = 0; r < H * Tt; ++r)
                std::copy(wv.begin() + r * Tk, wv.begin() + r * Tk + Ts, att->weights.begin() + (l * H * Tt + r) * Ts);
        }
    }
    return sum;
}

/// GNMT length penalty lp(n) = ((5 + n) / 6)^alpha (decode/beam_search.h).
double gnmt_score(double log_prob, int64_t n, double alpha) {
    return log_prob / std::pow((5.0 + double(n)) / 6.0, alpha);
}

}  // namespace

ResolvedSettings resolve_settings(const train::ModelDir& m, const DecodeSettings& s, bool detail) {
    ResolvedSettings r;
    r.options.beam           = s.beam > 0 ? s.beam : m.config.decode.beam;
    r.options.max_len        = s.max_len > 0 ? s.max_len : m.config.decode.max_len;
    r.options.length_penalty = s.length_penalty >= 0 ? s.length_penalty : m.config.decode.length_penalty;
    r.options.no_unk         = s.no_unk;
    r.n_best                 = s.n_best;
    r.attention              = s.attention;
    r.detail                 = detail || s.attention || s.n_best > 1;
    QKV_CHECK(r.n_best <= r.options.beam, "\"n_best\" (", r.n_best, ") must not exceed the beam size (",
              r.options.beam, ")");
    QKV_CHECK(!r.attention || m.transformer() != nullptr,
              "\"attention\" is available for Transformer models only (this model is ",
              train::model_kind_name(m.config.architecture), ")");
    return r;
}

std::vector<SentenceResult> translate_sentences(train::ModelDir& m, const std::vector<std::string>& sentences,
                                                const ResolvedSettings& s) {
    std::vector<SentenceResult> out(sentences.size());
    std::vector<std::vector<std::string>> src;
    std::vector<size_t> sentence_of;  // row of src -> sentence
    for (size_t i = 0; i < sentences.size(); ++i) {
        auto tokens = data::tokenize_nmt(sentences[i]);
        if (is_blank(tokens)) continue;
        sentence_of.push_back(i);
        src.push_back(std::move(tokens));
    }
    if (src.empty()) return out;
    if (!s.detail) {
        const auto hyp = train::translate_tokens(m, src, s.options);
        for (size_t r = 0; r < src.size(); ++r) out[sentence_of[r]].translation = train::join_tokens(hyp[r]);
        return out;
    }
    // The steps of train::translate_tokens, keeping the ids (rows do not depend on their
    // batch-mates: padding is masked).
    m.model->eval();
    const data::SeqArray a = train::encode_sources(train::source_units(m, src), m.src_vocab, m.config.data.num_steps);
    const Tensor S  = from_vector(a.ids, {a.rows, a.num_steps});
    const Tensor VL = from_vector(a.valid_len, {a.rows});
    const auto& o   = s.options;
    std::vector<std::vector<decode::Hypothesis>> hyps(src.size());
    if (o.beam == 1) {
        decode::GreedyOptions g;
        g.bos     = m.tgt_vocab.bos();
        g.eos     = m.tgt_vocab.eos();
        g.max_len = o.max_len;
        if (o.no_unk) g.banned = {m.tgt_vocab.unk()};
        const auto ids = decode::greedy_decode(*m.model, S, VL, g);
        for (size_t r = 0; r < ids.size(); ++r) {
            decode::Hypothesis h;
            h.tokens   = ids[r];
            h.finished = int64_t(ids[r].size()) < o.max_len;  // max_len counts the <eos>
            hyps[r]    = {h};
        }
    } else {
        decode::BeamOptions b;
        b.beam_size      = o.beam;
        b.bos            = m.tgt_vocab.bos();
        b.eos            = m.tgt_vocab.eos();
        b.max_len        = o.max_len;
        b.length_penalty = o.length_penalty;
        b.num_return     = s.n_best;
        if (o.no_unk) b.banned = {m.tgt_vocab.unk()};
        hyps = decode::beam_search(*m.model, S, VL, b);
    }
    for (size_t r = 0; r < src.size(); ++r) {
        SentenceResult& res = out[sentence_of[r]];
        const std::vector<int64_t> src_row(a.ids.begin() + int64_t(r) * a.num_steps,
                                           a.ids.begin() + int64_t(r + 1) * a.num_steps);
        for (size_t k = 0; k < hyps[r].size(); ++k) {
            const decode::Hypothesis& h = hyps[r][k];
            Hypothesis out_h;
            out_h.units    = m.tgt_vocab.decode(h.tokens);
            out_h.text     = train::join_tokens(train::target_words(m, out_h.units));
            out_h.finished = h.finished;
            const bool want_att = s.attention && k == 0;
            if (o.beam == 1 || want_att) {
                const double lp = teacher_force(m, src_row, a.valid_len[r], h.tokens, h.finished, want_att ? &res.attention : nullptr);
                if (o.beam == 1) {
                    out_h.log_prob = lp;
                    out_h.score = gnmt_score(lp, int64_t(h.tokens.size()) + (h.finished ? 1 : 0), o.length_penalty);
                }
            }
            if (o.beam > 1) {
                out_h.log_prob = h.log_prob;
                out_h.score    = h.score;
            }
            res.hypotheses.push_back(std::move(out_h));
        }
        if (!res.hypotheses.empty()) res.translation = res.hypotheses.front().text;
    }
    return out;
}

}  // namespace qkv::serve
