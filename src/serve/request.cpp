// Request parsing for qkv serve (serve/request.h).
#include "qkv/serve/request.h"

#include <algorithm>
#include <cmath>

#include <cctype>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "qkv/data/text.h"
#include "qkv/data/tokenizer.h"

namespace qkv::serve {
namespace {

using nlohmann::json;

ApiError bad(std::string message, std::string kind = "bad_request") {
    return ApiError{400, std::move(kind), std::move(message), ""};
}

std::string lower_ascii(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string lower_media_type(std::string_view content_type) {
    std::string t(content_type.substr(0, content_type.find(';')));
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    size_t i = 0;
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
    t.erase(0, i);
    return lower_ascii(std::move(t));
}

const char* type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "a list";
        case json::value_t::object: return "an object";
        case json::value_t::number_float: return "a decimal number";
        case json::value_t::binary: return "binary";
        case json::value_t::discarded: return "invalid";
        default: return "an integer";
    }
}

/// One sentence: valid UTF-8, no NUL (which the tokenizer would turn into <unk>), within the
/// character limit.
std::optional<ApiError> check_sentence(const std::string& s, size_t index, bool list, const Limits& limits) {
    const std::string where = list ? "\"q\"[" + std::to_string(index) + "]" : std::string("\"q\"");
    const size_t bad_at = data::invalid_utf8_offset(s);
    if (bad_at != std::string::npos)
        return bad(where + " is not valid UTF-8 (byte offset " + std::to_string(bad_at) + ")");
    const size_t nul = s.find('\0');
    if (nul != std::string::npos) return bad(where + " holds a NUL character (byte offset " + std::to_string(nul) + ")");
    // The limit is per sentence, as each text is translated sentence by sentence (a paragraph of
    // short sentences is fine; one 5,000-character sentence is not).
    if (int64_t(utf8_length(s)) <= limits.max_chars) return std::nullopt;
    const data::SentenceSplit split = data::split_sentences(s);
    for (size_t k = 0; k < split.sentences.size(); ++k) {
        const size_t n = utf8_length(split.sentences[k].text);
        if (int64_t(n) > limits.max_chars)
            return ApiError{400, "limit",
                            where + (split.sentences.size() > 1 ? " sentence " + std::to_string(k + 1) : std::string()) +
                                " has " + std::to_string(n) + " characters; the limit is " +
                                std::to_string(limits.max_chars) + " per sentence (max_chars)",
                            "max_chars"};
    }
    return std::nullopt;
}

std::optional<ApiError> read_q(const json& q, TranslateRequest& r, const Limits& limits) {
    if (q.is_string()) {
        r.q = {q.get<std::string>()};
        r.q_is_list = false;
    } else if (q.is_array()) {
        if (q.empty()) return bad("\"q\" is an empty list: give at least one sentence");
        if (int64_t(q.size()) > limits.max_sentences)
            return ApiError{400, "limit",
                            "\"q\" has " + std::to_string(q.size()) + " sentences; the limit is " +
                                std::to_string(limits.max_sentences) + " per request (max_sentences)",
                            "max_sentences"};
        r.q_is_list = true;
        for (size_t i = 0; i < q.size(); ++i) {
            if (!q[i].is_string())
                return bad("\"q\"[" + std::to_string(i) + "] must be a string, got " + type_name(q[i]));
            r.q.push_back(q[i].get<std::string>());
        }
    } else {
        return bad(std::string("\"q\" must be a string or a list of strings, got ") + type_name(q));
    }
    for (size_t i = 0; i < r.q.size(); ++i)
        if (auto e = check_sentence(r.q[i], i, r.q_is_list, limits)) return e;
    // Each text is translated sentence by sentence (data::split_sentences): the limit counts them.
    int64_t n = 0;
    for (const auto& text : r.q) n += std::max<int64_t>(1, int64_t(data::split_sentences(text).sentences.size()));
    if (n > limits.max_sentences)
        return ApiError{400, "limit",
                        "\"q\" holds " + std::to_string(n) + " sentences; the limit is " +
                            std::to_string(limits.max_sentences) + " per request (max_sentences)",
                        "max_sentences"};
    return std::nullopt;
}

/// A client's value inside a message: quoted, at most 40 bytes of it (a long value is cut).
std::string quoted(const std::string& v) {
    return "\"" + (v.size() <= 40 ? v : v.substr(0, 40) + "...") + "\"";
}

std::optional<ApiError> check_format(TranslateRequest& r, std::string source, std::string target,
                                     const std::string& format) {
    if (format != "text") return bad("\"format\" must be \"text\", got " + quoted(format) + " (HTML is not supported)");
    r.source = std::move(source);
    r.target = std::move(target);
    return std::nullopt;
}

std::optional<ApiError> read_string_field(const json& j, const char* name, std::string& out) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) return bad(std::string("\"") + name + "\" must be a string, got " + type_name(*it));
    out = it->get<std::string>();
    return std::nullopt;
}

std::optional<ApiError> read_int(const json& j, const char* name, int64_t lo, int64_t hi, int64_t& out) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    // An integer beyond 64 bits reaches here as a float (nlohmann's parser): say it is out of
    // range, not that an integer was "a decimal number" (1.5e30 is out of range either way).
    if (it->is_number_float() && std::abs(it->get<double>()) >= 9223372036854775808.0)
        return bad(std::string("\"") + name + "\" must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + it->dump());  // the shortest text that reads back as the value
    if (!it->is_number_integer())
        return bad(std::string("\"") + name + "\" must be an integer, got " + type_name(*it));
    // Compare in the JSON's own type: a huge unsigned value must not wrap into range.
    bool in_range;
    if (it->is_number_unsigned()) {
        const uint64_t v = it->get<uint64_t>();
        in_range = v <= uint64_t(hi) && (lo <= 0 || v >= uint64_t(lo));
    } else {
        const int64_t v = it->get<int64_t>();
        in_range = v >= lo && v <= hi;
    }
    if (!in_range)
        return bad(std::string("\"") + name + "\" must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + it->dump());
    out = it->get<int64_t>();
    return std::nullopt;
}

std::optional<ApiError> read_bool(const json& j, const char* name, bool& out) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return bad(std::string("\"") + name + "\" must be true or false, got " + type_name(*it));
    out = it->get<bool>();
    return std::nullopt;
}

ParseResult parse_json_body(Endpoint endpoint, std::string_view body, const Limits& limits) {
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return bad("the body is not valid JSON", "bad_json");
    if (!j.is_object()) return bad(std::string("the body must be a JSON object, got ") + type_name(j), "bad_json");
    TranslateRequest r;
    r.endpoint = endpoint;
    auto q = j.find("q");
    if (q == j.end()) return bad("\"q\" is missing: give the text to translate");
    if (auto e = read_q(*q, r, limits)) return *e;
    std::string source, target, format = "text";
    for (auto [name, out] : {std::pair{"source", &source}, {"target", &target}, {"format", &format}})
        if (auto e = read_string_field(j, name, *out)) return *e;
    if (auto e = check_format(r, source, target, format)) return *e;
    if (endpoint == Endpoint::libretranslate) {
        if (auto e = read_string_field(j, "api_key", r.api_key)) return *e;
        return r;
    }
    static const char* known[] = {"q", "source", "target", "format", "beam_size", "length_penalty",
                                  "max_length", "n_best", "attention", "no_unk"};
    for (auto it = j.begin(); it != j.end(); ++it) {
        bool ok = false;
        for (const char* k : known) ok = ok || it.key() == k;
        if (!ok)
            return bad("unknown field \"" + it.key() +
                       "\" (fields: q, source, target, format, beam_size, length_penalty, max_length, n_best, "
                       "attention, no_unk)");
    }
    DecodeSettings& s = r.settings;
    if (auto e = read_int(j, "beam_size", 1, 100, s.beam)) return *e;
    if (auto e = read_int(j, "max_length", 1, 1000, s.max_len)) return *e;
    if (auto e = read_int(j, "n_best", 1, 100, s.n_best)) return *e;
    if (auto lp = j.find("length_penalty"); lp != j.end() && !lp->is_null()) {
        if (!lp->is_number()) return bad(std::string("\"length_penalty\" must be a number, got ") + type_name(*lp));
        const double v = lp->get<double>();
        if (!(v >= 0 && v <= 10)) return bad("\"length_penalty\" must be in [0, 10], got " + lp->dump());
        s.length_penalty = v;
    }
    if (auto e = read_bool(j, "attention", s.attention)) return *e;
    if (auto e = read_bool(j, "no_unk", s.no_unk)) return *e;
    if (s.n_best > 1 && s.beam > 0 && s.n_best > s.beam)
        return bad("\"n_best\" (" + std::to_string(s.n_best) + ") must not exceed \"beam_size\" (" +
                   std::to_string(s.beam) + ")");
    return r;
}

ParseResult parse_form_body(std::string_view body, const Limits& limits) {
    TranslateRequest r;
    std::string source, target, format = "text";
    bool have_q = false;
    size_t pos = 0;
    while (pos <= body.size()) {
        size_t amp = body.find('&', pos);
        if (amp == std::string_view::npos) amp = body.size();
        const std::string_view pair = body.substr(pos, amp - pos);
        pos = amp + 1;
        if (pair.empty()) continue;
        const size_t eq = pair.find('=');
        std::string key, value;
        if (!url_decode(pair.substr(0, eq), key) ||
            !url_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), value))
            return bad("the form body has a malformed %-escape", "bad_form");
        if (key == "q") {
            if (auto e = read_q(json(value), r, limits)) return *e;
            have_q = true;
        } else if (key == "source") {
            source = value;
        } else if (key == "target") {
            target = value;
        } else if (key == "format") {
            format = value;
        } else if (key == "api_key") {
            r.api_key = value;
        }
    }
    if (!have_q) return bad("\"q\" is missing: give the text to translate");
    if (auto e = check_format(r, source, target, format)) return *e;
    return r;
}

}  // namespace

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

bool url_decode(std::string_view in, std::string& out) {
    out.clear();
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '+') {
            out.push_back(' ');
        } else if (in[i] == '%') {
            if (i + 2 >= in.size()) return false;
            const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
            if (hi < 0 || lo < 0) return false;
            out.push_back(char(hi * 16 + lo));
            i += 2;
        } else {
            out.push_back(in[i]);
        }
    }
    return true;
}

ParseResult parse_translate_request(Endpoint endpoint, std::string_view body, std::string_view content_type,
                                    const Limits& limits) {
    try {
        if (body.size() > limits.max_body_bytes)
            return ApiError{413, "limit",
                            "the body has " + std::to_string(body.size()) + " bytes; the limit is " +
                                std::to_string(limits.max_body_bytes) + " (max_body_bytes)",
                            "max_body_bytes"};
        const std::string type = lower_media_type(content_type);
        if (type == "application/json") return parse_json_body(endpoint, body, limits);
        if (type == "application/x-www-form-urlencoded" && endpoint == Endpoint::libretranslate)
            return parse_form_body(body, limits);
        return ApiError{415, "content_type",
                        "Content-Type must be application/json" +
                            std::string(endpoint == Endpoint::libretranslate
                                            ? " or application/x-www-form-urlencoded"
                                            : "") +
                            ", got '" + (type.empty() ? std::string("none") : type.substr(0, 100)) + "'",
                        ""};
    } catch (const std::exception&) {
        // nlohmann's accessors are type-checked above; this is the last line against a crash.
        return bad("the request could not be read", "bad_request");
    }
}

std::optional<ApiError> check_languages(const TranslateRequest& r, const LanguagePair& model) {
    auto pair_text = [&] {
        const std::string s = language_name(model.source), t = language_name(model.target);
        return "this model translates " + (s.empty() ? std::string("an unrecorded language") : s) + " to " +
               (t.empty() ? std::string("an unrecorded language") : t);
    };
    if (!r.source.empty() && r.source != "auto" && !model.source.empty() &&
        lower_ascii(r.source) != lower_ascii(model.source))
        return bad("\"source\" must be \"" + model.source + "\" (or \"auto\"), got " + quoted(r.source) + ": " +
                   pair_text());
    if (r.target == "auto") return bad("\"target\" cannot be \"auto\": " + pair_text());
    if (!r.target.empty() && !model.target.empty() && lower_ascii(r.target) != lower_ascii(model.target))
        return bad("\"target\" must be \"" + model.target + "\", got " + quoted(r.target) + ": " + pair_text());
    return std::nullopt;
}

std::string language_name(const std::string& code) {
    // ISO 639-1 codes of the languages Tatoeba's manythings.org pairs (fra-eng's source) and
    // other common ones; a region or script subtag is kept in brackets.
    static const std::pair<const char*, const char*> kNames[] = {
        {"ar", "Arabic"},     {"bg", "Bulgarian"},  {"bn", "Bengali"},   {"ca", "Catalan"},    {"cs", "Czech"},
        {"cy", "Welsh"},      {"da", "Danish"},     {"de", "German"},    {"el", "Greek"},      {"en", "English"},
        {"eo", "Esperanto"},  {"es", "Spanish"},    {"et", "Estonian"},  {"eu", "Basque"},     {"fa", "Persian"},
        {"fi", "Finnish"},    {"fr", "French"},     {"ga", "Irish"},     {"gl", "Galician"},   {"he", "Hebrew"},
        {"hi", "Hindi"},      {"hr", "Croatian"},   {"hu", "Hungarian"}, {"hy", "Armenian"},   {"id", "Indonesian"},
        {"is", "Icelandic"},  {"it", "Italian"},    {"ja", "Japanese"},  {"ka", "Georgian"},   {"ko", "Korean"},
        {"la", "Latin"},      {"lt", "Lithuanian"}, {"lv", "Latvian"},   {"mk", "Macedonian"}, {"ms", "Malay"},
        {"nb", "Norwegian Bokm\u00e5l"}, {"nl", "Dutch"}, {"no", "Norwegian"}, {"pl", "Polish"}, {"pt", "Portuguese"},
        {"ro", "Romanian"},   {"ru", "Russian"},    {"sk", "Slovak"},    {"sl", "Slovenian"},  {"sq", "Albanian"},
        {"sr", "Serbian"},    {"sv", "Swedish"},    {"sw", "Swahili"},   {"th", "Thai"},       {"tl", "Tagalog"},
        {"tr", "Turkish"},    {"uk", "Ukrainian"},  {"ur", "Urdu"},      {"vi", "Vietnamese"}, {"zh", "Chinese"}};
    if (code.empty()) return "";
    const size_t dash = code.find('-');
    const std::string primary = lower_ascii(code.substr(0, dash));
    for (const auto& [c, name] : kNames)
        if (primary == c) return dash == std::string::npos ? std::string(name) : std::string(name) + " (" + code + ")";
    return code;
}

std::string error_json(const ApiError& e) {
    nlohmann::json j = {{"error", e.message}, {"kind", e.kind}};
    if (!e.limit.empty()) j["limit"] = e.limit;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace qkv::serve
