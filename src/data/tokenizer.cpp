// D2L preprocessing and tokenisation (data/tokenizer.h), on code points via utf8proc.
#include "qkv/data/tokenizer.h"

#include <utf8proc.h>

#include "qkv/core/error.h"

namespace qkv::data {
namespace {

void append_utf8(std::string& out, utf8proc_int32_t cp) {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

}  // namespace

size_t invalid_utf8_offset(std::string_view s) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
    while (left > 0) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
        if (n <= 0 || cp < 0) return s.size() - size_t(left);
        p += n;
        left -= n;
    }
    return std::string_view::npos;
}

bool is_valid_utf8(std::string_view s) { return invalid_utf8_offset(s) == std::string_view::npos; }

int64_t utf8_length(std::string_view s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

std::string preprocess_nmt(std::string_view text) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    utf8proc_ssize_t left = utf8proc_ssize_t(text.size());
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    utf8proc_int32_t prev = -1;  // previous code point of the lower-cased text (-1: none)
    while (left > 0) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
        QKV_CHECK(n > 0 && cp >= 0, "preprocess_nmt: invalid UTF-8 at byte ",
                  text.size() - size_t(left), " of \"", text.substr(0, 80), "\"");
        p += n;
        left -= n;
        if (cp == 0x202F || cp == 0x00A0) cp = ' ';
        if (cp == 0x0130) {  // Python: 'İ'.lower() == 'i̇' (i + combining dot above)
            out += 'i';
            append_utf8(out, 0x0307);
            prev = 0x0307;
            continue;
        }
        cp = utf8proc_tolower(cp);
        if ((cp == ',' || cp == '.' || cp == '!' || cp == '?') && prev >= 0 && prev != ' ')
            out += ' ';
        append_utf8(out, cp);
        prev = cp;
    }
    return out;
}

std::vector<std::string> split_tokens(std::string_view text, bool drop_empty) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t p   = text.find(' ', start);
        const size_t end = p == std::string_view::npos ? text.size() : p;
        if (end > start || !drop_empty) out.emplace_back(text.substr(start, end - start));
        if (p == std::string_view::npos) break;
        start = p + 1;
    }
    return out;
}

std::vector<std::string> tokenize_nmt(std::string_view text) {
    return split_tokens(preprocess_nmt(text), true);
}

}  // namespace qkv::data
