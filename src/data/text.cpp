// Raw-text helpers (data/text.h): nmt_nfkc normalization, sentence splitting, line files.
#include "qkv/data/text.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <utf8proc.h>

#include "qkv/core/error.h"

namespace qkv::data {
namespace {

struct CodePoint {
    char32_t cp;
    size_t begin, end;  // byte range in the input
};

std::vector<CodePoint> decode(std::string_view s, const char* fn) {
    std::vector<CodePoint> out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    size_t pos = 0;
    while (pos < s.size()) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t n = utf8proc_iterate(p + pos, utf8proc_ssize_t(s.size() - pos), &cp);
        QKV_CHECK(n > 0 && cp >= 0, fn, ": invalid UTF-8 at byte ", pos, " of \"", s.substr(0, 80), "\"");
        out.push_back({char32_t(cp), pos, pos + size_t(n)});
        pos += size_t(n);
    }
    return out;
}

void append_utf8(std::string& out, char32_t cp) {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

/// SentencePiece's MergeNmtMap: -1 removes the character, ' ' replaces it, 0 leaves it to NFKC.
int nmt_rule(char32_t c) {
    if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F)
        return -1;
    switch (c) {
        case 0x09: case 0x0A: case 0x0C: case 0x0D: case 0x1680: case 0x200B: case 0x200C:
        case 0x200E: case 0x200F: case 0x2028: case 0x2029: case 0x2581: case 0xFEFF: case 0xFFFD:
            return ' ';
        default:
            return 0;
    }
}

std::string nfkc(const std::string& s) {
    if (s.empty()) return s;
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                            utf8proc_ssize_t(s.size()), &dst,
                                            utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
    QKV_CHECK(n >= 0, "normalize_nmt_nfkc: utf8proc: ", utf8proc_errmsg(n));
    std::string out(reinterpret_cast<const char*>(dst), size_t(n));
    std::free(dst);
    return out;
}

/// Unicode White_Space (= Python's str.isspace()).
bool is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_line_break(char32_t c) { return c == '\n' || c == '\r' || c == 0x85 || c == 0x2028 || c == 0x2029; }

bool is_final_punct(char32_t c) { return c == '.' || c == '?' || c == '!' || c == 0x2026; }

bool is_closing(char32_t c) {
    return c == '"' || c == '\'' || c == 0x201D || c == 0x2019 || c == 0xBB || c == ')' || c == ']' || c == '}';
}

bool is_opening(char32_t c) {
    return c == '"' || c == '\'' || c == 0x201C || c == 0x2018 || c == 0xAB || c == 0x201E || c == '(' ||
           c == '[' || c == '{' || c == 0xBF || c == 0xA1;
}

bool starts_sentence(char32_t c) {
    const utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT || cat == UTF8PROC_CATEGORY_ND || is_opening(c);
}

bool is_abbreviation(std::string_view w) {
    static const char* const kAbbr[] = {"Mr", "Mrs", "Ms", "Dr", "St", "Prof", "Sr", "Jr", "Mt",
                                        "vs", "etc", "cf", "e.g", "i.e", "U.S", "U.K"};
    for (const char* a : kAbbr)
        if (w == a) return true;
    return false;
}

}  // namespace

std::string normalize_nmt_nfkc(std::string_view text, bool remove_extra_whitespaces) {
    const auto cps = decode(text, "normalize_nmt_nfkc");
    // The nmt rules first (none of their characters is produced by NFKC from another), then
    // NFKC on the stretches between U+FF5E, which SentencePiece leaves alone.
    std::string mapped, part;
    for (const CodePoint& c : cps) {
        const int rule = nmt_rule(c.cp);
        if (rule == -1) continue;
        if (c.cp == 0xFF5E) {
            mapped += nfkc(part);
            part.clear();
            append_utf8(mapped, c.cp);
            continue;
        }
        append_utf8(part, rule == ' ' ? U' ' : c.cp);
    }
    mapped += nfkc(part);
    if (!remove_extra_whitespaces) return mapped;
    std::string out;
    out.reserve(mapped.size());
    bool pending_space = false;
    for (char ch : mapped) {
        if (ch == ' ') {
            pending_space = !out.empty();
            continue;
        }
        if (pending_space) out += ' ';
        pending_space = false;
        out += ch;
    }
    return out;
}

std::vector<std::string> raw_words(std::string_view text) {
    const std::string norm = normalize_nmt_nfkc(text);
    std::vector<std::string> words;
    size_t start = 0;
    while (start < norm.size()) {
        size_t end = norm.find(' ', start);
        if (end == std::string::npos) end = norm.size();
        if (end > start) words.push_back(norm.substr(start, end - start));
        start = end + 1;
    }
    return words;
}

SentenceSplit split_sentences(std::string_view text) {
    const auto cps = decode(text, "split_sentences");
    SentenceSplit r;
    const size_t n = cps.size();
    size_t i = 0;
    while (i < n && is_space(cps[i].cp)) ++i;
    r.leading = std::string(text.substr(0, i < n ? cps[i].begin : text.size()));
    size_t start = i;  // first code point of the current sentence
    const auto byte_at = [&](size_t k) { return k < n ? cps[k].begin : text.size(); };
    while (i < n) {
        size_t end = 0;  // one past the sentence's last code point, when it ends here
        if (is_final_punct(cps[i].cp)) {
            size_t j = i;
            while (j < n && is_final_punct(cps[j].cp)) ++j;
            const bool single_period = j == i + 1 && cps[i].cp == '.';
            size_t k = j;
            while (k < n && is_closing(cps[k].cp)) ++k;
            size_t w = k;
            while (w < n && is_space(cps[w].cp)) ++w;
            bool boundary = w > k && w < n && starts_sentence(cps[w].cp);
            if (boundary && single_period && k == j) {
                // The word before the period: back to whitespace, past opening quotes/brackets.
                size_t b = i;
                while (b > start && !is_space(cps[b - 1].cp)) --b;
                while (b < i && is_opening(cps[b].cp)) ++b;
                const std::string_view word = text.substr(cps[b].begin, cps[i].begin - cps[b].begin);
                const bool initial =
                    b + 1 == i && utf8proc_category(utf8proc_int32_t(cps[b].cp)) == UTF8PROC_CATEGORY_LU;
                if (b < i && (initial || is_abbreviation(word))) boundary = false;
            }
            if (boundary) end = k;
            i = boundary ? k : j;  // a run of punctuation is judged once
            if (!boundary) continue;
        } else if (is_space(cps[i].cp)) {
            size_t w = i;
            bool line_break = false;
            for (; w < n && is_space(cps[w].cp); ++w) line_break = line_break || is_line_break(cps[w].cp);
            if (line_break && w < n) {
                end = i;
            } else {
                i = w;
                continue;
            }
        } else {
            ++i;
            continue;
        }
        // A sentence [start, end) and the whitespace after it.
        size_t w = end;
        while (w < n && is_space(cps[w].cp)) ++w;
        r.sentences.push_back({std::string(text.substr(cps[start].begin, byte_at(end) - cps[start].begin)),
                               std::string(text.substr(byte_at(end), byte_at(w) - byte_at(end)))});
        start = i = w;
    }
    if (start < n) {  // the last sentence: up to the trailing whitespace
        size_t e = n;
        while (e > start && is_space(cps[e - 1].cp)) --e;
        r.sentences.push_back({std::string(text.substr(cps[start].begin, byte_at(e) - cps[start].begin)),
                               std::string(text.substr(byte_at(e)))});
    }
    return r;
}

std::string join_sentences(const SentenceSplit& split, const std::vector<std::string>& translations) {
    QKV_CHECK(translations.size() == split.sentences.size(), "join_sentences: ", translations.size(),
              " translations for ", split.sentences.size(), " sentences");
    std::string out = split.leading;
    for (size_t i = 0; i < translations.size(); ++i) out += translations[i] + split.sentences[i].space_after;
    return out;
}

std::vector<std::string> read_text_lines(const std::string& path, const std::string& what) {
    std::error_code ec;
    QKV_CHECK(!std::filesystem::is_directory(path, ec), what, " '", path, "' is a folder, not a text file");
    std::ifstream f(path, std::ios::binary);
    QKV_CHECK(f.good(), what, " '", path, "': cannot open (", std::filesystem::exists(path, ec) ? "not readable" : "no such file", ")");
    std::ostringstream ss;
    ss << f.rdbuf();
    QKV_CHECK(!f.bad(), what, " '", path, "': read error");
    const std::string s = ss.str();
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < s.size()) {
        size_t p = s.find('\n', start);
        if (p == std::string::npos) p = s.size();
        size_t e = p;
        if (e > start && p < s.size() && s[e - 1] == '\r') --e;
        lines.push_back(s.substr(start, e - start));
        start = p + 1;
    }
    return lines;
}

ParallelLines read_parallel_lines(const std::string& source_path, const std::string& reference_path,
                                  const std::string& source_what, const std::string& reference_what) {
    ParallelLines r;
    r.source    = read_text_lines(source_path, source_what);
    r.reference = read_text_lines(reference_path, reference_what);
    QKV_CHECK(r.source.size() == r.reference.size(), source_what, " '", source_path, "' has ", r.source.size(),
              " lines but ", reference_what, " '", reference_path, "' has ", r.reference.size());
    return r;
}

}  // namespace qkv::data
