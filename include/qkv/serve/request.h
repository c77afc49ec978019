#pragma once
// Request parsing for `qkv serve` (serve/service.h): JSON text in, a checked request or an API
// error (HTTP status, kind, message) out. Pure functions with no model, no I/O and no exceptions
// escaping, so they can be unit-tested and fuzzed (tests/fuzz/fuzz_serve_request.cpp).
// Two request shapes:
//   POST /translate     LibreTranslate's (https://github.com/LibreTranslate/LibreTranslate):
//                       {"q": "text" | ["text", ...], "source": "en"|"auto", "target": "fr",
//                        "format": "text", "api_key": "..."}; other fields are ignored, as
//                       LibreTranslate's clients send some it does not know. Also accepted as an
//                       application/x-www-form-urlencoded body (a single q).
//   POST /v1/translate  qkv's own: {"q": ..., "beam_size": int, "length_penalty": number,
//                       "max_length": int, "n_best": int, "attention": bool, "no_unk": bool};
//                       an unknown field is an error (a misspelt option must not be ignored).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace qkv::serve {

/// Limits on one request; each is named in the error it causes.
struct Limits {
    size_t max_body_bytes = 1 << 20;   // --max-body-bytes: larger bodies get 413
    int64_t max_sentences = 64;        // --max-sentences: entries of a "q" list (400)
    int64_t max_chars = 1000;          // --max-chars: characters (UTF-8 code points) per sentence (400)
};

/// An error answered to the client: status (400, 401, 404, 405, 413, 415, 500, 503), kind (a
/// short word, the label of qkv_errors_total in /metrics: "bad_json", "bad_request", "limit",
/// "content_type", ...), message (for people; never a file path or a stack), and the name of the
/// limit that was exceeded, if any ("max_sentences").
struct ApiError {
    int status = 400;
    std::string kind;
    std::string message;
    std::string limit;
};

/// Decoding settings of a request; 0 / negative values mean "the model folder's config.json".
struct DecodeSettings {
    int64_t beam = 0;             // beam_size: 1..100 (1 = greedy)
    int64_t max_len = 0;          // max_length: most output units, 1..1000
    double length_penalty = -1;   // GNMT alpha, 0..10
    int64_t n_best = 1;           // hypotheses returned per sentence, 1..beam
    bool attention = false;       // return cross-attention weights per layer/head
    bool no_unk = false;          // never output <unk>
    bool operator==(const DecodeSettings&) const = default;
};

enum class Endpoint { libretranslate, v1 };

struct TranslateRequest {
    Endpoint endpoint = Endpoint::libretranslate;
    std::vector<std::string> q;   // the sentences, at least one
    bool q_is_list = false;       // the answer mirrors the shape of q
    std::string source;           // as given: a language code, "auto" (answered with
                                  // detectedLanguage) or "" (absent: the model's)
    std::string target;           // as given: a language code or "" (absent: the model's)
    std::string api_key;          // LibreTranslate's api_key field ("" when absent)
    DecodeSettings settings;
};

using ParseResult = std::variant<TranslateRequest, ApiError>;

/// Parses and checks a request body. content_type is the Content-Type header (parameters such
/// as "; charset=utf-8" allowed): application/json for both endpoints, or
/// application/x-www-form-urlencoded for /translate; anything else gives 415. A body over
/// limits.max_body_bytes gives 413; invalid JSON, a wrong type, a missing or empty "q", a value
/// out of range, invalid UTF-8 or a NUL byte in a sentence, or a format other than "text" give
/// 400; more sentences or characters than the limits give 400 naming the limit. The languages
/// are checked against the served model later (check_languages). Never throws.
ParseResult parse_translate_request(Endpoint endpoint, std::string_view body, std::string_view content_type,
                                    const Limits& limits);

/// The languages a model translates between: the codes its config.json records (data.src_lang,
/// data.tgt_lang; runtime::source_language), "" where it records none (a corpus trained without
/// --src-lang / --tgt-lang).
struct LanguagePair {
    std::string source, target;
};

/// Checks a request's "source" and "target" against the served model's pair: each must be
/// absent or equal the model's code (compared case-insensitively, as BCP 47 codes are), "source"
/// may be "auto"; a side the model does not record accepts any code. Returns a 400 that names
/// the field, the value and the model's pair ("this model translates German to English").
std::optional<ApiError> check_languages(const TranslateRequest& r, const LanguagePair& model);

/// The English name of a language code for people ("de" -> "German", "pt-BR" -> "Portuguese
/// (pt-BR)"); the code itself when it is not in qkv's table; "" for "".
std::string language_name(const std::string& code);

/// {"error": message, "kind": kind[, "limit": limit]} (LibreTranslate's clients read "error").
std::string error_json(const ApiError& e);

/// Number of UTF-8 code points in s (s must be valid UTF-8).
size_t utf8_length(std::string_view s);

/// Decodes one application/x-www-form-urlencoded value ('+' is a space, %XX a byte). Returns
/// false on a malformed escape.
bool url_decode(std::string_view in, std::string& out);

}  // namespace qkv::serve
