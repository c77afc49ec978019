#pragma once
// The text pipeline of translation: raw sentences to word tokens (data::tokenize_nmt, as the
// training data was tokenised), words to the model's source units (SentencePiece pieces for a
// subword model), output units back to words, words to text. Shared by every front end
// (qkv translate, qkv eval, qkv serve, Python), so they read and write text alike.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/data/text.h"
#include "qkv/runtime/model_dir.h"

namespace qkv::runtime {

/// Whether every token of a tokenised sentence is whitespace (or there is none): nothing to
/// translate (the front ends answer "" for it).
bool is_blank(const std::vector<std::string>& tokens);

/// A raw sentence that cannot be translated: not valid UTF-8, or holding a NUL byte (which would
/// silently become <unk>). `offset` is the byte offset of the first such byte.
struct TextProblem {
    const char* what = nullptr;  // "invalid UTF-8" or "NUL byte"; nullptr: none
    size_t offset = 0;
    explicit operator bool() const { return what != nullptr; }
};
/// The first problem of `sentence` (see TextProblem), or none.
TextProblem text_problem(const std::string& sentence);

/// Word tokens of each raw sentence (data::tokenize_nmt); a blank sentence (is_blank) gives an
/// empty list. The caller checks text_problem first (tokenize_nmt assumes valid UTF-8).
std::vector<std::vector<std::string>> tokenize_sentences(const std::vector<std::string>& sentences);

/// The words of each raw sentence as model `m` reads them: for a real-text model (data pipeline
/// text) the nmt_nfkc-normalized text split on spaces (data::raw_words: cased, punctuation
/// attached), else D2L's tokens (tokenize_sentences above). A blank sentence gives an empty list.
/// The caller checks text_problem first.
std::vector<std::vector<std::string>> tokenize_sentences(const ModelDir& m, const std::vector<std::string>& sentences);

/// Whether `m` reads and writes real text (data pipeline text): its output words joined by spaces
/// are natural text.
bool reads_raw_text(const ModelDir& m);

/// A text cut into the parts model `m` translates one by one, in the layout that join_sentences
/// puts their translations back into: its sentences (data::split_sentences), and for a real-text
/// model (reads_raw_text) each sentence of more source pieces than the model reads
/// (data.num_steps - 1, <eos> being the last position) cut further between words, so that no part
/// is truncated. A sentence of n pieces over the limit L becomes ceil(n / L) parts of about equal
/// size, each cut preferably after a word that ends a clause (, ; : or a dash) in the half of the
/// part's room around that size, else after the word nearest to it; a single word over the limit
/// stays one part (source_units then reads its first pieces). A sentence's parts keep the
/// whitespace between them (their space_after), so the layout is the text again. A word model's
/// sentences are never cut (D2L's models read a fixed number of tokens: translate warns).
/// Throws qkv::Error on ill-formed UTF-8, naming the byte offset.
data::SentenceSplit split_text(const ModelDir& m, std::string_view text);

/// D2L's four en→fr example pairs (D2L 11.7: "go ." -> "va !", "i lost .", "he's calm .",
/// "i'm home .") as model `m` reads and writes text: D2L tokens, or cased real text ("Go." ->
/// "Va !") for a real-text model. Source, reference.
std::vector<std::pair<std::string, std::string>> book_pairs(const ModelDir& m);

/// How many leading words of a source sentence a subword model encodes: 4 × num_steps. Every word
/// gives at least one piece, so the num_steps pieces the model reads come from the first num_steps
/// words; the rest cannot change them (see source_units).
int64_t source_word_limit(const ModelDir& m);
/// How many leading characters (code points) of a source word a subword model encodes:
/// 4 × num_steps × the longest piece of the source vocabulary in characters. A word's first
/// num_steps pieces lie within its first num_steps × longest characters, so the rest cannot reach
/// the model.
int64_t source_char_limit(const ModelDir& m);
/// The first `n` code points of `word` (all of it when shorter); cuts between UTF-8 sequences.
std::string cut_to_chars(const std::string& word, int64_t n);
/// The model's input units for word-tokenised sources: the SentencePiece pieces of a subword
/// model, the words themselves otherwise. A subword model encodes only the first
/// source_word_limit(m) words of each sentence (a longer sentence loses the pieces past them,
/// which encode_sources would drop anyway), each cut to its first source_char_limit(m)
/// characters (a 5,000,000-character word took 9.9 s and 1.35 GB encoded whole). Measured with `qkv translate`, one thread: a
/// 2.1-million-word line (6.3 MB) took 9.3 s and 1.4 GB encoded whole, 0.36 s and 231 MB so.
std::vector<std::vector<std::string>> source_units(const ModelDir& m,
                                                   const std::vector<std::vector<std::string>>& words);
/// Words of an output unit sequence: SentencePiece decoding for a subword model, the units
/// themselves otherwise.
std::vector<std::string> target_words(const ModelDir& m, const std::vector<std::string>& units);

/// What a front end says about one source sentence the model cannot read whole (the same in `qkv
/// translate`, `qkv heatmap` and Python's translate_batch). `tokens`: the sentence's words
/// (tokenize_sentences). long_words: one note per word a subword model encodes only the start of
/// ("word 3 has 5000 characters; the subword model encodes its first 1664 (4 x num_steps x the
/// longest piece)"); cut: truncation_note's text for the sentence ("" when it fits). Words past
/// source_word_limit count one piece each (the count is then a lower bound: "at least").
struct SourceNotes {
    std::vector<std::string> long_words;
    std::string cut;
    bool empty() const { return long_words.empty() && cut.empty(); }
};
SourceNotes source_notes(const ModelDir& m, const std::vector<std::string>& tokens);

/// The most output units a front end lets a translation have (--max-len, max_len, "max_len" in
/// /v1/translate): decoding stops there.
constexpr int64_t kMaxLenMost = 1000;

/// What every front end says of translations that reached their length limit before <eos> (they
/// end there, possibly mid-word). `subject`: which ones, as the front end numbers them ("2 lines
/// (3, 7)", "the translation", "sentences[4]"); `limit`: the setting's name there ("--max-len",
/// "max_len"); `max_len`: its value (config.json's decode.max_len when not given); `source_tied`:
/// true when every one of them stopped below max_len, at a real-text model's source-tied limit
/// (translate.h: source_tied_max_len), which the setting does not raise. Returns
/// "SUBJECT reached the length limit of MAX_LEN tokens (LIMIT) before the end of the sentence: the
/// translation is cut there; raise LIMIT", without "raise" when max_len is kMaxLenMost (the model
/// does not end the sentence) or the limit was the source-tied one.
std::string length_limit_note(const std::string& subject, const std::string& limit, int64_t max_len, bool source_tied);

/// " "-joined tokens.
std::string join_tokens(const std::vector<std::string>& tokens);

}  // namespace qkv::runtime
