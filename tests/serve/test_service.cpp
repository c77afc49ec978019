// serve/service.h without sockets and without a model: routing, statuses, authentication,
// metrics, and that no response names the model folder.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "qkv/serve/service.h"
#include "qkv/serve/web_page.h"

namespace qkv::serve {
namespace {

const std::string kDir = "/nonexistent/qkv_secret_model_dir";

struct Fixture {
    std::shared_ptr<ModelHolder> holder = std::make_shared<ModelHolder>(kDir);
    std::unique_ptr<Service> svc;
    explicit Fixture(std::string key = "") {
        ServiceOptions o;
        o.api_key = std::move(key);
        o.limits.max_body_bytes = 200;
        svc = std::make_unique<Service>(o, holder);
    }
    HttpResponse call(std::string method, std::string path, std::string body = "",
                      std::vector<std::pair<std::string, std::string>> headers = {{"Content-Type", "application/json"}}) {
        HttpRequest r{std::move(method), std::move(path), std::move(body), std::move(headers)};
        HttpResponse res = svc->handle(r);
        EXPECT_EQ(res.body.find("qkv_secret"), std::string::npos) << res.body;
        return res;
    }
};

std::string header(const HttpResponse& r, const std::string& name) {
    for (const auto& [k, v] : r.headers)
        if (k == name) return v;
    return "";
}

TEST(ServeService, RoutesAndMethods) {
    Fixture f;
    HttpResponse r = f.call("GET", "/nope");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(r.body.find("\"kind\":\"not_found\""), std::string::npos);
    r = f.call("GET", "/translate");
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(header(r, "Allow"), "POST");
    r = f.call("DELETE", "/health");
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(header(r, "Allow"), "GET, HEAD");
    r = f.call("GET", "/");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
    // No model yet: the page names no languages, and the language list is not known.
    EXPECT_EQ(r.body, index_html({}));
    r = f.call("GET", "/languages");
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("\"kind\":\"loading\""), std::string::npos);
}

TEST(ServeService, NotReadyUntilLoadedAndRefusedLoadIsCounted) {
    Fixture f;
    EXPECT_EQ(f.call("GET", "/health").status, 503);
    HttpResponse r = f.call("POST", "/translate", R"({"q":"go ."})");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(header(r, "Retry-After"), "1");
    EXPECT_FALSE(f.svc->reload());  // the folder does not exist
    EXPECT_EQ(f.holder->get(), nullptr);
    r = f.call("GET", "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.content_type.rfind("text/plain; version=0.0.4", 0), 0u);
    for (const char* s : {"qkv_model_ready 0", "qkv_model_reloads_total{result=\"refused\"} 1",
                          "qkv_requests_total{endpoint=\"/translate\",code=\"503\"} 1", "qkv_errors_total{kind=\"loading\"} 1",
                          "qkv_request_duration_seconds_bucket{le=\"+Inf\"} 2", "qkv_queue_sentences 0",
                          "qkv_batch_sentences_count 0"})
        EXPECT_NE(r.body.find(s), std::string::npos) << s << "\n" << r.body;
}

TEST(ServeService, BadRequestsGetTheirStatus) {
    Fixture f;
    EXPECT_EQ(f.call("POST", "/translate", R"({"q":"go ."})", {{"Content-Type", "text/plain"}}).status, 415);
    EXPECT_EQ(f.call("POST", "/translate", R"({"q":)").status, 400);
    EXPECT_EQ(f.call("POST", "/v1/translate", R"({"q":"x","beam_size":"3"})").status, 400);
    const HttpResponse r = f.call("POST", "/translate", R"({"q":")" + std::string(300, 'a') + "\"}");
    EXPECT_EQ(r.status, 413);
    EXPECT_NE(r.body.find("max_body_bytes"), std::string::npos);
}

// Requests the HTTP layer refuses itself (a body over the limit, malformed HTTP) get the service's
// JSON error and are counted under the endpoint "http".
TEST(ServeService, TransportErrorsAreJsonAndCounted) {
    EXPECT_EQ(transport_error(413, 200).kind, "limit");
    EXPECT_EQ(transport_error(413, 200).limit, "max_body_bytes");
    EXPECT_EQ(transport_error(413, 200).message, "the body is larger than 200 bytes (max_body_bytes)");
    EXPECT_EQ(transport_error(404, 200).kind, "not_found");
    EXPECT_EQ(transport_error(414, 200).kind, "limit");
    EXPECT_EQ(transport_error(503, 200).kind, "internal");
    EXPECT_EQ(transport_error(503, 200).status, 503);
    EXPECT_EQ(transport_error(400, 200).kind, "http");
    EXPECT_EQ(transport_error(405, 200).status, 405);
    Fixture f;
    const HttpResponse r = f.svc->refuse(body_too_large_error(200));
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_NE(r.body.find("\"kind\":\"limit\""), std::string::npos) << r.body;
    f.svc->refuse(transport_error(400, 200));
    const std::string m = f.call("GET", "/metrics").body;
    for (const char* s : {"qkv_requests_total{endpoint=\"http\",code=\"413\"} 1",
                          "qkv_requests_total{endpoint=\"http\",code=\"400\"} 1", "qkv_errors_total{kind=\"limit\"} 1",
                          "qkv_errors_total{kind=\"http\"} 1"})
        EXPECT_NE(m.find(s), std::string::npos) << s << "\n" << m;
}

TEST(ServeService, ApiKey) {
    Fixture f("s3cret");
    const std::string body = R"({"q":"go ."})";
    const std::pair<std::string, std::string> json{"Content-Type", "application/json"};
    // No key: 401 saying where to give one. Another key: 403 saying it is not valid
    // (LibreTranslate's status for an invalid key), so a user can tell a typo from a missing key.
    const std::string missing = R"j({"error":"an API key is required (header X-API-Key, Authorization: Bearer, or \"api_key\")","kind":"unauthorized"})j";
    const std::string wrong = R"j({"error":"the API key is not valid (check it with the server's operator)","kind":"forbidden"})j";
    auto answer = [](const HttpResponse& r) { return std::to_string(r.status) + " " + r.body; };
    EXPECT_EQ(answer(f.call("POST", "/translate", body)), "401 " + missing);
    EXPECT_EQ(answer(f.call("POST", "/translate", body, {json, {"X-API-Key", "wrong"}})), "403 " + wrong);
    EXPECT_EQ(answer(f.call("POST", "/v1/translate", body, {json, {"Authorization", "Bearer wrong"}})), "403 " + wrong);
    EXPECT_EQ(answer(f.call("POST", "/translate", R"({"q":"go .","api_key":"s3cre"})")), "403 " + wrong);
    EXPECT_EQ(answer(f.call("GET", "/metrics", "", {})),
              R"j(401 {"error":"an API key is required (header X-API-Key or Authorization: Bearer)","kind":"unauthorized"})j");
    EXPECT_EQ(answer(f.call("GET", "/metrics", "", {{"X-API-Key", "wrong"}})), "403 " + wrong);
    // A bad body without the key says 401 (403 with a wrong one), not what is wrong with the body.
    EXPECT_EQ(answer(f.call("POST", "/translate", "{")), "401 " + missing);
    EXPECT_EQ(answer(f.call("POST", "/translate", "{", {json, {"X-API-Key", "wrong"}})), "403 " + wrong);
    // With the key (header, bearer, LibreTranslate's body field) the request passes (503: no model).
    EXPECT_EQ(f.call("POST", "/translate", body, {json, {"x-api-key", "s3cret"}}).status, 503);
    EXPECT_EQ(f.call("POST", "/v1/translate", body, {json, {"Authorization", "Bearer s3cret"}}).status, 503);
    EXPECT_EQ(f.call("POST", "/translate", R"({"q":"go .","api_key":"s3cret"})").status, 503);
    EXPECT_EQ(f.call("POST", "/translate", "{", {json, {"X-API-Key", "s3cret"}}).status, 400);
    EXPECT_EQ(f.call("GET", "/metrics", "", {{"X-API-Key", "s3cret"}}).status, 200);
    // The page and the health check stay open; the page shows its API key field.
    const HttpResponse page = f.call("GET", "/");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("<label id=\"keyfield\">API key <input id=\"key\""), std::string::npos);
    EXPECT_NE(Fixture().call("GET", "/").body.find("<label id=\"keyfield\" hidden>"), std::string::npos);
    EXPECT_EQ(f.call("GET", "/health").status, 503);
}

TEST(ServeService, PageNamesTheModelsLanguages) {
    const std::string en_fr = index_html({"en", "fr"}), de_en = index_html({"de", "en"}), none = index_html({});
    EXPECT_NE(en_fr.find("<title>qkv: English to French, with attention</title>"), std::string::npos);
    EXPECT_NE(en_fr.find("<h2 id=\"srclang\">English</h2>"), std::string::npos);
    EXPECT_NE(en_fr.find("<h2 id=\"tgtlang\">French</h2>"), std::string::npos);
    EXPECT_NE(en_fr.find("placeholder=\"Type an English sentence, e.g. I&#39;m home.\""), std::string::npos);
    EXPECT_NE(de_en.find("<title>qkv: German to English, with attention</title>"), std::string::npos);
    EXPECT_NE(de_en.find("<h2 id=\"srclang\">German</h2>"), std::string::npos);
    EXPECT_NE(de_en.find("<h2 id=\"tgtlang\">English</h2>"), std::string::npos);
    EXPECT_NE(de_en.find("placeholder=\"Type a sentence in German\""), std::string::npos);
    EXPECT_EQ(de_en.find("French"), std::string::npos);
    EXPECT_NE(none.find("<h2 id=\"srclang\">Source</h2>"), std::string::npos);
    EXPECT_NE(none.find("<h2 id=\"tgtlang\">Translation</h2>"), std::string::npos);
    for (const std::string* p : {&en_fr, &de_en, &none}) EXPECT_EQ(p->find("{{"), std::string::npos);
    // Attention weights are asked for only where the model has them (Transformer models).
    EXPECT_NE(en_fr.find("attention: true }"), std::string::npos);
    EXPECT_NE(index_html({"en", "fr"}, false).find("attention: false }"), std::string::npos);
    // A code outside the table is shown as it is, escaped.
    EXPECT_NE(index_html({"x<y", ""}).find("<h2 id=\"srclang\">x&lt;y</h2>"), std::string::npos);
}

TEST(ServeService, PageIsSelfContained) {
    const std::string page = index_html({"en", "fr"});
    EXPECT_NE(page.find("/v1/translate"), std::string::npos);
    // No external resources (no CDN): no http(s) URLs in src/href attributes or fetches.
    EXPECT_EQ(page.find("src=\"http"), std::string::npos);
    EXPECT_EQ(page.find("href=\"http"), std::string::npos);
    EXPECT_EQ(page.find("fetch(\"http"), std::string::npos);
}

}  // namespace
}  // namespace qkv::serve
