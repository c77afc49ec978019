#pragma once
// Translating with a loaded model folder: word-tokenised sources in, n-best translations out
// (greedy, beam, sampling and every decode::DecodeOptions rule), and the teacher-forced pass that
// scores a given target and returns the cross-attention (qkv serve's scores and weights,
// qkv.Translator.score_batch). runtime::Translator (runtime/translator.h) runs these over a pool of
// loaded copies for every front end.
// Dim legend: L decoder blocks, H heads, Tt target positions (<eos> included when emitted),
// Ts source positions (<eos> included unless cut).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/data/text.h"
#include "qkv/decode/beam_search.h"  // decode::SamplingOptions, Hypothesis
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/text.h"

namespace qkv::runtime {

struct Translation;

struct TranslateOptions {
    int64_t max_len = 20;
    int64_t beam = 1;              // 1: greedy (cached)
    double length_penalty = 0.6;
    /// Decoder batch size: sentences (batch_tokens false; 500: bench/RESULTS_avx512.md §3), or
    /// with batch_tokens the most source units a batch holds counting its padding (rows × the
    /// longest row's units + <eos>, num_steps at most); a longer sentence gets a batch of its own.
    int64_t batch_size = 500;
    bool batch_tokens = false;     // `--batch-type tokens`
    bool progress = false;         // progress bar on stderr
    bool no_unk = false;           // never emit <unk> (the best known word instead)
    // The rest of decode::DecodeOptions (decode/options.h has their meaning).
    int64_t num_hypotheses = 1;    // n-best per sentence (<= beam)
    int64_t min_len = 0;           // in the model's units
    int64_t no_repeat_ngram_size = 0;
    double repetition_penalty = 1.0;
    double coverage_penalty = 0.0;  // GNMT β (decode::DecodeOptions::coverage_penalty)
    /// Target words every translation starts with (a subword model encodes them into pieces).
    std::vector<std::string> prefix;
    decode::SamplingOptions sampling;
    /// Real scores in Translation (the search path) also for plain greedy decoding.
    bool scores = false;
    /// Fill Translation::units / attention / alignment (decode::DecodeOptions::return_attention).
    bool attention = false;
    /// Each output <unk> becomes the source unit with the highest cross-attention for it (the
    /// source word for a word model; for a subword model the source piece, copied with its
    /// word-start mark before the pieces are joined). An <unk> that attends most to the source's
    /// <eos> stays.
    bool replace_unknowns = false;
    /// Called with (input row, its n-best) as each decoder batch finishes, in batch order (length
    /// sorted, not input order): `qkv translate` streams its output from it. The row's entry in
    /// the returned vector is already filled. Exceptions propagate out of translate_nbest.
    std::function<void(int64_t row, const std::vector<Translation>& nbest)> on_translated;
};

/// One translation of an n-best list: target words and the hypothesis's scores.
struct Translation {
    std::vector<std::string> words;
    double log_prob = 0;  // sum of the model's token log-probabilities (decode::Hypothesis)
    double score = 0;     // length-normalised (GNMT α = length_penalty)
    // With TranslateOptions::attention:
    std::vector<std::string> units;               // the model's output units (<eos> not listed)
    std::vector<std::vector<float>> attention;    // (output units (+ <eos>), source units + <eos>)
    std::string alignment;                        // Moses "i-j" over source and output units
    /// The model's output ids (<eos> not listed; before --replace-unknowns) and whether the
    /// hypothesis ended with <eos> (false: cut at max_len), for teacher_force.
    std::vector<int64_t> ids;
    bool finished = true;
};

/// Translates tokenised sources (data::tokenize_nmt output) with the folder's model: source ids
/// (through source_units) + <eos> truncated to num_steps, then greedy or beam decoding. Returns
/// target word lists (without <eos>; a subword model's pieces are detokenised by target_words;
/// a predicted <unk> stays "<unk>"). max_len counts the model's units (pieces for subwords).
std::vector<std::vector<std::string>> translate_tokens(ModelDir& m,
                                                       const std::vector<std::vector<std::string>>& src,
                                                       const TranslateOptions& opt);
/// translate_tokens with every decoding option: for each source, up to opt.num_hypotheses
/// translations with their scores, best first, in input order whatever the batching. Plain greedy
/// (no option beyond beam 1 / no_unk, scores false) takes decode::greedy_decode's fused path, with
/// score and log_prob left 0; everything else goes through decode::generate. Throws qkv::Error on bad
/// options (naming the field) or a prefix word outside the target vocabulary.
std::vector<std::vector<Translation>> translate_nbest(ModelDir& m, const std::vector<std::vector<std::string>>& src,
                                                      const TranslateOptions& opt);

/// Cross-attention (decoder over source) of one target, from a teacher-forced pass.
struct CrossAttention {
    std::vector<std::string> source;  // Ts source units (with <unk> for unknown words, and <eos>)
    std::vector<std::string> target;  // Tt output units (with <eos> when emitted)
    int64_t layers = 0, heads = 0;
    std::vector<float> weights;       // (L, H, Tt, Ts) row-major; each row sums to 1
};

/// Teacher-forced pass of `target` (ids, <eos> included when it is to be scored) given one
/// source row as the decoder saw it (`src_row`: num_steps ids, padded: a Bahdanau encoder runs
/// over the pads, so its states depend on them; `valid_len` of them read): the log-probability of
/// each target id, in order (float32 values widened). With `att`, also the cross-attention
/// weights of every decoder block over the valid source positions (Transformer models only;
/// throws qkv::Error for another). An empty target gives no values.
std::vector<double> teacher_force(ModelDir& m, const std::vector<int64_t>& src_row, int64_t valid_len,
                                  const std::vector<int64_t>& target, CrossAttention* att = nullptr);

/// One source row as translate_nbest encodes it (source_units, then encode_sources with
/// num_steps): its num_steps ids and valid length, for teacher_force.
struct SourceRow {
    std::vector<int64_t> ids;
    int64_t valid_len = 0;
};
SourceRow encode_source_row(const ModelDir& m, const std::vector<std::string>& units);

/// The cross-attention of the last decoder block, averaged over heads (Bahdanau: its attention),
/// at each step of greedy decoding of one source (its units, source_units), as `qkv heatmap`
/// draws it: (steps, valid source positions) row-major in `weights`. Greedy options as
/// decode::GreedyOptions (max_len, <unk> banned with no_unk).
struct AttentionMap {
    int64_t steps = 0, sources = 0;
    std::vector<float> weights;
};
AttentionMap greedy_attention(ModelDir& m, const std::vector<std::string>& units, int64_t max_len, bool no_unk);

/// One hypothesis of a text translated sentence by sentence (join_sentence_nbest).
struct TextHypothesis {
    std::string text;     // the sentences' hypotheses in the text's layout (data::join_sentences)
    double log_prob = 0;  // the sum of the sentences' log-probabilities
    double score = 0;     // the sum of the sentences' length-normalised scores
    bool finished = true; // every sentence's hypothesis ended with <eos>
    std::vector<std::string> units;  // the sentences' output units, in order
};

/// The translation of a text cut into sentences (`layout`, runtime::split_text) from its
/// sentences' translations (texts[i] for layout.sentences[i]): data::join_sentences, without the
/// text's own leading and trailing whitespace (space, tab, CR, LF). Every front end joins so.
/// Throws qkv::Error when the counts differ.
std::string join_translations(const data::SentenceSplit& layout, const std::vector<std::string>& texts);

/// The n-best list of a text cut into sentences (`layout`, runtime::split_text), from each
/// sentence's n-best list (per_sentence[i]: best first): hypothesis k joins the k-th hypothesis of
/// every sentence (a sentence's last when its list is shorter; "" and nothing else for a sentence
/// with none, e.g. a blank one), so the best is the sentences' bests; as many as the longest list
/// (none when every list is empty). Texts are joined by join_translations; log-probabilities and
/// scores summed, units concatenated, finished when every sentence's is. Throws qkv::Error when
/// the counts differ.
std::vector<TextHypothesis> join_sentence_nbest(const std::vector<std::vector<TextHypothesis>>& per_sentence,
                                                const data::SentenceSplit& layout);
/// The same from translate_nbest's lists (each sentence's words joined by spaces as its text,
/// its units as units). Throws qkv::Error also when a list is empty.
std::vector<TextHypothesis> join_sentence_nbest(const std::vector<std::vector<Translation>>& per_sentence,
                                                const data::SentenceSplit& layout);

/// The most output units (with <eos>) a real-text model (reads_raw_text) may write for a source
/// of `source_units` units (with <eos>): 2 × source_units + 10, so a hypothesis that loops stops
/// soon after twice the source's length instead of at max_len, while a translation twice as long
/// as its source (plus 10 pieces for a short one) still fits. TranslateOptions::max_len still
/// bounds it; translate_nbest applies it per decoder batch (the batch's longest source).
int64_t source_tied_max_len(int64_t source_units);

/// GNMT length penalty applied: log_prob / ((5 + n) / 6)^alpha, n units counting <eos>
/// (decode/beam_search.h).
double gnmt_score(double log_prob, int64_t n, double alpha);

}  // namespace qkv::runtime
