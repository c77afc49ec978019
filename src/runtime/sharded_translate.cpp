// Translating a test set over the ranks of a job (runtime/sharded_translate.h).
#include "qkv/runtime/sharded_translate.h"

#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/runtime/translate.h"

namespace qkv::runtime {

std::vector<std::vector<std::string>> translate_words(Translator& tr, const std::vector<std::vector<std::string>>& src,
                                                      const TranslateOptions& to) {
    std::vector<std::vector<std::string>> out;
    for (auto& nbest : tr.translate(src, to)) out.push_back(nbest.empty() ? std::vector<std::string>{} : nbest.front().words);
    return out;
}

std::vector<std::vector<std::string>> translate_words_sharded(dist::Communicator& comm, Translator& tr,
                                                              const std::vector<std::vector<std::string>>& src,
                                                              TranslateOptions to) {
    const int64_t ranks = comm.size(), rank = comm.rank(), n = int64_t(src.size());
    if (ranks == 1) return translate_words(tr, src, to);
    const int64_t b = n * rank / ranks, e = n * (rank + 1) / ranks;
    to.progress = to.progress && rank == 0;
    std::vector<std::vector<std::string>> part;
    if (e > b) part = translate_words(tr, {src.begin() + b, src.begin() + e}, to);
    std::string s;  // per sentence: "<words>;" then "<bytes>:<word>" per word
    for (const auto& h : part) {
        s += std::to_string(h.size()) + ';';
        for (const auto& w : h) s += std::to_string(w.size()) + ':' + w;
    }
    std::vector<std::vector<std::string>> out;
    out.reserve(src.size());
    for (const std::string& g : comm.allgather(s)) {
        size_t i = 0;
        const auto number = [&](char end) {
            const size_t j = g.find(end, i);
            QKV_CHECK(j != std::string::npos, "eval: a rank's translations are garbled (no '", end, "')");
            const size_t v = std::stoul(g.substr(i, j - i));
            i = j + 1;
            return v;
        };
        while (i < g.size()) {
            auto& h = out.emplace_back(number(';'));
            for (auto& w : h) {
                const size_t len = number(':');
                w = g.substr(i, len);
                i += len;
            }
        }
    }
    QKV_CHECK(int64_t(out.size()) == n, "eval: the ranks returned ", out.size(), " translations for ", n, " sources");
    return out;
}

std::vector<std::string> translate_texts_sharded(dist::Communicator& comm, Translator& tr,
                                                 const std::vector<std::string>& texts, const std::vector<bool>& skip,
                                                 const TranslateOptions& to) {
    const ModelDir& m = *tr.get();
    std::vector<data::SentenceSplit> layout(texts.size());
    std::vector<std::string> parts;
    for (size_t i = 0; i < texts.size(); ++i) {
        if (skip[i]) continue;
        layout[i] = split_text(m, texts[i]);
        for (const auto& s : layout[i].sentences) parts.push_back(s.text);
    }
    const auto words = tokenize_sentences(m, parts);
    std::vector<std::vector<std::string>> todo;
    for (const auto& w : words)
        if (!w.empty()) todo.push_back(w);
    const auto hyp = translate_words_sharded(comm, tr, todo, to);
    std::vector<std::string> out(texts.size());
    size_t p = 0, k = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
        std::vector<std::string> t;
        for (size_t j = 0; j < layout[i].sentences.size(); ++j, ++p)
            t.push_back(words[p].empty() ? std::string() : join_tokens(hyp[k++]));
        if (!t.empty()) out[i] = join_translations(layout[i], t);
    }
    return out;
}

std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> w;
    for (size_t b = 0; b < text.size();) {
        size_t e = text.find(' ', b);
        if (e == std::string::npos) e = text.size();
        if (e > b) w.push_back(text.substr(b, e - b));
        b = e + 1;
    }
    return w;
}

}  // namespace qkv::runtime
