#pragma once
// BLEU scores on token sequences: D2L's sentence BLEU (the book's evaluation) and corpus BLEU-4
// (Papineni et al. 2002, the quality anchor's metric). Tokens are compared as exact strings.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::decode {

/// D2L EN sentence BLEU (D2L §10.7.6 "Evaluation of Predicted Sequences"; spec §6):
///   exp(min(0, 1 - len_label/len_pred)) * prod_{n=1..min(k, len_pred)} p_n^(1/2^n),
/// p_n = clipped n-gram matches / (len_pred - n + 1). Both strings are split on single spaces,
/// so "" is one empty token (as in Python's "".split(" ")). A zero p_n gives 0. The min(k,
/// len_pred) is EN's guard; ZH would divide by zero for a 1-token prediction. Throws qkv::Error
/// when k < 1. Examples: ("je perdu .", "j'ai perdu .", 2) = 0.687.
double d2l_bleu(std::string_view pred, std::string_view label, int k);

/// The same on token lists (D2L's split already applied).
double d2l_bleu(const std::vector<std::string>& pred, const std::vector<std::string>& label, int k);

/// Result of corpus_bleu.
struct CorpusBleu {
    double bleu = 0;                    // in [0, 1]
    std::array<double, 4> precisions{};  // p1..p4 (0 where there is no hypothesis n-gram)
    std::array<int64_t, 4> matches{};    // clipped n-gram matches summed over the corpus
    std::array<int64_t, 4> totals{};     // hypothesis n-grams summed over the corpus
    double bp = 0;                      // brevity penalty
    int64_t hyp_len = 0, ref_len = 0;   // c and r: total tokens
};

/// Corpus BLEU-4 with one reference per sentence (Papineni et al. 2002): p_n = sum of clipped
/// n-gram matches / sum of hypothesis n-grams over the corpus; BLEU = BP * exp(mean log p_n),
/// uniform weights, no smoothing (0 when any p_n is 0); BP = 1 if c > r else exp(1 - r/c)
/// (0 when c = 0). Matches fra_full_anchor.py's corpus_bleu. Throws qkv::Error when the lists
/// differ in length.
CorpusBleu corpus_bleu(const std::vector<std::vector<std::string>>& hyps,
                       const std::vector<std::vector<std::string>>& refs);

}  // namespace qkv::decode
