// DataConfig -> TranslationData: read, filter, split, vocabularies, arrays.
#include "qkv/train/translation_data.h"

#include <algorithm>

#include "qkv/core/error.h"
#include "qkv/data/fra_eng.h"
#include "qkv/data/tokenizer.h"

namespace qkv::train {

data::SeqArray encode_sources(const data::Sentences& tokens, const data::Vocab& src_vocab,
                              int64_t num_steps) {
    return data::build_array_nmt(tokens, src_vocab, num_steps);
}

TranslationData load_translation_data(const DataConfig& cfg) {
    QKV_CHECK(cfg.num_steps >= 2, "data: num_steps must be >= 2, got ", cfg.num_steps);
    QKV_CHECK(cfg.max_src_tokens >= 0 && cfg.max_tgt_tokens >= 0 && cfg.max_pairs >= 0,
              "data: max-src-tokens, max-tgt-tokens and max-pairs must be >= 0");
    QKV_CHECK(cfg.n_valid >= 1 && cfg.n_test >= 1, "data: n_valid and n_test must be >= 1");
    TranslationData out;
    out.origin = data::locate_fra_eng(cfg.path);
    data::ParseOptions po;
    po.strict = cfg.strict;

    if (cfg.pipeline == DataPipeline::d2l_en) {
        QKV_CHECK(cfg.d2l_num_train >= 1 && cfg.d2l_num_val >= 0, "data: bad d2l_en split sizes");
        po.max_lines = cfg.d2l_num_train + cfg.d2l_num_val + 1;
        data::ParallelCorpus corpus = data::load_fra_eng(out.origin, po);
        out.malformed = corpus.malformed;
        data::D2lEnData d = data::prepare_d2l_en(corpus, cfg.num_steps, cfg.d2l_num_train, cfg.d2l_num_val);
        out.src_vocab = std::move(d.src_vocab);
        out.tgt_vocab = std::move(d.tgt_vocab);
        out.train     = std::move(d.train);
        out.valid     = std::move(d.valid);
        out.test      = out.valid;
        for (int64_t i = cfg.d2l_num_train; i < corpus.size(); ++i) {
            out.test_src.push_back(data::tokenize_nmt(corpus.src[size_t(i)]));
            out.test_ref.push_back(data::tokenize_nmt(corpus.tgt[size_t(i)]));
        }
        out.pairs   = out.train.n + out.valid.n;
        out.summary = corpus.summary() + "; D2L EN split " + std::to_string(out.train.n) + " train / " +
                      std::to_string(out.valid.n) + " valid (the valid pairs are the held-out set)";
        return out;
    }

    data::ParallelCorpus corpus = data::load_fra_eng(out.origin, po);
    out.malformed = corpus.malformed;
    std::string summary = corpus.summary();
    if (cfg.max_src_tokens > 0 || cfg.max_tgt_tokens > 0 || cfg.max_pairs > 0) {
        data::ParallelCorpus kept;
        kept.origin     = corpus.origin;
        kept.lines_read = corpus.lines_read;
        kept.malformed  = corpus.malformed;
        for (int64_t i = 0; i < corpus.size(); ++i) {
            if (cfg.max_pairs > 0 && kept.size() >= cfg.max_pairs) break;
            const std::string& s = corpus.src[size_t(i)];
            const std::string& t = corpus.tgt[size_t(i)];
            if (cfg.max_src_tokens > 0 && int64_t(data::tokenize_nmt(s).size()) > cfg.max_src_tokens) continue;
            if (cfg.max_tgt_tokens > 0 && int64_t(data::tokenize_nmt(t).size()) > cfg.max_tgt_tokens) continue;
            kept.src.push_back(s);
            kept.tgt.push_back(t);
            kept.line.push_back(corpus.line[size_t(i)]);
        }
        summary += "; kept " + std::to_string(kept.size()) + " pairs";
        if (cfg.max_src_tokens > 0) summary += ", source <= " + std::to_string(cfg.max_src_tokens) + " tokens";
        if (cfg.max_tgt_tokens > 0) summary += ", target <= " + std::to_string(cfg.max_tgt_tokens) + " tokens";
        if (cfg.max_pairs > 0) summary += ", first " + std::to_string(cfg.max_pairs);
        corpus = std::move(kept);
    }
    const int64_t n = corpus.size();
    QKV_CHECK(n >= 3, "data: only ", n, " pairs in ", out.origin, " after filtering; need at least 3");
    data::AnchorConfig ac;
    ac.num_steps = cfg.num_steps;
    ac.min_freq  = cfg.min_freq;
    ac.n_valid   = cfg.n_valid;
    ac.n_test    = cfg.n_test;
    ac.seed      = cfg.split_seed;
    if (n < 4 * (cfg.n_valid + cfg.n_test)) {
        ac.n_valid = std::max<int64_t>(1, n / 10);
        ac.n_test  = std::max<int64_t>(1, n / 10);
        summary += "; small corpus: valid and test shrunk to " + std::to_string(ac.n_valid) + " pairs each";
    }
    data::AnchorData d = data::prepare_anchor_data(corpus, ac);
    out.src_vocab = std::move(d.src_vocab);
    out.tgt_vocab = std::move(d.tgt_vocab);
    out.train     = std::move(d.train);
    out.valid     = std::move(d.valid);
    out.test      = std::move(d.test);
    for (int64_t i : d.split.test) {
        out.test_src.push_back(d.src_tokens[size_t(i)]);
        out.test_ref.push_back(d.tgt_tokens[size_t(i)]);
    }
    out.pairs   = n;
    out.summary = summary + "; split " + std::to_string(out.train.n) + " train / " +
                  std::to_string(out.valid.n) + " valid / " + std::to_string(out.test.n) +
                  " test (seed " + std::to_string(cfg.split_seed) + ")";
    return out;
}

}  // namespace qkv::train
