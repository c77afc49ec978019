#pragma once
// A held-out split without source overlap (issue 45 item 2). Tatoeba's fra.txt repeats an English
// sentence with each of its French translations ("Go." has several), so a split of pairs, such as
// the quality anchor's (data/split.h), puts the same source in training and test; a test set
// then partly measures recall of training pairs. This split draws distinct sources instead.
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::data {

struct SourceDisjointSplit {
    /// Pair indices (into the `sources` given). train: every pair of the training sources, in
    /// file order; valid and test: one pair per held-out source, in the shuffled group order
    /// (Python: test groups = idx[-n_test:], valid groups = idx[-(n_test + n_valid):-n_test]).
    std::vector<int64_t> train, valid, test;
    int64_t distinct_sources = 0;  // groups of equal sources (after normalization)
    /// Pairs of held-out sources other than the one drawn (their other translations): in no
    /// split, so that no held-out source is trained on.
    int64_t unused = 0;
};

/// Groups the pairs by source sentence, comparing normalize_nmt_nfkc(source) (data/text.h:
/// "Go." , "Go. " and "Go.\u00a0" are one source; a source that is not valid UTF-8 is compared as
/// its bytes), numbered by first occurrence in file order. The groups are shuffled as Python's
/// random.Random(seed).shuffle(list(range(groups))) (data::shuffled_indices); the last n_test
/// groups of that order are the test sources and the n_valid before them the validation
/// sources, each represented by its first pair in file order; every pair of the other groups is
/// training data. So no validation or test source occurs in training, valid and test share no
/// source, and a held-out sentence is drawn uniformly among distinct sources (a split of pairs
/// would favour sources with many translations). train + valid + test + unused = all pairs.
/// Throws qkv::Error when n_valid or n_test is negative, or fewer than n_valid + n_test + 1
/// distinct sources exist (training would be empty).
SourceDisjointSplit source_disjoint_split(const std::vector<std::string>& sources, int64_t n_valid,
                                          int64_t n_test, uint64_t seed = 0);

}  // namespace qkv::data
