// sacreBLEU's corpus BLEU (13a, exp smoothing) and chrF / chrF++ (decode/sacrebleu.h).
// The 13a regexes run on UTF-8 bytes: every pattern's fixed characters are ASCII and a
// multi-byte character's bytes are all >= 0x80, so a byte scan makes the same replacements as
// Python's code-point scan (a lead or continuation byte is a "non-digit" exactly where the
// whole character is). chrF counts code points, so it decodes.
#include "qkv/decode/sacrebleu.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>

#include <utf8proc.h>

#include "qkv/core/error.h"

namespace qkv::decode {
namespace {

/// Code points of valid UTF-8 `s`, or throws naming the line.
std::vector<char32_t> decode_utf8(std::string_view s, const char* what, size_t line) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
    while (left > 0) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
        QKV_CHECK(n > 0 && cp >= 0, what, " ", line, " is not valid UTF-8 (byte offset ",
                  s.size() - size_t(left), ")");
        out.push_back(char32_t(cp));
        p += n;
        left -= n;
    }
    return out;
}

void check_utf8(std::string_view s, const char* what, size_t line) { (void)decode_utf8(s, what, line); }

/// Python's str.isspace() (what str.split() and str.rstrip() remove).
bool is_py_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

void append_utf8(std::string& out, char32_t cp) {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

/// Python's s.split() on code points: the words, re-encoded.
std::vector<std::string> py_split(const std::vector<char32_t>& cps) {
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    for (char32_t c : cps) {
        if (is_py_space(c)) {
            if (in_word) words.push_back(std::move(cur));
            cur.clear();
            in_word = false;
        } else {
            append_utf8(cur, c);
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(cur));
    return words;
}

/// Python's s.rstrip() (valid UTF-8 in, byte length of the kept prefix out).
size_t py_rstrip_len(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t start = end - 1;  // back to the lead byte of the last character
        while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        utf8proc_int32_t cp;
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + start),
                         utf8proc_ssize_t(end - start), &cp);
        if (!is_py_space(char32_t(cp))) break;
        end = start;
    }
    return end;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::string out;
    size_t pos = 0;
    for (;;) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out.append(to);
        pos = hit + from.size();
    }
    if (pos == 0) return;
    out.append(s, pos, std::string::npos);
    s = std::move(out);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// [\{-\~\[-\` -\&\(-\+\:-\@\/]: the ASCII punctuation 13a isolates.
bool is_13a_punct(char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
           (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

std::string tokenize_13a_valid(std::string_view input) {
    std::string line(input);
    replace_all(line, "<skipped>", "");
    replace_all(line, "-\n", "");
    replace_all(line, "\n", " ");
    if (line.find('&') != std::string::npos) {
        replace_all(line, "&quot;", "\"");
        replace_all(line, "&amp;", "&");
        replace_all(line, "&lt;", "<");
        replace_all(line, "&gt;", ">");
    }
    std::string s = " " + line + " ";
    std::string t;
    t.reserve(s.size() * 2);
    for (char c : s) {  // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '
        if (is_13a_punct(c)) {
            t += ' ';
            t += c;
            t += ' ';
        } else {
            t += c;
        }
    }
    s.clear();
    for (size_t i = 0; i < t.size();) {  // ([^0-9])([\.,]) -> '\1 \2 '
        if (!is_digit(t[i]) && i + 1 < t.size() && (t[i + 1] == '.' || t[i + 1] == ',')) {
            s += t[i];
            s += ' ';
            s += t[i + 1];
            s += ' ';
            i += 2;
        } else {
            s += t[i++];
        }
    }
    t.clear();
    for (size_t i = 0; i < s.size();) {  // ([\.,])([^0-9]) -> ' \1 \2'
        if ((s[i] == '.' || s[i] == ',') && i + 1 < s.size() && !is_digit(s[i + 1])) {
            t += ' ';
            t += s[i];
            t += ' ';
            t += s[i + 1];
            i += 2;
        } else {
            t += s[i++];
        }
    }
    s.clear();
    for (size_t i = 0; i < t.size();) {  // ([0-9])(-) -> '\1 \2 '
        if (is_digit(t[i]) && i + 1 < t.size() && t[i + 1] == '-') {
            s += t[i];
            s += " - ";
            i += 2;
        } else {
            s += t[i++];
        }
    }
    // ' '.join(line.split()): the text is still valid UTF-8 (only ASCII spaces were inserted).
    const std::vector<std::string> words = py_split(decode_utf8(s, "line", 0));
    std::string out;
    for (size_t i = 0; i < words.size(); ++i) {
        if (i) out += ' ';
        out += words[i];
    }
    return out;
}

void check_sizes(const char* fn, size_t hyps, size_t refs) {
    QKV_CHECK(hyps == refs, fn, ": ", hyps, " hypotheses but ", refs, " references");
}

/// Splits a 13a-tokenized line (single spaces) into views of its tokens.
std::vector<std::string_view> split_single_spaces(const std::string& s) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (start < s.size()) {
        size_t p = s.find(' ', start);
        if (p == std::string::npos) p = s.size();
        out.emplace_back(s.data() + start, p - start);
        start = p + 1;
    }
    return out;
}

/// n-grams of orders 1..max_order keyed by their text (tokens joined by single spaces, which no
/// token contains); the key's order is recovered from the map it sits in.
using Counts = std::unordered_map<std::string_view, int64_t>;

std::vector<Counts> word_ngrams(const std::vector<std::string_view>& toks, size_t max_order) {
    std::vector<Counts> c(max_order);
    for (size_t n = 1; n <= max_order; ++n)
        for (size_t i = 0; i + n <= toks.size(); ++i) {
            const char* b = toks[i].data();
            const char* e = toks[i + n - 1].data() + toks[i + n - 1].size();
            ++c[n - 1][std::string_view(b, size_t(e - b))];
        }
    return c;
}

double my_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

std::string fixed(double v, int width) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", width, v);
    return buf;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
    check_utf8(line, "tokenize_13a: line", 1);
    return tokenize_13a_valid(line);
}

SacreBleuScore sacrebleu_corpus_bleu(const std::vector<std::string>& hypotheses,
                                     const std::vector<std::string>& references) {
    check_sizes("sacrebleu_corpus_bleu", hypotheses.size(), references.size());
    constexpr size_t kOrder = 4;
    SacreBleuScore r;
    for (size_t s = 0; s < hypotheses.size(); ++s) {
        const std::string& hyp_raw = hypotheses[s];
        check_utf8(hyp_raw, "sacrebleu_corpus_bleu: hypothesis", s + 1);
        check_utf8(references[s], "sacrebleu_corpus_bleu: reference", s + 1);
        if (hyp_raw.size() >= 2 && hyp_raw.compare(hyp_raw.size() - 2, 2, " .") == 0) ++r.tokenized_period_lines;
        const std::string hyp = tokenize_13a_valid(std::string_view(hyp_raw).substr(0, py_rstrip_len(hyp_raw)));
        const std::string ref = tokenize_13a_valid(
            std::string_view(references[s]).substr(0, py_rstrip_len(references[s])));
        const auto ht = split_single_spaces(hyp), rt = split_single_spaces(ref);
        r.sys_len += int64_t(ht.size());
        r.ref_len += int64_t(rt.size());
        const auto hc = word_ngrams(ht, kOrder), rc = word_ngrams(rt, kOrder);
        for (size_t n = 0; n < kOrder; ++n)
            for (const auto& [g, cnt] : hc[n]) {
                r.totals[n] += cnt;
                const auto it = rc[n].find(g);
                if (it != rc[n].end()) r.counts[n] += std::min(cnt, it->second);
            }
    }
    r.bp = 1.0;
    if (r.sys_len < r.ref_len) r.bp = r.sys_len > 0 ? std::exp(1.0 - double(r.ref_len) / double(r.sys_len)) : 0.0;
    r.signature = std::string("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:") + kSacreBleuVersion;
    bool any = false;
    for (int64_t c : r.counts) any = any || c != 0;
    if (!any) return r;  // sacreBLEU's early stop: score 0, precisions 0
    double smooth = 1.0;
    for (size_t n = 0; n < kOrder; ++n) {
        if (r.totals[n] == 0) break;
        if (r.counts[n] == 0) {
            smooth *= 2;
            r.precisions[n] = 100.0 / (smooth * double(r.totals[n]));
        } else {
            r.precisions[n] = 100.0 * double(r.counts[n]) / double(r.totals[n]);
        }
    }
    double log_sum = 0;
    for (double p : r.precisions) log_sum += my_log(p);
    r.score = r.bp * std::exp(log_sum / double(kOrder));
    return r;
}

std::string format_sacrebleu(const SacreBleuScore& s, int width) {
    QKV_CHECK(width >= 0 && width <= 17, "format_sacrebleu: width must be in [0, 17], got ", width);
    std::string out = "BLEU|" + s.signature + " = " + fixed(s.score, width) + " ";
    for (size_t n = 0; n < s.precisions.size(); ++n) out += (n ? "/" : "") + fixed(s.precisions[n], 1);
    const double ratio = s.ref_len ? double(s.sys_len) / double(s.ref_len) : 0.0;
    out += " (BP = " + fixed(s.bp, 3) + " ratio = " + fixed(ratio, 3) + " hyp_len = " +
           std::to_string(s.sys_len) + " ref_len = " + std::to_string(s.ref_len) + ")";
    return out;
}

namespace {

// chrF++.py's punctuation (Python's string.punctuation).
bool is_ascii_punct(char32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

/// Character n-gram counts of orders 1..max_order, keyed by the UTF-8 of the n code points.
std::vector<std::unordered_map<std::string, int64_t>> char_ngrams(const std::vector<char32_t>& cps, int max_order) {
    std::vector<std::string> chars;  // each code point's UTF-8, whitespace removed
    for (char32_t c : cps)
        if (!is_py_space(c)) {
            chars.emplace_back();
            append_utf8(chars.back(), c);
        }
    std::vector<std::unordered_map<std::string, int64_t>> out(static_cast<size_t>(max_order));
    for (int n = 1; n <= max_order; ++n)
        for (size_t i = 0; i + size_t(n) <= chars.size(); ++i) {
            std::string k;
            for (size_t j = i; j < i + size_t(n); ++j) k += chars[j];
            ++out[size_t(n - 1)][k];
        }
    return out;
}

/// chrF++.py's word split: str.split(), then a word of more than one code point loses one ASCII
/// punctuation character at its end (or else at its start) as a word of its own.
std::vector<std::string> chrf_words(const std::vector<char32_t>& cps) {
    std::vector<std::vector<char32_t>> words(1);
    for (char32_t c : cps) {
        if (is_py_space(c)) {
            if (!words.back().empty()) words.emplace_back();
        } else {
            words.back().push_back(c);
        }
    }
    if (words.back().empty()) words.pop_back();
    const auto enc = [](auto b, auto e) {
        std::string s;
        for (auto it = b; it != e; ++it) append_utf8(s, *it);
        return s;
    };
    std::vector<std::string> out;
    for (const auto& w : words) {
        if (w.size() == 1) {
            out.push_back(enc(w.begin(), w.end()));
        } else if (is_ascii_punct(w.back())) {
            out.push_back(enc(w.begin(), w.end() - 1));
            out.push_back(enc(w.end() - 1, w.end()));
        } else if (is_ascii_punct(w.front())) {
            out.push_back(enc(w.begin(), w.begin() + 1));
            out.push_back(enc(w.begin() + 1, w.end()));
        } else {
            out.push_back(enc(w.begin(), w.end()));
        }
    }
    return out;
}

/// Word n-grams of orders 1..max_order keyed by the words joined with ' ' (sacreBLEU's key).
std::vector<std::unordered_map<std::string, int64_t>> chrf_word_ngrams(const std::vector<std::string>& w,
                                                                       int max_order) {
    std::vector<std::unordered_map<std::string, int64_t>> out(static_cast<size_t>(max_order));
    for (int n = 1; n <= max_order; ++n)
        for (size_t i = 0; i + size_t(n) <= w.size(); ++i) {
            std::string k = w[i];
            for (size_t j = i + 1; j < i + size_t(n); ++j) k += ' ' + w[j];
            ++out[size_t(n - 1)][k];
        }
    return out;
}

}  // namespace

ChrfScore sacrebleu_corpus_chrf(const std::vector<std::string>& hypotheses,
                                const std::vector<std::string>& references, const ChrfOptions& o) {
    check_sizes("sacrebleu_corpus_chrf", hypotheses.size(), references.size());
    QKV_CHECK(o.char_order >= 1, "sacrebleu_corpus_chrf: char_order must be >= 1, got ", o.char_order);
    QKV_CHECK(o.word_order >= 0, "sacrebleu_corpus_chrf: word_order must be >= 0, got ", o.word_order);
    QKV_CHECK(o.beta >= 1, "sacrebleu_corpus_chrf: beta must be >= 1, got ", o.beta);
    const size_t orders = size_t(o.char_order + o.word_order);
    std::vector<int64_t> stats(3 * orders, 0);  // per order: hyp n-grams, ref n-grams, matches
    for (size_t s = 0; s < hypotheses.size(); ++s) {
        const auto hc = decode_utf8(hypotheses[s], "sacrebleu_corpus_chrf: hypothesis", s + 1);
        const auto rc = decode_utf8(references[s], "sacrebleu_corpus_chrf: reference", s + 1);
        auto hyp = char_ngrams(hc, o.char_order), ref = char_ngrams(rc, o.char_order);
        if (o.word_order > 0) {
            auto hw = chrf_word_ngrams(chrf_words(hc), o.word_order);
            auto rw = chrf_word_ngrams(chrf_words(rc), o.word_order);
            for (auto& m : hw) hyp.push_back(std::move(m));
            for (auto& m : rw) ref.push_back(std::move(m));
        }
        for (size_t i = 0; i < orders; ++i) {
            int64_t hyp_count = 0, ref_count = 0, match = 0;
            for (const auto& [g, cnt] : hyp[i]) {
                hyp_count += cnt;
                const auto it = ref[i].find(g);
                if (it != ref[i].end()) match += std::min(cnt, it->second);
            }
            for (const auto& kv : ref[i]) ref_count += kv.second;
            stats[3 * i] += ref[i].empty() ? 0 : hyp_count;  // no hits without a reference n-gram
            stats[3 * i + 1] += ref_count;
            stats[3 * i + 2] += match;
        }
    }
    // sacreBLEU's _compute_f_score without eps smoothing: mean P and R over the effective orders.
    const double factor = double(o.beta) * double(o.beta);
    double avg_prec = 0, avg_rec = 0;
    int effective = 0;
    for (size_t i = 0; i < orders; ++i) {
        const int64_t n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += double(n_match) / double(n_hyp);
            avg_rec += double(n_match) / double(n_ref);
            ++effective;
        }
    }
    ChrfScore r;
    if (effective > 0) {
        avg_prec /= effective;
        avg_rec /= effective;
    }
    if (avg_prec + avg_rec > 0) r.score = 100 * ((1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec));
    r.name = "chrF" + std::to_string(o.beta) + std::string(size_t(o.word_order), '+');
    r.signature = "nrefs:1|case:mixed|eff:yes|nc:" + std::to_string(o.char_order) +
                  "|nw:" + std::to_string(o.word_order) + "|space:no|version:" + kSacreBleuVersion;
    return r;
}

std::string format_chrf(const ChrfScore& s, int width) {
    QKV_CHECK(width >= 0 && width <= 17, "format_chrf: width must be in [0, 17], got ", width);
    return s.name + "|" + s.signature + " = " + fixed(s.score, width);
}

}  // namespace qkv::decode
