#pragma once
// Standard MT metrics on detokenized text, as sacreBLEU 2.6.0 computes them by default: corpus
// BLEU with the 13a tokenizer and exponential smoothing (Papineni et al. 2002; Post 2018, "A Call
// for Clarity in Reporting BLEU Scores", WMT), chrF2 (Popović 2015) and chrF++ (Popović 2017).
// This is qkv's own implementation (sacreBLEU is not a dependency); its numbers equal
// sacreBLEU 2.6.0's to 0.01 on the inputs of tests/fixtures/sacrebleu (test_decode
// SacreBleu.*), and the signatures are sacreBLEU's, so a score can be compared with published
// ones. docs/metrics.md describes each rule. The D2L BLEU of decode/bleu.h (on D2L tokens) is
// unrelated and stays the D2L presets' metric.
//
// Text is UTF-8; every function throws qkv::Error on ill-formed UTF-8 (naming the hypothesis or
// reference line, 1-based) and when the two lists differ in length. Whitespace means what
// Python's str.split() splits on: U+0009-000D, U+001C-001F, U+0020, U+0085, U+00A0, U+1680,
// U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::decode {

/// The sacreBLEU release whose numbers and signature format these functions reproduce.
inline constexpr const char* kSacreBleuVersion = "2.6.0";

/// sacreBLEU's Tokenizer13a (mteval-v13a.pl's tokenization) on one line: "<skipped>" removed,
/// "-\n" removed, "\n" -> " ", then (when the line holds '&') "&quot;" -> '"', "&amp;" -> '&',
/// "&lt;" -> '<', "&gt;" -> '>' in that order; then, on " line ", in order: each ASCII character
/// of { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ / gets a space on each side;
/// '.' or ',' after a non-digit gets a space before and after; '.' or ',' before a non-digit
/// gets a space before; '-' after an ASCII digit gets a space after (each rule one left-to-right
/// pass of non-overlapping matches, as Python's re.sub); finally whitespace runs become one
/// space, none at the ends. "Hello, world!" -> "Hello , world !"; "1,000.50" stays;
/// "2019-2020" -> "2019 - 2020"; "qu'en" and "a-b" stay. Non-ASCII letters are never split.
/// Throws qkv::Error on ill-formed UTF-8.
std::string tokenize_13a(std::string_view line);

/// Corpus BLEU as sacreBLEU reports it (scores and precisions in percent, 0-100).
struct SacreBleuScore {
    double score = 0;                    // BLEU, 0-100
    std::array<int64_t, 4> counts{};     // clipped n-gram matches, n = 1..4, summed over segments
    std::array<int64_t, 4> totals{};     // hypothesis n-grams, n = 1..4
    std::array<double, 4> precisions{};  // percent; exp-smoothed where counts[n] = 0 (see below)
    double bp = 0;                       // brevity penalty
    int64_t sys_len = 0, ref_len = 0;    // 13a tokens in the hypotheses / references
    /// Hypotheses whose raw text ends in " ." (sacreBLEU's force=False check: at >= 100 it
    /// warns that the text looks tokenized; the score is unchanged).
    int64_t tokenized_period_lines = 0;
    /// "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    std::string signature;
};

/// Corpus BLEU with one reference per segment, sacreBLEU's defaults (BLEU(): tokenize='13a',
/// smooth_method='exp', lowercase=False, force=False, effective_order=False, max order 4).
/// Each segment is rstrip()ped, tokenized by tokenize_13a and split into tokens; counts and
/// totals are summed over the corpus; sys_len = hypothesis tokens, ref_len = reference tokens.
/// BP = 1 when sys_len >= ref_len, else exp(1 - ref_len / sys_len) (0 when sys_len = 0). When no
/// n-gram of any order matches, score = 0 and all precisions 0. Otherwise, for n = 1..4 until the
/// first n with totals[n] = 0 (that precision and later ones stay 0, and the score is then 0):
/// precision = 100 counts/totals, or, when counts[n] = 0, 100 / (2^k totals[n]) for the k-th
/// such order (NIST/mteval "exp" smoothing, Chen & Cherry 2014 method 3). score = BP *
/// exp(mean of log precisions over the 4 orders), log 0 taken as -9999999999 (sacreBLEU's
/// my_log). Empty lists give score 0. Throws qkv::Error when the lists differ in length or a
/// line is ill-formed UTF-8.
SacreBleuScore sacrebleu_corpus_bleu(const std::vector<std::string>& hypotheses,
                                     const std::vector<std::string>& references);

/// sacreBLEU's text line: "BLEU|<signature> = 65.70 82.2/71.4/62.0/51.2 (BP = 1.000 ratio =
/// 1.011 hyp_len = 180 ref_len = 178)", the score with `width` decimals (sacreBLEU's --width;
/// its command line's default is 1), precisions with 1.
std::string format_sacrebleu(const SacreBleuScore& s, int width = 2);

/// chrF's parameters (sacreBLEU's CHRF() defaults: chrF2; word_order = 2 gives chrF++).
struct ChrfOptions {
    int char_order = 6;  // character n-grams 1..char_order (whitespace removed first)
    int word_order = 0;  // word n-grams 1..word_order (0: chrF, 2: chrF++)
    int beta       = 2;  // recall weighs beta times as much as precision
};

/// Corpus chrF as sacreBLEU reports it.
struct ChrfScore {
    double score = 0;       // 0-100
    std::string name;       // "chrF2", or "chrF2++" for word_order 2 (one '+' per word order)
    std::string signature;  // "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
};

/// Corpus chrF / chrF++ with one reference per segment (sacreBLEU's CHRF(char_order, word_order,
/// beta), case-sensitive, whitespace excluded, eps_smoothing=False). Per segment and order, on
/// code points: character n-grams of the text with all whitespace removed; for word orders, the
/// words of str.split() with one ASCII punctuation character split off each word's end (else its
/// start) when the word has more than one character (Popović's chrF++.py rule: "(hi)" gives
/// "(hi" and ")"). Per order, hypothesis n-grams (counted only when the reference has n-grams of
/// that order), reference n-grams and clipped matches are summed over the corpus. Then over the
/// orders where both sums are > 0 ("effective order"), the mean precision P and mean recall R
/// give score = 100 (1 + beta^2) P R / (beta^2 P + R) (0 when P + R = 0). Throws qkv::Error when
/// the lists differ in length, a line is ill-formed UTF-8, char_order < 1, word_order < 0 or
/// beta < 1.
ChrfScore sacrebleu_corpus_chrf(const std::vector<std::string>& hypotheses,
                                const std::vector<std::string>& references,
                                const ChrfOptions& options = {});

/// sacreBLEU's text line: "chrF2|<signature> = 74.77" (score with `width` decimals).
std::string format_chrf(const ChrfScore& s, int width = 2);

}  // namespace qkv::decode
