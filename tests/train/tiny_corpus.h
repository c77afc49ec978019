#pragma once
// Eight English–French pairs (the book's four and four more), vocabularies with min_freq 1, and
// arrays for tests that train a tiny Transformer in about a second.
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/data/nmt_data.h"
#include "qkv/data/tokenizer.h"
#include "qkv/models/transformer.h"

namespace qkv::test {

struct TinyCorpus {
    data::Sentences src, tgt;
    data::Vocab src_vocab, tgt_vocab;
    data::NmtArrays arrays;
};

inline TinyCorpus tiny_corpus(int64_t num_steps = 8) {
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"Go.", "Va !"},           {"I lost.", "J'ai perdu."},      {"He's calm.", "Il est calme."},
        {"I'm home.", "Je suis chez moi."}, {"We won.", "Nous avons gagné."}, {"Run!", "Cours !"},
        {"Hello!", "Bonjour !"},   {"Thank you.", "Merci."}};
    TinyCorpus c;
    for (auto& [e, f] : pairs) {
        c.src.push_back(data::tokenize_nmt(e));
        c.tgt.push_back(data::tokenize_nmt(f));
    }
    data::VocabOptions vo;
    vo.min_freq  = 1;
    c.src_vocab  = data::Vocab::build(c.src, vo);
    c.tgt_vocab  = data::Vocab::build(c.tgt, vo);
    c.arrays     = data::build_nmt_arrays(c.src, c.tgt, c.src_vocab, c.tgt_vocab, num_steps);
    return c;
}

/// A small Transformer for the tiny corpus (dropout 0 unless given), built from `seed`.
inline models::TransformerConfig tiny_config(const TinyCorpus& c, double dropout = 0.0) {
    models::TransformerConfig cfg;
    cfg.src_vocab_size  = c.src_vocab.size();
    cfg.tgt_vocab_size  = c.tgt_vocab.size();
    cfg.num_hiddens     = 32;
    cfg.num_blks        = 2;
    cfg.num_heads       = 4;
    cfg.ffn_num_hiddens = 64;
    cfg.dropout         = dropout;
    return cfg;
}

}  // namespace qkv::test
