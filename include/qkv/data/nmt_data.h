#pragma once
// Sequence-to-sequence arrays (D2L build_array_nmt) and the three ready-made English–French
// setups: the quality anchor (full data, quality_anchor.md §2.1), D2L EN's MTFraEng (641 pairs)
// and D2L ZH's load_data_nmt (601 pairs) (d2l_spec.md §2). Row-major int64 buffers, no Tensor.
// Shapes: N examples, T = num_steps.
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/fra_eng.h"
#include "qkv/data/split.h"
#include "qkv/data/vocab.h"

namespace qkv::data {

using Sentences = std::vector<std::vector<std::string>>;

/// One side as a padded id matrix.
struct SeqArray {
    int64_t rows = 0, num_steps = 0;
    std::vector<int64_t> ids;        // (N, T) row-major
    std::vector<int64_t> valid_len;  // (N): number of leading non-pad positions
};

/// D2L ZH build_array_nmt / the anchor's build_array: ids of each sentence (unknown -> <unk>),
/// then <eos>, truncated to num_steps (a sentence of >= num_steps tokens loses its tail and its
/// <eos>), padded with <pad>; valid_len = ids kept before padding. Throws qkv::Error when
/// num_steps < 1 or the vocabulary lacks <eos>/<pad>.
SeqArray build_array_nmt(const Sentences& sentences, const Vocab& vocab, int64_t num_steps);

/// Decoder input for teacher forcing: <bos> followed by label[:, :-1]. label: (N, T) -> (N, T).
std::vector<int64_t> decoder_input(const SeqArray& label, int64_t bos);

/// Everything a seq2seq training step needs, row-major int64.
struct NmtArrays {
    int64_t n = 0, num_steps = 0;
    std::vector<int64_t> src;            // (N, T) source ids + <eos>, padded
    std::vector<int64_t> src_valid_len;  // (N)
    std::vector<int64_t> dec_input;      // (N, T) <bos> + label[:-1]
    std::vector<int64_t> label;          // (N, T) target ids + <eos>, padded
    std::vector<int64_t> tgt_valid_len;  // (N) non-pad label positions
    /// Rows `rows` in that order (throws qkv::Error on an out-of-range row).
    NmtArrays subset(const std::vector<int64_t>& rows) const;
};

/// build_array_nmt on both sides plus decoder_input. Throws when the sides differ in length.
NmtArrays build_nmt_arrays(const Sentences& src, const Sentences& tgt, const Vocab& src_vocab,
                           const Vocab& tgt_vocab, int64_t num_steps);

// ---- the quality anchor (quality_anchor.md §2.1) ------------------------------------------------

struct AnchorConfig {
    int64_t num_steps = 12;
    int64_t min_freq  = 2;
    int64_t n_valid   = 2000;
    int64_t n_test    = 5000;
    uint64_t seed     = 0;
};

struct AnchorData {
    Sentences src_tokens, tgt_tokens;  // every pair, tokenize_nmt'd, pair order
    SplitIndices split;                // indices into the pairs
    Vocab src_vocab, tgt_vocab;        // frequency order, built on the train split only
    NmtArrays train, valid, test;      // rows in split order
};

/// The anchor's pipeline on a parsed corpus: tokenize_nmt both sides, shuffled_split(n, n_valid,
/// n_test, seed), Vocab::build over the train split (frequency order, <unk> <pad> <bos> <eos>,
/// min_freq), build_nmt_arrays per split. Full fra.txt: vocabularies 9,850 / 17,496.
AnchorData prepare_anchor_data(const ParallelCorpus& corpus, const AnchorConfig& cfg = {});

// ---- D2L EN: MTFraEng(batch_size, num_steps=9, num_train=512, num_val=128) ---------------------

struct D2lEnData {
    Vocab src_vocab, tgt_vocab;  // alphabetical; 194 / 214 tokens on fra.txt
    NmtArrays train, valid;      // rows 0..num_train-1 and the rest (512 / 129 on fra.txt)
};

/// D2L EN's pipeline: the pairs on the first num_train + num_val + 1 lines; tokens =
/// preprocess + (text + " <eos>").split(' ') without empties; each side padded/trimmed to
/// num_steps with <pad>; targets get <bos> in front after that; Vocab(min_freq=2, no reserved,
/// alphabetical) built on those padded lists; src_valid_len / tgt_valid_len = non-pad counts;
/// dec_input = tgt[:, :-1], label = tgt[:, 1:]. Throws when the corpus has fewer pairs than
/// num_train on those lines.
D2lEnData prepare_d2l_en(const ParallelCorpus& corpus, int64_t num_steps = 9,
                         int64_t num_train = 512, int64_t num_val = 128);

/// D2L EN's MTFraEng.build(src_sentences, tgt_sentences): arrays for new raw sentences with the
/// training vocabularies (same tokens, padding and <bos> rules as prepare_d2l_en). Example with
/// num_steps 9: "hi ." -> src "hi . <eos>" + 6 <pad>; "salut ." -> dec_input "<bos> salut .
/// <eos>" + 5 <pad>.
NmtArrays d2l_en_build(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                       const Vocab& src_vocab, const Vocab& tgt_vocab, int64_t num_steps = 9);

// ---- D2L ZH: load_data_nmt(batch_size, num_steps, num_examples=600) ----------------------------

struct D2lZhData {
    Sentences src_tokens, tgt_tokens;
    Vocab src_vocab, tgt_vocab;  // frequency order, <unk> <pad> <bos> <eos>; 184 / 201 on fra.txt
    NmtArrays data;              // all num_examples + 1 pairs (601), no split
};

/// D2L ZH's pipeline: pairs on the first num_examples + 1 lines, preprocess then split(' ')
/// keeping empty tokens, Vocab(min_freq=2, reserved <pad> <bos> <eos>) per side,
/// build_nmt_arrays(num_steps).
D2lZhData prepare_d2l_zh(const ParallelCorpus& corpus, int64_t num_steps = 10,
                         int64_t num_examples = 600);

}  // namespace qkv::data
