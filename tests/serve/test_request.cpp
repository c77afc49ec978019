// serve/request.h: LibreTranslate and /v1 request bodies -> requests or errors with statuses.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "qkv/serve/request.h"

namespace qkv::serve {
namespace {

const char* kJson = "application/json";

TranslateRequest ok(Endpoint e, const std::string& body, const char* type = kJson, Limits l = {}) {
    ParseResult r = parse_translate_request(e, body, type, l);
    if (auto* err = std::get_if<ApiError>(&r)) {
        ADD_FAILURE() << "unexpected error " << err->status << ": " << err->message << " for " << body;
        return {};
    }
    return std::get<TranslateRequest>(r);
}

ApiError fails(Endpoint e, const std::string& body, const char* type = kJson, Limits l = {}) {
    ParseResult r = parse_translate_request(e, body, type, l);
    if (auto* err = std::get_if<ApiError>(&r)) return *err;
    ADD_FAILURE() << "accepted " << body;
    return {};
}

TEST(ServeRequest, LibreTranslateStringAndList) {
    auto r = ok(Endpoint::libretranslate, R"({"q":"Go.","source":"en","target":"fr","format":"text"})");
    EXPECT_EQ(r.q, std::vector<std::string>{"Go."});
    EXPECT_FALSE(r.q_is_list);
    r = ok(Endpoint::libretranslate, R"({"q":["a","b c"],"source":"auto","target":"fr","api_key":"k","alternatives":3})");
    EXPECT_EQ(r.q, (std::vector<std::string>{"a", "b c"}));
    EXPECT_TRUE(r.q_is_list);
    EXPECT_EQ(r.source, "auto");
    EXPECT_EQ(r.api_key, "k");
    EXPECT_EQ(r.target, "fr");
    // Absent languages are the model's (""); charset parameter and case in the content type.
    r = ok(Endpoint::libretranslate, R"({"q":"x"})", "Application/JSON; charset=utf-8");
    EXPECT_EQ(r.source, "");
    EXPECT_EQ(r.target, "");
    // Any code parses: the served model decides (check_languages).
    r = ok(Endpoint::libretranslate, R"({"q":"x","source":"de","target":"en"})");
    EXPECT_EQ(r.source, "de");
    EXPECT_EQ(r.target, "en");
}

TranslateRequest with_languages(std::string source, std::string target) {
    TranslateRequest r;
    r.q      = {"x"};
    r.source = std::move(source);
    r.target = std::move(target);
    return r;
}

TEST(ServeRequest, LanguagesAreTheModels) {
    const LanguagePair en_fr{"en", "fr"}, de_en{"de", "en"}, unrecorded{"", ""};
    for (const auto& [s, t] : {std::pair{"en", "fr"}, {"", ""}, {"auto", "fr"}, {"EN", "Fr"}, {"", "fr"}})
        EXPECT_FALSE(check_languages(with_languages(s, t), en_fr)) << s << " " << t;
    EXPECT_FALSE(check_languages(with_languages("de", "en"), de_en));
    EXPECT_FALSE(check_languages(with_languages("auto", ""), de_en));
    struct Case {
        const char *source, *target;
        LanguagePair model;
        const char* says;
    };
    const Case cases[] = {
        {"de", "fr", en_fr, "\"source\" must be \"en\" (or \"auto\"), got \"de\": this model translates English to French"},
        {"en", "de", en_fr, "\"target\" must be \"fr\", got \"de\": this model translates English to French"},
        {"en", "fr", de_en, "\"source\" must be \"de\" (or \"auto\"), got \"en\": this model translates German to English"},
        {"", "fr", de_en, "\"target\" must be \"en\", got \"fr\": this model translates German to English"},
        {"en", "auto", en_fr, "\"target\" cannot be \"auto\""},
        {"", "auto", unrecorded, "\"target\" cannot be \"auto\": this model translates an unrecorded language to an "
                                 "unrecorded language"},
        {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "", en_fr,
         "got \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\""},
    };
    for (const Case& c : cases) {
        const auto e = check_languages(with_languages(c.source, c.target), c.model);
        ASSERT_TRUE(e) << c.source << " " << c.target;
        EXPECT_EQ(e->status, 400);
        EXPECT_EQ(e->kind, "bad_request");
        EXPECT_NE(e->message.find(c.says), std::string::npos) << e->message;
    }
    // A side the model does not record accepts any code.
    EXPECT_FALSE(check_languages(with_languages("xx", "yy"), unrecorded));
    EXPECT_FALSE(check_languages(with_languages("xx", "fr"), LanguagePair{"", "fr"}));
    EXPECT_TRUE(check_languages(with_languages("xx", "yy"), LanguagePair{"", "fr"}));
}

TEST(ServeRequest, LanguageNames) {
    EXPECT_EQ(language_name("en"), "English");
    EXPECT_EQ(language_name("DE"), "German");
    EXPECT_EQ(language_name("pt-BR"), "Portuguese (pt-BR)");
    EXPECT_EQ(language_name("tok"), "tok");
    EXPECT_EQ(language_name(""), "");
}

TEST(ServeRequest, FormEncoded) {
    auto r = ok(Endpoint::libretranslate, "q=I%27m+home+.&source=en&target=fr&api_key=a%2Bb",
                "application/x-www-form-urlencoded");
    EXPECT_EQ(r.q, std::vector<std::string>{"I'm home ."});
    EXPECT_EQ(r.api_key, "a+b");
    EXPECT_EQ(fails(Endpoint::libretranslate, "q=%zz", "application/x-www-form-urlencoded").status, 400);
    EXPECT_EQ(fails(Endpoint::libretranslate, "q=%4", "application/x-www-form-urlencoded").status, 400);
    EXPECT_EQ(fails(Endpoint::libretranslate, "source=en", "application/x-www-form-urlencoded").status, 400);
    // /v1 takes JSON only.
    EXPECT_EQ(fails(Endpoint::v1, "q=x", "application/x-www-form-urlencoded").status, 415);
}

TEST(ServeRequest, V1Options) {
    auto r = ok(Endpoint::v1, R"({"q":"x","beam_size":4,"length_penalty":0.5,"max_length":7,"n_best":3,"attention":true,"no_unk":true})");
    EXPECT_EQ(r.settings.beam, 4);
    EXPECT_EQ(r.settings.length_penalty, 0.5);
    EXPECT_EQ(r.settings.max_len, 7);
    EXPECT_EQ(r.settings.n_best, 3);
    EXPECT_TRUE(r.settings.attention);
    EXPECT_TRUE(r.settings.no_unk);
    r = ok(Endpoint::v1, R"({"q":"x"})");
    EXPECT_EQ(r.settings, DecodeSettings{});
}

TEST(ServeRequest, WrongTypesAndValues) {
    struct Case {
        Endpoint e;
        const char* body;
        const char* says;
    };
    const Case cases[] = {
        {Endpoint::libretranslate, R"({"q":3})", "\"q\" must be a string or a list of strings, got an integer"},
        {Endpoint::libretranslate, R"({"q":["a",null]})", "\"q\"[1] must be a string, got null"},
        {Endpoint::libretranslate, R"({"q":[]})", "empty list"},
        {Endpoint::libretranslate, R"({"source":"en"})", "\"q\" is missing"},
        {Endpoint::libretranslate, R"({"q":"x","target":1})", "\"target\" must be a string, got an integer"},
        {Endpoint::libretranslate, R"({"q":"x","format":"html"})", "\"format\" must be \"text\""},
        {Endpoint::libretranslate, R"({"q":"x","source":1})", "\"source\" must be a string"},
        {Endpoint::libretranslate, R"(["q"])", "must be a JSON object, got a list"},
        {Endpoint::libretranslate, R"({"q":"x")", "not valid JSON"},
        {Endpoint::libretranslate, "", "not valid JSON"},
        {Endpoint::v1, R"({"q":"x","beam_size":0})", "\"beam_size\" must be in [1, 100], got 0"},
        {Endpoint::v1, R"({"q":"x","beam_size":2.5})", "\"beam_size\" must be an integer, got a decimal number"},
        {Endpoint::v1, R"({"q":"x","beam_size":18446744073709551615})", "\"beam_size\" must be in [1, 100]"},
        {Endpoint::v1, R"({"q":"x","beam_size":-9223372036854775808})", "\"beam_size\" must be in [1, 100]"},
        // beyond 64 bits the parser gives a float: out of range, not "a decimal number"
        {Endpoint::v1, R"({"q":"x","beam_size":18446744073709551616})",
         "\"beam_size\" must be in [1, 100], got 1.8446744073709552e+19"},
        {Endpoint::v1, R"({"q":"x","max_length":-99999999999999999999})",
         "\"max_length\" must be in [1, 1000], got -1e+20"},
        {Endpoint::v1, R"({"q":"x","beam_size":1.5e30})", "\"beam_size\" must be in [1, 100], got 1.5e+30"},
        {Endpoint::v1, R"({"q":"x","beam_size":2.5})", "\"beam_size\" must be an integer, got a decimal number"},
        {Endpoint::v1, R"({"q":"x","max_length":"5"})", "\"max_length\" must be an integer, got a string"},
        {Endpoint::v1, R"({"q":"x","length_penalty":-1})", "\"length_penalty\" must be in [0, 10]"},
        {Endpoint::v1, R"({"q":"x","length_penalty":true})", "\"length_penalty\" must be a number"},
        {Endpoint::v1, R"({"q":"x","attention":1})", "\"attention\" must be true or false"},
        {Endpoint::v1, R"({"q":"x","beam_size":2,"n_best":3})", "\"n_best\" (3) must not exceed \"beam_size\" (2)"},
        {Endpoint::v1, R"({"q":"x","beam":2})", "unknown field \"beam\""},
    };
    for (const Case& c : cases) {
        const ApiError e = fails(c.e, c.body);
        EXPECT_EQ(e.status, 400) << c.body;
        EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << " -> " << e.message;
        EXPECT_FALSE(e.kind.empty());
    }
}

TEST(ServeRequest, TextChecks) {
    EXPECT_NE(fails(Endpoint::libretranslate, "{\"q\":\"a\\u0000b\"}").message.find("NUL"), std::string::npos);
    const std::string invalid = std::string("{\"q\":\"a\xC3(\"}");
    // nlohmann rejects invalid UTF-8 in the JSON text itself.
    EXPECT_EQ(fails(Endpoint::libretranslate, invalid).status, 400);
    EXPECT_NE(fails(Endpoint::libretranslate, "q=a%C3%28", "application/x-www-form-urlencoded").message.find("UTF-8"),
              std::string::npos);
    // Empty and blank sentences are accepted (their translation is "").
    EXPECT_EQ(ok(Endpoint::libretranslate, R"({"q":["", "  "]})").q.size(), 2u);
}

TEST(ServeRequest, LimitsNameThemselves) {
    Limits l;
    l.max_sentences  = 2;
    l.max_chars      = 5;
    l.max_body_bytes = 40;
    ApiError e = fails(Endpoint::libretranslate, R"({"q":["a","b","c"]})", kJson, l);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.limit, "max_sentences");
    EXPECT_NE(e.message.find("limit is 2"), std::string::npos);
    e = fails(Endpoint::libretranslate, R"({"q":"abcdef"})", kJson, l);
    EXPECT_EQ(e.limit, "max_chars");
    EXPECT_NE(e.message.find("6 characters"), std::string::npos);
    // Characters, not bytes: five two-byte letters fit.
    EXPECT_EQ(ok(Endpoint::libretranslate, "{\"q\":\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\"}", kJson, l).q.size(), 1u);
    // Per sentence, as texts are translated sentence by sentence: two of 3 characters pass (the
    // sentence limit is 2), a text whose second sentence is over 5 is refused naming it.
    EXPECT_EQ(ok(Endpoint::libretranslate, R"({"q":"Go. Run!"})", kJson, l).q.size(), 1u);
    e = fails(Endpoint::libretranslate, R"({"q":"Go. Abcdef."})", kJson, l);
    EXPECT_EQ(e.limit, "max_chars");
    EXPECT_NE(e.message.find("\"q\" sentence 2 has 7 characters; the limit is 5 per sentence"), std::string::npos)
        << e.message;
    e = fails(Endpoint::libretranslate, std::string(R"({"q":")") + std::string(50, 'a') + "\"}", kJson, l);
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.limit, "max_body_bytes");
}

TEST(ServeRequest, ContentType) {
    for (const char* t : {"", "text/plain", "application/jsonx", "multipart/form-data"}) {
        const ApiError e = fails(Endpoint::libretranslate, R"({"q":"x"})", t);
        EXPECT_EQ(e.status, 415) << t;
        EXPECT_EQ(e.kind, "content_type");
    }
}

TEST(ServeRequest, ErrorJson) {
    const std::string j = error_json({413, "limit", "too \"big\"", "max_body_bytes"});
    EXPECT_EQ(j, R"({"error":"too \"big\"","kind":"limit","limit":"max_body_bytes"})");
    EXPECT_EQ(error_json({400, "bad_json", "x", ""}), R"({"error":"x","kind":"bad_json"})");
}

TEST(ServeRequest, Utf8LengthAndUrlDecode) {
    EXPECT_EQ(utf8_length("a\xC3\xA9\xE2\x82\xAC"), 3u);
    std::string out;
    EXPECT_TRUE(url_decode("a+b%20c%2b", out));
    EXPECT_EQ(out, "a b c+");
    EXPECT_FALSE(url_decode("%", out));
    EXPECT_FALSE(url_decode("%g0", out));
}

}  // namespace
}  // namespace qkv::serve
