// libFuzzer target: request bodies of qkv serve (serve/request.h) and the service's routing
// (serve/service.h, no model loaded). Input: byte 0 picks the endpoint and the Content-Type,
// byte 1 the path and method for Service::handle; the rest is the body. Checks the invariants
// the parser promises: no exception, no crash, an error has a known status, a message and a
// kind and names no file (the model folder's name appears in no answer unless the client sent it); an accepted request has at least one sentence of valid UTF-8 without NUL,
// within the limits. Seeds: tests/fuzz/corpus/serve_request/.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "qkv/data/text.h"
#include "qkv/data/tokenizer.h"
#include "qkv/serve/request.h"
#include "qkv/serve/service.h"

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

qkv::serve::Service& service() {
    static auto holder = std::make_shared<qkv::serve::ModelHolder>("/nonexistent/qkv_fuzz_model");
    static qkv::serve::Service svc(
        [] {
            qkv::serve::ServiceOptions o;
            o.api_key = "fuzzkey";
            return o;
        }(),
        holder);
    return svc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace qkv::serve;
    if (size < 2) return 0;
    static const char* types[] = {"application/json", "application/x-www-form-urlencoded", "text/plain",
                                  "application/json; charset=utf-8"};
    const Endpoint endpoint = (data[0] & 1) ? Endpoint::v1 : Endpoint::libretranslate;
    const char* type        = types[(data[0] >> 1) & 3];
    const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
    Limits limits;
    limits.max_sentences = 8;
    limits.max_chars     = 64;
    const ParseResult r = parse_translate_request(endpoint, body, type, limits);
    // The client may send the model folder's name itself (libFuzzer finds it through its
    // comparison tracing): an answer that echoes the client's own text is not a leak.
    bool client_named_model = body.find("qkv_fuzz_model") != std::string_view::npos;
    if (const auto* e = std::get_if<ApiError>(&r)) {
        require(e->status == 400 || e->status == 413 || e->status == 415);
        require(!e->message.empty() && !e->kind.empty());
        require(error_json(*e).find("\"error\"") != std::string::npos);
    } else {
        const auto& t = std::get<TranslateRequest>(r);
        require(!t.q.empty() && int64_t(t.q.size()) <= limits.max_sentences);
        for (const auto& s : t.q) {
            client_named_model = client_named_model || s.find("qkv_fuzz_model") != std::string::npos;
            require(qkv::data::invalid_utf8_offset(s) == std::string::npos);
            require(s.find('\0') == std::string::npos);
            for (const auto& x : qkv::data::split_sentences(s).sentences)  // the limit is per sentence
                require(int64_t(utf8_length(x.text)) <= limits.max_chars);
        }
        require(t.settings.n_best >= 1);
    }
    // Routing and authentication on the same body; the model never loads, so a translation
    // request that gets through is answered 503 at once.
    static const char* paths[] = {"/translate", "/v1/translate", "/health", "/metrics", "/", "/x"};
    static const char* methods[] = {"POST", "GET", "PUT", "DELETE"};
    HttpRequest req;
    req.path   = paths[data[1] % 6];
    req.method = methods[(data[1] >> 3) & 3];
    req.body   = std::string(body);
    req.headers = {{"Content-Type", type}};
    if (data[1] & 0x80) req.headers.push_back({"X-API-Key", "fuzzkey"});
    const HttpResponse res = service().handle(req);
    require(res.status >= 200 && res.status < 600);
    require(client_named_model || res.body.find("qkv_fuzz_model") == std::string::npos);
    return 0;
}
