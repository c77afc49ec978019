#pragma once
// Raw-text helpers for the real-text pipeline (issue 45 item 1): SentencePiece's nmt_nfkc
// normalization, sentence splitting of multi-sentence input, and reading parallel line files.
// Text is UTF-8; nothing here lower-cases or applies D2L's token rules (data/tokenizer.h).
#include <string>
#include <string_view>
#include <vector>

namespace qkv::data {

/// SentencePiece's default normalization (normalization_rule_name "nmt_nfkc" with the default
/// NormalizerSpec, remove_extra_whitespaces = true; SentencePiece src/builder.cc
/// Builder::MergeNmtMap and src/normalizer.cc; doc/normalization.md), per code point:
///  - removed: U+0001-0008, U+000B, U+000E-001F, U+007F, U+008F, U+009F (control characters);
///  - to U+0020: U+0009, U+000A, U+000C, U+000D, U+1680, U+200B, U+200C, U+200E, U+200F,
///    U+2028, U+2029, U+2581, U+FEFF, U+FFFD;
///  - everything else Unicode NFKC (utf8proc), except U+FF5E FULLWIDTH TILDE, kept as it is
///    (SentencePiece keeps it: Japanese uses both tildes differently). NFKC already maps
///    U+00A0, U+2000-200A, U+202F, U+205F, U+3000 to U+0020 and "ﬁ" to "fi", "①" to "1".
///  - with remove_extra_whitespaces: leading and trailing U+0020 dropped, runs of U+0020 become
///    one.
/// SentencePiece applies NFKC as a precompiled leftmost-longest character map, which its
/// builder.h says is not full NFKC on a few rare sequences: combining marks out of canonical
/// order ("a" U+0301 U+0328 gives it "á" U+0328; NFKC, here and in Python, "ą" U+0301).
/// utf8proc's NFKC is the standard one. Equal to spm_normalize --normalization_rule_name=nmt_nfkc
/// (Debian sentencepiece 0.1.97) on the other 34 strings of tests/fixtures/nmt_nfkc (test_data
/// TextNormalize.*). U+0000 is kept as it is.
/// Throws qkv::Error on ill-formed UTF-8, naming the byte offset.
std::string normalize_nmt_nfkc(std::string_view text, bool remove_extra_whitespaces = true);

/// The words of a raw sentence as the real-text pipeline hands them to SentencePiece:
/// normalize_nmt_nfkc(text), split on U+0020 (so no word is empty; a blank text has none).
/// Joined by single spaces they are the normalized text again. Throws qkv::Error on ill-formed
/// UTF-8, naming the byte offset.
std::vector<std::string> raw_words(std::string_view text);

/// One sentence of split_sentences and the whitespace that followed it in the input.
struct Sentence {
    std::string text;         // non-empty, no leading or trailing whitespace
    std::string space_after;  // the whitespace between it and the next sentence (or the end)
};

/// A text cut into sentences so that leading + (text + space_after for each sentence) is the
/// input again, byte for byte.
struct SentenceSplit {
    std::string leading;  // whitespace before the first sentence (all of a blank input)
    std::vector<Sentence> sentences;
};

/// Splits multi-sentence text for translation. A sentence ends after a run of '.', '?', '!',
/// '…' (U+2026) and any closing quotes or brackets that follow it (" ' ” ’ » ) ] }), when
/// whitespace follows and then an upper-case letter (Unicode Lu or Lt), a decimal digit (Nd) or
/// an opening quote or bracket (" ' “ ‘ « „ ( [ { ¿ ¡). Not when the run is a single '.' that
/// ends a common English abbreviation (Mr. Mrs. Ms. Dr. St. Prof. Sr. Jr. Mt. vs. etc. cf.
/// e.g. i.e. U.S. U.K., case-sensitive) or an initial (one upper-case letter: "J. Smith").
/// A number such as 3.5 is never split (no whitespace follows its '.'). A line break (LF, CR,
/// U+0085, U+2028, U+2029) in the whitespace between two non-blank stretches always ends a
/// sentence. Whitespace is Unicode White_Space (what Python's str.isspace() accepts). The rule
/// cannot tell "in the U.S. Then" (no split: abbreviation) from a sentence that ends in one.
/// Throws qkv::Error on ill-formed UTF-8, naming the byte offset.
SentenceSplit split_sentences(std::string_view text);

/// The layout of `split` with each sentence replaced by its translation: split.leading, then
/// translations[i] + split.sentences[i].space_after for each i. Throws qkv::Error when the
/// counts differ.
std::string join_sentences(const SentenceSplit& split, const std::vector<std::string>& translations);

/// Lines of a text file: split on '\n' (a final '\n' does not start another line; a '\r' before
/// it is removed), nothing else changed. Throws qkv::Error naming `what` (e.g. "--ref-file")
/// and the path when the file cannot be read or is a folder.
std::vector<std::string> read_text_lines(const std::string& path, const std::string& what);

/// A source file and its reference file, line by line.
struct ParallelLines {
    std::vector<std::string> source, reference;
};

/// read_text_lines of both files; throws qkv::Error naming both options, files and line counts
/// when they differ: "--src-file 'a.en' has 3 lines but --ref-file 'a.fr' has 2".
ParallelLines read_parallel_lines(const std::string& source_path, const std::string& reference_path,
                                  const std::string& source_what = "--src-file",
                                  const std::string& reference_what = "--ref-file");

}  // namespace qkv::data
