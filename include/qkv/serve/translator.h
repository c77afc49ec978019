#pragma once
// Translation of raw sentences for `qkv serve` with runtime::Translator, on the code path of
// `qkv translate` (runtime::tokenize_sentences, then runtime::translate_nbest); when a request asks
// for n-best hypotheses, scores or attention, the hypotheses' ids are kept and a greedy one is
// scored, and the best one's cross-attention taken, by runtime::teacher_force. A sentence's
// translation is the same either way (tests/serve, cli.test_serve, python test_front_ends).
// Dim legend: L decoder blocks, H heads, Tt target positions (<eos> included when emitted),
// Ts source positions (<eos> included unless cut).
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/serve/request.h"
#include "qkv/runtime/translator.h"

namespace qkv::serve {

/// DecodeSettings with the model folder's defaults filled in (config.json "decode").
struct ResolvedSettings {
    runtime::TranslateOptions options;  // beam, max_len, length_penalty, no_unk
    int64_t n_best = 1;
    bool attention = false;
    /// Hypotheses with scores are wanted (the /v1 endpoint): the detailed path.
    bool detail = false;
    bool operator==(const ResolvedSettings& o) const {
        return options.beam == o.options.beam && options.max_len == o.options.max_len &&
               options.length_penalty == o.options.length_penalty && options.no_unk == o.options.no_unk &&
               n_best == o.n_best && attention == o.attention && detail == o.detail;
    }
};

/// Fills the unset fields of s from m.config.decode. Throws qkv::Error when n_best exceeds the
/// resulting beam size, or attention is asked of a model without multi-head cross-attention (a
/// Bahdanau model).
ResolvedSettings resolve_settings(const runtime::ModelDir& m, const DecodeSettings& s, bool detail);

/// One hypothesis: text (words joined by spaces, as qkv translate prints them), units (the model's
/// output units, pieces for subword models, no <eos>), log_prob (sum of unit log-probabilities,
/// <eos> included when emitted), score (log_prob / ((5 + n) / 6)^alpha, n units counting <eos>:
/// GNMT), finished (emitted <eos>; false: cut at max_len). A text's joins its sentences'
/// (runtime::join_sentence_nbest).
using Hypothesis = runtime::TextHypothesis;

/// Cross-attention (decoder over source) of the best hypothesis, from a teacher-forced pass.
using runtime::CrossAttention;

struct SentenceResult {
    std::string translation;                 // "" for an empty or blank sentence
    std::vector<Hypothesis> hypotheses;      // detailed path only: n_best, best first
    CrossAttention attention;                // when asked
    int64_t sentences = 0;                   // the sentences it was translated as (runtime::split_text)
};

/// Translates raw sentences (valid UTF-8, checked by the caller) with a copy of the translator's
/// model borrowed for the call, under its precision. Blank sentences give "" (as qkv translate's
/// empty output lines). Plain settings (detail false): exactly runtime::translate_tokens. Runs in
/// the calling thread. Throws qkv::Error from the decoder, or when no model is loaded.
std::vector<SentenceResult> translate_sentences(runtime::Translator& t, const std::vector<std::string>& sentences,
                                                const ResolvedSettings& s);

}  // namespace qkv::serve
