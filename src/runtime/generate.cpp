#include "qkv/runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/decode/generate.h"
#include "qkv/models/lm.h"

namespace qkv::runtime {

std::string preprocess_lm_text(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    bool space = false;
    for (unsigned char ch : text) {
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            if (space && !out.empty()) out += ' ';
            space = false;
            out += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        } else {
            space = true;
        }
    }
    return out;
}

std::string generate_text(const ModelDir& m, const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(const std::string&)>& on_token) {
    QKV_CHECK(opt.max_new_tokens >= 0, "generate: --max-new-tokens must be >= 0, got ", opt.max_new_tokens);
    QKV_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0, "generate: --temperature must be >= 0, got ",
              opt.temperature);
    QKV_CHECK(opt.top_k >= 0 && opt.top_p > 0 && opt.top_p <= 1, "generate: --top-k must be >= 0 and --top-p in (0, 1]");
    const std::string text = preprocess_lm_text(prompt);
    std::vector<int64_t> ids;
    std::set<char> unknown;
    for (char ch : text) {
        const int64_t id = m.tgt_vocab.token_to_idx(std::string(1, ch));
        if (id == m.tgt_vocab.unk()) unknown.insert(ch);
        ids.push_back(id);
    }
    QKV_CHECK(unknown.empty(), "generate: the prompt holds characters the model never saw: '",
              std::string(unknown.begin(), unknown.end()), "'");
    QKV_CHECK(!(ids.empty() && !prompt.empty()), "generate: --prompt '", prompt, "' has no ASCII letter: D2L's preprocessing "
              "keeps only a-z and spaces (other letters, digits and punctuation become spaces), so it would start "
              "from nothing; give a prompt with English words");
    if (!m.config.lm.rope) {
        QKV_CHECK(int64_t(ids.size()) <= m.config.lm.max_len, "generate: the prompt is ", ids.size(), " characters "
                  "after preprocessing, but this model's sinusoidal positions stop at ", m.config.lm.max_len,
                  " (model.max_len); shorten --prompt to at most ", m.config.lm.max_len, " characters");
        const int64_t need = std::max<int64_t>(int64_t(ids.size()), 1) + opt.max_new_tokens;
        QKV_CHECK(need <= m.config.lm.max_len, "generate: the prompt (", ids.size(), " characters) plus "
                  "--max-new-tokens ", opt.max_new_tokens, " is ", need, " positions, but this model's sinusoidal "
                  "positions stop at ", m.config.lm.max_len, " (model.max_len); shorten --prompt or lower "
                  "--max-new-tokens to ", std::max<int64_t>(0, m.config.lm.max_len - std::max<int64_t>(int64_t(ids.size()), 1)));
    }
    if (ids.empty()) ids.push_back(m.tgt_vocab.token_to_idx(" "));  // an empty prompt starts at a word boundary
    std::string out;
    if (opt.max_new_tokens == 0) return out;
    decode::DecodeOptions d;
    // A language model has no <eos>: <pad> stands for it, never emitted (min_len = max_len), and
    // <unk> is banned. The prompt is the state's input (its <bos> is not read).
    d.bos = d.eos = m.tgt_vocab.pad();
    d.max_len = d.min_len = opt.max_new_tokens;
    d.banned  = {m.tgt_vocab.unk()};
    d.scores  = false;
    if (opt.temperature > 0) {
        d.sampling.enabled = true, d.sampling.temperature = opt.temperature, d.sampling.top_k = opt.top_k;
        d.sampling.top_p = opt.top_p, d.sampling.seed = opt.seed, d.sampling.keyed_by_source = false;
    }
    d.on_token = [&](int64_t, int64_t id) {
        const std::string piece = m.tgt_vocab.idx_to_token(id);
        out += piece;
        if (on_token) on_token(piece);
    };
    m.lm->set_recompute_prefix(!opt.use_cache);
    const auto n = int64_t(ids.size());
    decode::generate(*m.lm, from_vector(ids, {1, n}), from_vector(std::vector<int64_t>{n}, {1}), d);
    return out;
}

}  // namespace qkv::runtime
