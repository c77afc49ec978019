// BLEU (decode/bleu.h). n-grams are counted in hash maps keyed by the tokens joined with '\x1f'
// (a separator that cannot occur inside a token split on spaces).
#include "qkv/decode/bleu.h"

#include <cmath>
#include <unordered_map>

#include "qkv/core/error.h"

namespace qkv::decode {
namespace {

std::vector<std::string> split_space(std::string_view s) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t p = s.find(' ', start);
        out.emplace_back(s.substr(start, p == std::string_view::npos ? s.npos : p - start));
        if (p == std::string_view::npos) break;
        start = p + 1;
    }
    return out;
}

std::string ngram_key(const std::vector<std::string>& t, size_t i, size_t n) {
    std::string k = t[i];
    for (size_t j = 1; j < n; ++j) {
        k += '\x1f';
        k += t[i + j];
    }
    return k;
}

std::unordered_map<std::string, int64_t> ngram_counts(const std::vector<std::string>& t, size_t n) {
    std::unordered_map<std::string, int64_t> c;
    for (size_t i = 0; i + n <= t.size(); ++i) ++c[ngram_key(t, i, n)];
    return c;
}

}  // namespace

double d2l_bleu(const std::vector<std::string>& pred, const std::vector<std::string>& label,
                int k) {
    QKV_CHECK(k >= 1, "d2l_bleu: k must be >= 1, got ", k);
    const size_t lp = pred.size(), ll = label.size();
    if (lp == 0) return 0.0;  // unreachable through the string overload ("" is one token)
    double score = std::exp(std::min(0.0, 1.0 - double(ll) / double(lp)));
    for (size_t n = 1; n <= std::min<size_t>(size_t(k), lp); ++n) {
        auto subs = ngram_counts(label, n);
        int64_t matches = 0;
        for (size_t i = 0; i + n <= lp; ++i) {
            auto it = subs.find(ngram_key(pred, i, n));
            if (it != subs.end() && it->second > 0) {
                ++matches;
                --it->second;
            }
        }
        score *= std::pow(double(matches) / double(lp - n + 1), std::pow(0.5, double(n)));
    }
    return score;
}

double d2l_bleu(std::string_view pred, std::string_view label, int k) {
    return d2l_bleu(split_space(pred), split_space(label), k);
}

CorpusBleu corpus_bleu(const std::vector<std::vector<std::string>>& hyps,
                       const std::vector<std::vector<std::string>>& refs) {
    QKV_CHECK(hyps.size() == refs.size(), "corpus_bleu: ", hyps.size(), " hypotheses but ",
              refs.size(), " references");
    CorpusBleu r;
    for (size_t s = 0; s < hyps.size(); ++s) {
        const auto& h = hyps[s];
        r.hyp_len += int64_t(h.size());
        r.ref_len += int64_t(refs[s].size());
        for (size_t n = 1; n <= 4; ++n) {
            if (h.size() < n) continue;
            const auto hc = ngram_counts(h, n);
            const auto rc = ngram_counts(refs[s], n);
            for (const auto& [g, cnt] : hc) {
                const auto it = rc.find(g);
                if (it != rc.end()) r.matches[n - 1] += std::min(cnt, it->second);
            }
            r.totals[n - 1] += int64_t(h.size() - n + 1);
        }
    }
    double log_sum = 0;
    bool any_zero  = false;
    for (size_t n = 0; n < 4; ++n) {
        r.precisions[n] = r.totals[n] ? double(r.matches[n]) / double(r.totals[n]) : 0.0;
        if (r.precisions[n] > 0)
            log_sum += std::log(r.precisions[n]);
        else
            any_zero = true;
    }
    const double c = double(r.hyp_len), ref = double(r.ref_len);
    r.bp   = c > ref ? 1.0 : (c > 0 ? std::exp(1.0 - ref / c) : 0.0);
    r.bleu = any_zero ? 0.0 : r.bp * std::exp(log_sum / 4.0);
    return r;
}

}  // namespace qkv::decode
