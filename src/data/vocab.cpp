// Vocab (data/vocab.h).
#include "qkv/data/vocab.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"

namespace qkv::data {

Vocab::Vocab() : Vocab(std::vector<std::string>{kUnk}) {}

Vocab::Vocab(std::vector<std::string> idx_to_token) : idx_to_token_(std::move(idx_to_token)) {
    token_to_idx_.reserve(idx_to_token_.size());
    for (size_t i = 0; i < idx_to_token_.size(); ++i)
        QKV_CHECK(token_to_idx_.emplace(idx_to_token_[i], int64_t(i)).second,
                  "Vocab: token \"", idx_to_token_[i], "\" appears twice (indices ",
                  token_to_idx_[idx_to_token_[i]], " and ", i, ")");
    const auto it = token_to_idx_.find(kUnk);
    QKV_CHECK(it != token_to_idx_.end(), "Vocab: the token list has no \"<unk>\"");
    unk_ = it->second;
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sentences,
                   const VocabOptions& opt) {
    std::vector<int64_t> rows(sentences.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = int64_t(i);
    return build(sentences, rows, opt);
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sentences,
                   const std::vector<int64_t>& rows, const VocabOptions& opt) {
    // Counter in first-occurrence order (Python's Counter keeps insertion order).
    std::unordered_map<std::string_view, size_t> slot;
    std::vector<std::pair<std::string_view, int64_t>> counts;
    for (int64_t r : rows) {
        QKV_CHECK(r >= 0 && r < int64_t(sentences.size()), "Vocab::build: row ", r,
                  " out of range [0, ", sentences.size(), ")");
        for (const auto& t : sentences[size_t(r)]) {
            auto [it, fresh] = slot.emplace(t, counts.size());
            if (fresh) counts.emplace_back(t, 0);
            ++counts[it->second].second;
        }
    }
    std::vector<std::string> list;
    if (opt.order == VocabOrder::frequency) {
        std::stable_sort(counts.begin(), counts.end(),
                         [](const auto& a, const auto& b) { return a.second > b.second; });
        list.push_back(kUnk);
        list.insert(list.end(), opt.reserved.begin(), opt.reserved.end());
        const std::unordered_set<std::string> have(list.begin(), list.end());
        for (const auto& [tok, c] : counts) {
            if (c < opt.min_freq) break;
            if (!have.count(std::string(tok))) list.emplace_back(tok);
        }
    } else {
        list.push_back(kUnk);
        list.insert(list.end(), opt.reserved.begin(), opt.reserved.end());
        for (const auto& [tok, c] : counts)
            if (c >= opt.min_freq) list.emplace_back(tok);
        std::sort(list.begin(), list.end());
        list.erase(std::unique(list.begin(), list.end()), list.end());
    }
    return Vocab(std::move(list));
}

int64_t Vocab::token_to_idx(std::string_view token) const {
    const auto it = token_to_idx_.find(std::string(token));
    return it == token_to_idx_.end() ? unk_ : it->second;
}

bool Vocab::contains(std::string_view token) const {
    return token_to_idx_.count(std::string(token)) != 0;
}

const std::string& Vocab::idx_to_token(int64_t idx) const {
    QKV_CHECK(idx >= 0 && idx < size(), "Vocab: index ", idx, " out of range [0, ", size(), ")");
    return idx_to_token_[size_t(idx)];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens) const {
    std::vector<int64_t> out;
    out.reserve(tokens.size());
    for (const auto& t : tokens) out.push_back(token_to_idx(t));
    return out;
}

std::vector<std::string> Vocab::decode(const std::vector<int64_t>& ids) const {
    std::vector<std::string> out;
    out.reserve(ids.size());
    for (int64_t i : ids) out.push_back(idx_to_token(i));
    return out;
}

int64_t Vocab::special(const char* tok) const {
    const auto it = token_to_idx_.find(tok);
    QKV_CHECK(it != token_to_idx_.end(), "Vocab: no \"", tok, "\" token in this vocabulary");
    return it->second;
}

void Vocab::save(const std::string& path) const {
    std::string text;
    for (const auto& t : idx_to_token_) {
        QKV_CHECK(t.find('\n') == std::string::npos, "Vocab::save: '", path,
                  "': a token contains a newline");
        text += t;
        text += '\n';
    }
    util::write_file_atomic(path, text);
}

Vocab Vocab::load(const std::string& path) {
    const std::string text = util::read_file(path);
    const std::string file = "the vocabulary file '" + path + "'";
    QKV_CHECK(!text.empty(), file, " is empty (one token per line expected)");
    QKV_CHECK(text.back() == '\n', file, " does not end with a newline: it is truncated (one token per line, each "
              "line ending with a newline, expected)");
    // Windows line endings ("\r\n" on every line, as an editor or a Windows tool writes them) are
    // read as "\n". save() writes "\n" only, and its "<unk>" line has no '\r', so a file it wrote
    // is never CRLF throughout: a token of its own that ends with '\r' keeps it.
    bool crlf = true;
    for (size_t p = text.find('\n'); crlf && p != std::string::npos; p = text.find('\n', p + 1))
        crlf = p > 0 && text[p - 1] == '\r';
    std::vector<std::string> list;
    std::unordered_map<std::string, int64_t> line_of;  // token -> its 1-based line
    size_t start = 0;
    while (start < text.size()) {
        const size_t p = text.find('\n', start);
        list.emplace_back(text.substr(start, p - start - (crlf ? 1 : 0)));
        start = p + 1;
        const auto [it, fresh] = line_of.emplace(list.back(), int64_t(list.size()));
        QKV_CHECK(fresh, path, ":", list.size(), ": the token \"", list.back(), "\" is also on line ", it->second,
                  " (each token must appear once: the vocabulary file is damaged)");
    }
    if (line_of.count(kUnk) == 0) {
        const auto cr = line_of.find(std::string(kUnk) + "\r");
        QKV_CHECK(cr == line_of.end(), path, ":", cr->second, ": line ", cr->second, " ends with CR (Windows line "
                  "endings on some lines only): \"", kUnk, "\" is not found; convert the file to one kind of line "
                  "ending");
        throw Error(detail::str(file, " has no \"", kUnk, "\" line (every qkv vocabulary has one)"));
    }
    return Vocab(std::move(list));
}

}  // namespace qkv::data
