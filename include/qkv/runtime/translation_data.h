#pragma once
// English–French data for training runs: one call from a DataConfig (file, pipeline, filters,
// split sizes) to vocabularies, train/valid/test arrays and the held-out references for corpus
// BLEU. Built on data/ (fra_eng.h, nmt_data.h); the pipelines are d2l_spec.md §2 and
// quality_anchor.md §2.1.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/data/nmt_data.h"
#include "qkv/data/subword.h"
#include "qkv/data/vocab.h"

namespace qkv::runtime {

enum class DataPipeline {
    /// D2L EN MTFraEng: the first num_train + num_val + 1 lines, alphabetical vocabularies over
    /// the padded lists, train = the first num_train pairs, valid = the rest (also the held-out
    /// set for eval; D2L EN has no test split).
    d2l_en,
    /// The quality anchor's pipeline: seeded shuffle split (train / valid / test), frequency-
    /// ordered vocabularies (<unk> <pad> <bos> <eos>, min_freq) from the train split only.
    anchor,
    /// Real text (issue 45; the real preset): sentences as the file has them (cased, punctuation
    /// attached), split by data::source_disjoint_split (no validation or test source occurs in
    /// training), SentencePiece pieces learned from the train split's raw text with nmt_nfkc
    /// normalization and byte fallback (data::SubwordOptions::raw_text), train pairs longer than
    /// num_steps pieces (+ <eos>) on either side skipped and counted, the held-out pairs kept
    /// (their arrays cut to num_steps; their references whole). No D2L token rules, no
    /// lower-casing; max_src_tokens / max_tgt_tokens / min_freq do not apply.
    text,
};

/// What a run's data was, recorded in config.json ("data.fingerprint") at training time and
/// checked by `qkv eval` and `qkv train --resume` (model_dir.h check_data_fingerprint): the number
/// of pairs after the filters (max_src_tokens, max_tgt_tokens, max_pairs; for d2l_en the lines
/// read) and the 64-bit FNV-1a hash over those pairs in file order, each as its raw source text,
/// a tab, its raw target text and a newline. The split is a seeded shuffle of the pair indices,
/// so equal fingerprints give the same train / valid / test split; a reordered or edited file
/// (or other filters) gives another one. One pass over the pair bytes (~10 MB for the full data).
/// A language model's text: `characters` after D2L's preprocessing and the hash of that text
/// (config.json {"characters", "fnv1a64"}; pairs stays 0).
struct DataFingerprint {
    int64_t pairs = 0;             // 0: not recorded (config.json of an older build)
    uint64_t fnv1a64 = 0;
    int64_t characters = 0;        // a language model's text (0: not recorded)
    bool known() const { return pairs > 0 || characters > 0; }
    bool operator==(const DataFingerprint& o) const {
        return pairs == o.pairs && fnv1a64 == o.fnv1a64 && characters == o.characters;
    }
};

/// The fingerprint of parallel sentences (src[i], tgt[i]) in order (DataFingerprint). Throws
/// qkv::Error when the sizes differ.
DataFingerprint fingerprint_pairs(const std::vector<std::string>& src, const std::vector<std::string>& tgt);
/// 16 lowercase hex digits, config.json's form of DataFingerprint::fnv1a64.
std::string fingerprint_hex(uint64_t h);

/// What a run's data preparation did (config.json "data.applied", written by qkv train; a record,
/// not a setting: nothing reads it back to decide anything). Unknown (pairs_read 0) for older files.
struct DataRecord {
    int64_t pairs_read = 0;           // pairs in the file (malformed lines skipped)
    int64_t malformed = 0;            // malformed lines skipped
    int64_t source_too_long = 0;      // dropped: source over max_src_tokens
    int64_t target_too_long = 0;      // dropped: target over max_tgt_tokens (source within its limit)
    int64_t beyond_max_pairs = 0;     // dropped: after the first max_pairs kept ones
    int64_t over_length_cap = 0;      // text pipeline: train pairs over num_steps pieces (+ <eos>)
    /// text pipeline: the other translations of the held-out sources (in no split, so that no
    /// held-out source is trained on; data::SourceDisjointSplit::unused)
    int64_t held_out_duplicates = 0;
    int64_t concatenated = 0;         // text pipeline: concatenated train pairs added (concat_fraction)
    int64_t pairs_kept = 0;           // the pairs used: train + valid + test
    int64_t train = 0, valid = 0, test = 0;  // the split as made (small corpora shrink valid/test)
    std::string pipeline;             // in words: "anchor: seeded shuffle split (seed 0), ..."
    bool known() const { return pairs_read > 0; }
    /// The filters' drops by reason, e.g. "kept 76 of 200 pairs: dropped 100 with more than 5
    /// source tokens, 24 with more than 7 target tokens" ("kept all 200 pairs" when none).
    /// The text pipeline's two counts follow: "..., 812 train pairs over the length cap of 64
    /// pieces (num_steps), 3,022 other translations of held-out sources".
    std::string dropped_text(int64_t max_src_tokens, int64_t max_tgt_tokens, int64_t max_pairs,
                             int64_t num_steps = 0) const;
};

struct DataConfig {
    /// fra-eng.zip, fra.txt or a folder ("" = QKV_DATA or the default: data::locate_fra_eng), or
    /// any other file: a TSV corpus, gzip or not (data::corpus_format). Unused with src_file.
    std::string path;
    /// A pair of line-aligned files instead of `path` (data::load_file_pair); both or neither.
    std::string src_file, tgt_file;
    /// Language codes of the two sides, recorded in config.json and shown by `qkv info`: "en" and
    /// "fr" for fra-eng data unless given; "" (unknown) for other corpora unless given.
    std::string src_lang, tgt_lang;
    DataPipeline pipeline = DataPipeline::anchor;
    int64_t num_steps = 12;           // T: arrays are truncated/padded to this (<eos> included)
    bool strict = false;              // a malformed line is fatal instead of skipped
    // anchor pipeline
    int64_t max_src_tokens = 0;       // keep pairs with at most this many source tokens (0: any)
    int64_t max_tgt_tokens = 0;       // ... and target tokens (<eos> not counted)
    int64_t max_pairs = 0;            // then keep the first N of them, in file order (0: all)
    int64_t n_valid = 2000;
    int64_t n_test = 5000;            // held-out pairs for corpus BLEU
    uint64_t split_seed = 0;
    /// Text pipeline: add round(concat_fraction x train pairs) extra train pairs, each 2-8 random
    /// train pairs (seeded by split_seed) joined by a space on both sides, those within num_steps
    /// pieces kept. Tatoeba's pairs are short; without long targets a model ends long sentences
    /// early (the concatenation augmentation of Nguyen et al. 2021, "Data augmentation by
    /// concatenation for low-resource translation"). 0: none. Must be in [0, 1].
    double concat_fraction = 0;
    int64_t min_freq = 2;
    // Subword units (anchor pipeline only). With subword bpe/unigram, SentencePiece learns
    // subword_vocab_size pieces from the train split's sentences (source and target lines in one
    // model when shared_vocab, else one model per side), arrays hold piece ids and num_steps
    // counts pieces; the held-out references stay D2L words. min_freq then does not apply.
    // shared_vocab with words: one frequency-ordered vocabulary over both sides' train split.
    data::SubwordKind subword = data::SubwordKind::none;
    int64_t subword_vocab_size = 8000;
    /// subword_vocab_size is an upper bound (fewer pieces for a small corpus): set when the pieces
    /// are the default of a corpus other than fra-eng and no --vocab-size was given. Training
    /// only (the folder's SentencePiece model is what later runs load).
    bool subword_vocab_soft = false;
    bool shared_vocab = false;
    /// Subword pieces without a num_steps of the user's (the preset's is for words): num_steps is
    /// then chosen from the train split (pieces_num_steps: 99 % of its sources and of its targets
    /// fit whole with <eos>, at most 4 x num_steps) and TranslationData::num_steps says which.
    /// Training only (config.json records the number chosen).
    bool num_steps_from_data = false;
    /// A language model's text: its last part held out for validation (0 < f < 0.5).
    double valid_fraction = 0.1;
    // d2l_en pipeline
    int64_t d2l_num_train = 512;
    int64_t d2l_num_val = 128;
    // The data the run was trained on (config.json data.fingerprint); not an input of
    // load_translation_data, which computes TranslationData::fingerprint.
    DataFingerprint fingerprint;
    // What was done with it (config.json data.applied); not an input either
    // (TranslationData::record).
    DataRecord applied;
};

/// The SentencePiece models of a subword run (both null for words; the same pointer twice when
/// the vocabulary is shared).
struct SubwordModels {
    std::shared_ptr<const data::SubwordModel> src, tgt;
    bool active() const { return src != nullptr; }
};

struct TranslationData {
    std::string origin;               // the file read, e.g. "../shared/data/fra-eng.zip"
    std::string summary;              // "...: 167130 pairs from 167130 lines; ..." (+ filters)
    int64_t malformed = 0;            // malformed lines skipped
    int64_t pairs = 0;                // pairs used (after filters), train + valid + test
    DataFingerprint fingerprint;      // of the pairs used (after filters), in file order
    DataRecord record;                // what the filters dropped, the split made, the pipeline
    data::Vocab src_vocab, tgt_vocab;  // pieces when subwords.active()
    SubwordModels subwords;
    data::NmtArrays train, valid, test;
    /// The arrays' length T: DataConfig::num_steps, or with num_steps_from_data the one chosen.
    int64_t num_steps = 0;
    /// The 99th percentile of the train split's target lengths in units, <eos> included (what
    /// decoding needs room for).
    int64_t target_len_p99 = 0;
    /// Train pairs whose source / target (+ <eos>) is longer than num_steps and was cut, as a
    /// fraction of the train split (anchor pipeline; in pieces for a subword run).
    double truncated_src = 0, truncated_tgt = 0;
    /// Held-out sources and references as full token lists (not truncated, no <unk> mapping, no
    /// <eos>): the anchor's BLEU references. Row i matches test row i.
    data::Sentences test_src, test_ref;
    /// The same held-out pairs as the file has them (raw text, before D2L's lower-casing and
    /// token rules): the references of the standard metrics (decode/sacrebleu.h).
    std::vector<std::string> test_src_text, test_ref_text;
    /// Text pipeline: the train and validation pairs as the file has them, rows matching train /
    /// valid (what `qkv data` writes, so that another toolkit trains on the same split). Empty
    /// for the other pipelines.
    std::vector<std::string> train_src_text, train_tgt_text, valid_src_text, valid_tgt_text;
};

/// Reads the data (fra-eng by data::locate_fra_eng's rules, whose error names the download
/// address; a TSV file; or src_file + tgt_file: data/corpus.h) and builds everything per `cfg`. Split sizes shrink for small corpora: when the pairs number
/// fewer than 4·(n_valid + n_test), valid and test each get 10% (at least 1 pair), and the
/// summary says so. With cfg.subword != none the SentencePiece model(s) are trained on the train
/// split (deterministic; data/subword.h) unless `given` holds them (a saved model folder: eval,
/// resume); the summary then reports the pieces per word and the truncated fractions. Throws
/// qkv::Error when the file is missing or malformed under strict, when fewer than 3 pairs remain,
/// an option is out of range, subword or shared_vocab is asked of the d2l_en pipeline, or
/// SentencePiece refuses the vocabulary size (the message names --vocab-size).
TranslationData load_translation_data(const DataConfig& cfg, const SubwordModels& given = {});

/// The sequence length for subword pieces chosen from the train split (DataConfig::
/// num_steps_from_data): the smallest T >= 2 that holds at least 99 % of the train sources and at
/// least 99 % of the train targets whole with their <eos> (units + 1 <= T), capped at `cap` (4 x
/// the preset's word num_steps: a corpus of long sentences is cut, as the data line reports, rather
/// than make every step quadratically slower). `src_lens` / `tgt_lens` are the unit counts of the
/// train sentences without <eos>.
int64_t pieces_num_steps(const std::vector<int64_t>& src_lens, const std::vector<int64_t>& tgt_lens, int64_t cap);

/// Whether `cfg` reads the fra-eng data (not a TSV corpus or a file pair).
bool is_fra_eng_data(const DataConfig& cfg);

/// The languages of the data: the recorded src_lang / tgt_lang, else "en" / "fr" for fra-eng
/// data (older config.json files record none), else "" (unknown).
std::string source_language(const DataConfig& cfg);
std::string target_language(const DataConfig& cfg);
/// "en→fr" from source_language / target_language ("src→tgt" for unknown ones).
std::string language_pair(const DataConfig& cfg);

/// The truncation warning for one source sentence of `units` units (words; with `pieces`, the
/// SentencePiece pieces of its `words` words) when the encoder, reading `num_steps` positions, cannot
/// take it whole with its <eos> (encode_sources keeps the first num_steps units of units + <eos>);
/// "" when it fits (units < num_steps). `at_least`: `units` is a lower bound (words past the
/// encoded limit count one piece each). The text follows the sentence's name: "has 9 source tokens
/// but the model reads 6 positions (5 tokens + <eos>): tokens 7-9 are not read, nor is <eos>"; for
/// units == num_steps "...: all 6 are read, but not <eos>"; a subword model "has 25 source pieces
/// (20 words) but the model reads 13 positions (12 pieces + <eos>): pieces 14-25 are not read, ...".
std::string truncation_note(int64_t units, int64_t num_steps, bool pieces, int64_t words, bool at_least);

/// Source arrays for new sentences with a trained vocabulary: tokens (tokenize_nmt output, or
/// pieces for a subword vocabulary), ids (unknown -> <unk>) + <eos>, truncated/padded to
/// num_steps. Returns (B, T) ids and (B) valid lengths in a SeqArray.
data::SeqArray encode_sources(const data::Sentences& tokens, const data::Vocab& src_vocab,
                              int64_t num_steps);

}  // namespace qkv::runtime
