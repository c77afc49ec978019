// Translation for qkv serve (serve/translator.h).
#include "qkv/serve/translator.h"

#include <algorithm>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/data/text.h"
#include "qkv/runtime/text.h"

namespace qkv::serve {

ResolvedSettings resolve_settings(const runtime::ModelDir& m, const DecodeSettings& s, bool detail) {
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
              runtime::model_kind_name(m.config.architecture), ")");
    return r;
}

namespace {

/// The hypotheses of one sentence with their scores: a beam's from the search; a greedy one's
/// log-probability from a teacher-forced pass (the greedy path keeps none), which also gives the
/// best hypothesis's cross-attention when asked.
void add_hypotheses(runtime::ModelDir& m, const std::vector<std::string>& src_units,
                    const std::vector<runtime::Translation>& nbest, const ResolvedSettings& s, SentenceResult& res) {
    const auto& o = s.options;
    const runtime::SourceRow row = runtime::encode_source_row(m, src_units);
    for (size_t k = 0; k < nbest.size(); ++k) {
        const runtime::Translation& t = nbest[k];
        Hypothesis out_h;
        out_h.units    = m.tgt_vocab.decode(t.ids);
        out_h.text     = runtime::join_tokens(t.words);
        out_h.finished = t.finished;
        out_h.log_prob = t.log_prob;
        out_h.score    = t.score;
        const bool want_att = s.attention && k == 0;
        if (o.beam == 1 || want_att) {
            std::vector<int64_t> target = t.ids;
            if (t.finished) target.push_back(m.tgt_vocab.eos());
            double lp = 0;
            for (double v : runtime::teacher_force(m, row.ids, row.valid_len, target, want_att ? &res.attention : nullptr))
                lp += v;
            if (o.beam == 1) {
                out_h.log_prob = lp;
                out_h.score    = runtime::gnmt_score(lp, int64_t(target.size()), o.length_penalty);
            }
        }
        res.hypotheses.push_back(std::move(out_h));
    }
    if (!res.hypotheses.empty()) res.translation = res.hypotheses.front().text;
}

}  // namespace

namespace {

/// A text's result from its sentences' results (each from add_hypotheses): the translation and the
/// k-th hypothesis join the sentences' in the text's layout (log-probabilities and scores summed,
/// units concatenated); the attention is block-diagonal: each sentence's output units over its own
/// source units, 0 elsewhere.
SentenceResult join_results(const std::vector<SentenceResult>& parts, const data::SentenceSplit& layout) {
    SentenceResult out;
    std::vector<std::string> best;
    std::vector<std::vector<Hypothesis>> lists;
    for (const auto& p : parts) best.push_back(p.translation), lists.push_back(p.hypotheses);
    out.translation = runtime::join_translations(layout, best);
    out.hypotheses  = runtime::join_sentence_nbest(lists, layout);
    bool att = !parts.empty();
    for (const auto& p : parts) att = att && !p.attention.source.empty();
    if (!att) return out;
    CrossAttention& a = out.attention;
    a.layers = parts[0].attention.layers, a.heads = parts[0].attention.heads;
    for (const auto& p : parts) {
        a.source.insert(a.source.end(), p.attention.source.begin(), p.attention.source.end());
        a.target.insert(a.target.end(), p.attention.target.begin(), p.attention.target.end());
    }
    const size_t Tt = a.target.size(), Ts = a.source.size(), LH = size_t(a.layers * a.heads);
    a.weights.assign(LH * Tt * Ts, 0.f);
    size_t r0 = 0, c0 = 0;
    for (const auto& p : parts) {
        const size_t tt = p.attention.target.size(), ts = p.attention.source.size();
        for (size_t lh = 0; lh < LH; ++lh)
            for (size_t i = 0; i < tt; ++i)
                for (size_t j = 0; j < ts; ++j)
                    a.weights[(lh * Tt + r0 + i) * Ts + c0 + j] = p.attention.weights[(lh * tt + i) * ts + j];
        r0 += tt, c0 += ts;
    }
    return out;
}

}  // namespace

std::vector<SentenceResult> translate_sentences(runtime::Translator& t, const std::vector<std::string>& sentences,
                                                const ResolvedSettings& s) {
    std::vector<SentenceResult> out(sentences.size());
    const MatmulPrecisionGuard precision(t.precision());
    runtime::Translator::Lease m = t.borrow();
    // Each text is cut into sentences (runtime::split_text: over-long ones cut between words), each
    // translated on its own (a model trained on single sentences leaves later ones out of a whole
    // text), and put back in its layout; hypotheses, scores and attention join the sentences'
    // (join_results).
    std::vector<data::SentenceSplit> layout(sentences.size());
    std::vector<std::string> parts;   // the sentences to translate, text by text
    std::vector<size_t> text_of;      // sentence -> text
    for (size_t i = 0; i < sentences.size(); ++i) {
        layout[i] = runtime::split_text(*m, sentences[i]);
        for (const auto& x : layout[i].sentences) {
            parts.push_back(x.text);
            text_of.push_back(i);
        }
    }
    std::vector<std::vector<std::string>> src;
    std::vector<size_t> row_of(parts.size(), std::string::npos);  // sentence -> row of src
    auto words = runtime::tokenize_sentences(*m, parts);
    for (size_t i = 0; i < parts.size(); ++i) {
        if (words[i].empty()) continue;
        row_of[i] = src.size();
        src.push_back(std::move(words[i]));
    }
    if (src.empty()) return out;
    runtime::TranslateOptions o = s.options;
    if (s.detail && o.beam > 1) o.num_hypotheses = s.n_best;
    const auto nbest = runtime::translate_nbest(*m, src, o);
    const auto units = s.detail ? runtime::source_units(*m, src) : std::vector<std::vector<std::string>>{};
    std::vector<std::vector<SentenceResult>> per_text(sentences.size());
    for (size_t k = 0; k < parts.size(); ++k) {
        SentenceResult r;
        const size_t row = row_of[k];
        if (row != std::string::npos) {
            if (!s.detail)
                r.translation = nbest[row].empty() ? "" : runtime::join_tokens(nbest[row].front().words);
            else
                add_hypotheses(*m, units[row], nbest[row], s, r);
        }
        per_text[text_of[k]].push_back(std::move(r));
    }
    for (size_t i = 0; i < sentences.size(); ++i) {
        if (!per_text[i].empty()) out[i] = join_results(per_text[i], layout[i]);
        out[i].sentences = int64_t(layout[i].sentences.size());
    }
    return out;
}

}  // namespace qkv::serve
