// Arrays and the anchor / D2L EN / D2L ZH setups (data/nmt_data.h).
#include "qkv/data/nmt_data.h"

#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"

namespace qkv::data {

SeqArray build_array_nmt(const Sentences& sentences, const Vocab& vocab, int64_t num_steps) {
    QKV_CHECK(num_steps >= 1, "build_array_nmt: num_steps must be >= 1, got ", num_steps);
    const int64_t eos = vocab.eos(), pad = vocab.pad();
    SeqArray a;
    a.rows      = int64_t(sentences.size());
    a.num_steps = num_steps;
    a.ids.assign(size_t(a.rows * num_steps), pad);
    a.valid_len.resize(size_t(a.rows));
    for (int64_t r = 0; r < a.rows; ++r) {
        const auto& s = sentences[size_t(r)];
        int64_t* row  = a.ids.data() + r * num_steps;
        int64_t k     = 0;
        for (; k < num_steps && k < int64_t(s.size()); ++k) row[k] = vocab.token_to_idx(s[size_t(k)]);
        if (k < num_steps) row[k++] = eos;
        a.valid_len[size_t(r)] = k;
    }
    return a;
}

std::vector<int64_t> decoder_input(const SeqArray& label, int64_t bos) {
    const int64_t T = label.num_steps;
    std::vector<int64_t> out(label.ids.size());
    for (int64_t r = 0; r < label.rows; ++r) {
        out[size_t(r * T)] = bos;
        for (int64_t t = 1; t < T; ++t) out[size_t(r * T + t)] = label.ids[size_t(r * T + t - 1)];
    }
    return out;
}

NmtArrays NmtArrays::subset(const std::vector<int64_t>& rows) const {
    NmtArrays o;
    o.n         = int64_t(rows.size());
    o.num_steps = num_steps;
    const size_t T = size_t(num_steps);
    for (auto* v : {&o.src, &o.dec_input, &o.label}) v->reserve(rows.size() * T);
    o.src_valid_len.reserve(rows.size());
    o.tgt_valid_len.reserve(rows.size());
    for (int64_t r : rows) {
        QKV_CHECK(r >= 0 && r < n, "NmtArrays::subset: row ", r, " out of range [0, ", n, ")");
        const size_t b = size_t(r) * T;
        o.src.insert(o.src.end(), src.begin() + long(b), src.begin() + long(b + T));
        o.dec_input.insert(o.dec_input.end(), dec_input.begin() + long(b),
                           dec_input.begin() + long(b + T));
        o.label.insert(o.label.end(), label.begin() + long(b), label.begin() + long(b + T));
        o.src_valid_len.push_back(src_valid_len[size_t(r)]);
        o.tgt_valid_len.push_back(tgt_valid_len[size_t(r)]);
    }
    return o;
}

NmtArrays build_nmt_arrays(const Sentences& src, const Sentences& tgt, const Vocab& src_vocab,
                           const Vocab& tgt_vocab, int64_t num_steps) {
    QKV_CHECK(src.size() == tgt.size(), "build_nmt_arrays: ", src.size(), " source but ",
              tgt.size(), " target sentences");
    SeqArray s = build_array_nmt(src, src_vocab, num_steps);
    SeqArray t = build_array_nmt(tgt, tgt_vocab, num_steps);
    NmtArrays a;
    a.n             = s.rows;
    a.num_steps     = num_steps;
    a.dec_input     = decoder_input(t, tgt_vocab.bos());
    a.src           = std::move(s.ids);
    a.src_valid_len = std::move(s.valid_len);
    a.label         = std::move(t.ids);
    a.tgt_valid_len = std::move(t.valid_len);
    return a;
}

AnchorData prepare_anchor_data(const ParallelCorpus& corpus, const AnchorConfig& cfg) {
    AnchorData d;
    d.src_tokens.reserve(corpus.src.size());
    d.tgt_tokens.reserve(corpus.tgt.size());
    for (int64_t i = 0; i < corpus.size(); ++i) {
        d.src_tokens.push_back(tokenize_nmt(corpus.src[size_t(i)]));
        d.tgt_tokens.push_back(tokenize_nmt(corpus.tgt[size_t(i)]));
    }
    d.split = shuffled_split(corpus.size(), cfg.n_valid, cfg.n_test, cfg.seed);
    VocabOptions vo;
    vo.min_freq = cfg.min_freq;
    d.src_vocab = Vocab::build(d.src_tokens, d.split.train, vo);
    d.tgt_vocab = Vocab::build(d.tgt_tokens, d.split.train, vo);
    // Arrays of every pair once, then the three splits as row subsets.
    const NmtArrays all =
        build_nmt_arrays(d.src_tokens, d.tgt_tokens, d.src_vocab, d.tgt_vocab, cfg.num_steps);
    d.train = all.subset(d.split.train);
    d.valid = all.subset(d.split.valid);
    d.test  = all.subset(d.split.test);
    return d;
}

namespace {

// EN's pad_or_trim: seq[:t] if longer, else seq + ['<pad>'] * (t - len).
std::vector<std::string> pad_or_trim(std::vector<std::string> s, int64_t t) {
    s.resize(size_t(t), Vocab::kPad);
    return s;
}

// Ids of padded token lists (N, width) and the count of non-<pad> ids per row.
void to_ids(const Sentences& rows, const Vocab& v, std::vector<int64_t>& ids,
            std::vector<int64_t>& valid) {
    const int64_t pad = v.pad();
    for (const auto& r : rows) {
        int64_t k = 0;
        for (const auto& t : r) {
            ids.push_back(v.token_to_idx(t));
            k += ids.back() != pad;
        }
        valid.push_back(k);
    }
}

}  // namespace

namespace {

// EN's tokens: preprocess, append " <eos>", split on ' ' without empties, pad/trim; targets get
// <bos> in front after that (width num_steps + 1).
std::vector<std::string> d2l_en_tokens(const std::string& text, int64_t num_steps, bool is_tgt) {
    auto t = pad_or_trim(split_tokens(preprocess_nmt(text) + " <eos>", true), num_steps);
    if (is_tgt) t.insert(t.begin(), Vocab::kBos);
    return t;
}

NmtArrays d2l_en_arrays(const Sentences& src, const Sentences& tgt, const Vocab& src_vocab,
                        const Vocab& tgt_vocab, int64_t num_steps) {
    NmtArrays all;
    all.n         = int64_t(src.size());
    all.num_steps = num_steps;
    to_ids(src, src_vocab, all.src, all.src_valid_len);
    std::vector<int64_t> tgt_ids, tgt_valid;  // (N, T + 1)
    to_ids(tgt, tgt_vocab, tgt_ids, tgt_valid);
    const int64_t pad = tgt_vocab.pad();
    for (int64_t r = 0; r < all.n; ++r) {
        const int64_t* row = tgt_ids.data() + r * (num_steps + 1);
        all.dec_input.insert(all.dec_input.end(), row, row + num_steps);
        all.label.insert(all.label.end(), row + 1, row + num_steps + 1);
        int64_t k = 0;
        for (int64_t t = 1; t <= num_steps; ++t) k += row[t] != pad;
        all.tgt_valid_len.push_back(k);
    }
    return all;
}

}  // namespace

D2lEnData prepare_d2l_en(const ParallelCorpus& corpus, int64_t num_steps, int64_t num_train,
                         int64_t num_val) {
    QKV_CHECK(num_steps >= 1 && num_train >= 1 && num_val >= 0,
              "prepare_d2l_en: bad sizes (num_steps ", num_steps, ", num_train ", num_train,
              ", num_val ", num_val, ")");
    const int64_t max_examples = num_train + num_val;
    Sentences src, tgt;  // padded, as EN builds its vocabulary on them
    for (int64_t i = 0; i < corpus.size() && corpus.line[size_t(i)] <= max_examples; ++i) {
        src.push_back(d2l_en_tokens(corpus.src[size_t(i)], num_steps, false));
        tgt.push_back(d2l_en_tokens(corpus.tgt[size_t(i)], num_steps, true));
    }
    const int64_t n = int64_t(src.size());
    QKV_CHECK(n >= num_train, "'", corpus.origin, "' has only ", n, n == 1 ? " sentence pair" : " sentence pairs",
              " in its first ", max_examples + 1, " lines, fewer than the ", num_train,
              " that D2L EN's split trains on (the d2l preset reads the first num_train + num_val = ", max_examples,
              " pairs): use a larger data file, or another preset");
    VocabOptions vo;
    vo.min_freq = 2;
    vo.reserved = {};
    vo.order    = VocabOrder::alphabetical;
    D2lEnData d;
    d.src_vocab = Vocab::build(src, vo);
    d.tgt_vocab = Vocab::build(tgt, vo);
    const NmtArrays all = d2l_en_arrays(src, tgt, d.src_vocab, d.tgt_vocab, num_steps);
    std::vector<int64_t> tr, va;
    for (int64_t i = 0; i < n; ++i) (i < num_train ? tr : va).push_back(i);
    d.train = all.subset(tr);
    d.valid = all.subset(va);
    return d;
}

NmtArrays d2l_en_build(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                       const Vocab& src_vocab, const Vocab& tgt_vocab, int64_t num_steps) {
    QKV_CHECK(src.size() == tgt.size(), "d2l_en_build: ", src.size(), " source but ", tgt.size(),
              " target sentences");
    QKV_CHECK(num_steps >= 1, "d2l_en_build: num_steps must be >= 1, got ", num_steps);
    Sentences s, t;
    for (size_t i = 0; i < src.size(); ++i) {
        s.push_back(d2l_en_tokens(src[i], num_steps, false));
        t.push_back(d2l_en_tokens(tgt[i], num_steps, true));
    }
    return d2l_en_arrays(s, t, src_vocab, tgt_vocab, num_steps);
}

D2lZhData prepare_d2l_zh(const ParallelCorpus& corpus, int64_t num_steps, int64_t num_examples) {
    D2lZhData d;
    for (int64_t i = 0; i < corpus.size() && corpus.line[size_t(i)] <= num_examples; ++i) {
        d.src_tokens.push_back(split_tokens(preprocess_nmt(corpus.src[size_t(i)]), false));
        d.tgt_tokens.push_back(split_tokens(preprocess_nmt(corpus.tgt[size_t(i)]), false));
    }
    d.src_vocab = Vocab::build(d.src_tokens);
    d.tgt_vocab = Vocab::build(d.tgt_tokens);
    d.data = build_nmt_arrays(d.src_tokens, d.tgt_tokens, d.src_vocab, d.tgt_vocab, num_steps);
    return d;
}

}  // namespace qkv::data
