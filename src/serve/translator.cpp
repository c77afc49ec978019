// Translation for qkv serve (serve/translator.h).
#include "qkv/serve/translator.h"

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

std::vector<SentenceResult> translate_sentences(runtime::Translator& t, const std::vector<std::string>& sentences,
                                                const ResolvedSettings& s) {
    std::vector<SentenceResult> out(sentences.size());
    const MatmulPrecisionGuard precision(t.precision());
    runtime::Translator::Lease m = t.borrow();
    // Plain translations: each text is cut into sentences (data::split_sentences), translated one
    // by one and put back in its layout. Hypotheses, scores and attention are per text.
    std::vector<data::SentenceSplit> layout(sentences.size());
    std::vector<std::string> pieces_of_text;  // the sentences to translate, text by text
    std::vector<size_t> text_of;              // sentence -> text
    for (size_t i = 0; i < sentences.size(); ++i) {
        if (s.detail) {
            pieces_of_text.push_back(sentences[i]);
            text_of.push_back(i);
            continue;
        }
        layout[i] = data::split_sentences(sentences[i]);
        for (const auto& x : layout[i].sentences) {
            pieces_of_text.push_back(x.text);
            text_of.push_back(i);
        }
    }
    std::vector<std::vector<std::string>> src;
    std::vector<size_t> sentence_of;  // row of src -> sentence
    auto words = runtime::tokenize_sentences(*m, pieces_of_text);
    for (size_t i = 0; i < pieces_of_text.size(); ++i) {
        if (words[i].empty()) continue;
        sentence_of.push_back(i);
        src.push_back(std::move(words[i]));
    }
    if (src.empty()) return out;
    runtime::TranslateOptions o = s.options;
    if (s.detail && o.beam > 1) o.num_hypotheses = s.n_best;
    const auto nbest = runtime::translate_nbest(*m, src, o);
    if (!s.detail) {
        std::vector<std::vector<std::string>> per_text(sentences.size());
        std::vector<std::string> translated(pieces_of_text.size());
        for (size_t r = 0; r < src.size(); ++r)
            translated[sentence_of[r]] = nbest[r].empty() ? "" : runtime::join_tokens(nbest[r].front().words);
        for (size_t k = 0; k < pieces_of_text.size(); ++k) per_text[text_of[k]].push_back(std::move(translated[k]));
        for (size_t i = 0; i < sentences.size(); ++i) {
            if (layout[i].sentences.empty()) continue;
            const std::string text = data::join_sentences(layout[i], per_text[i]);
            const size_t b = text.find_first_not_of(" \t\n\r"), e = text.find_last_not_of(" \t\n\r");
            out[i].translation = b == std::string::npos ? "" : text.substr(b, e - b + 1);
        }
        return out;
    }
    const auto units = runtime::source_units(*m, src);
    for (size_t r = 0; r < src.size(); ++r) add_hypotheses(*m, units[r], nbest[r], s, out[text_of[sentence_of[r]]]);
    return out;
}

}  // namespace qkv::serve
