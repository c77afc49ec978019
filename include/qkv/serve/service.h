#pragma once
// The HTTP service of `qkv serve`, independent of the HTTP library: Service::handle maps one
// request (method, path, headers, body) to a response, so routing, limits, authentication and
// every error status are testable without sockets. apps/qkv/cmd_serve.cpp adapts cpp-httplib
// to it. Endpoints (README "qkv serve"):
//   GET  /                 the web page (serve/web_page.h)
//   GET  /health           200 {"status":"ok",...} once a model is loaded, else 503
//   GET  /metrics          Prometheus text format 0.0.4
//   GET  /languages        LibreTranslate's language list: the served model's pair (config.json)
//   POST /translate        LibreTranslate's request and answer (serve/request.h)
//   POST /v1/translate     qkv's options; n-best hypotheses with scores, attention weights
// Errors are JSON {"error", "kind"[, "limit"]} with 400, 401, 404, 405, 413, 415, 500 or 503
// (+ Retry-After); no message names a file or shows a stack.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/serve/batcher.h"
#include "qkv/serve/model_holder.h"
#include "qkv/serve/request.h"

namespace qkv::serve {

struct ServiceOptions {
    Limits limits;
    BatcherOptions batcher;
    std::chrono::milliseconds timeout{30000};  // per-request deadline: 503 when not answered by then
    std::string api_key;                       // "" = no authentication
    int retry_after_s = 1;                     // Retry-After of a 503 (queue full)
};

struct HttpRequest {
    std::string method, path, body;
    std::vector<std::pair<std::string, std::string>> headers;  // names in any case
    /// The first header named `name` (case-insensitive), or "".
    std::string header(const std::string& name) const;
};

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

/// A response for an error: its JSON body (the service adds Retry-After to its 503s).
HttpResponse error_response(const ApiError& e);

/// The 413 "limit" of a body over `max_body_bytes`, refused by the HTTP layer while it reads it.
ApiError body_too_large_error(size_t max_body_bytes);

/// The error for a status the HTTP library answered itself, in the service's JSON shape: 413 is
/// body_too_large_error, 404 "not_found", 414 "limit" (request line), 500 and above "internal",
/// any other status "http" ("bad request").
ApiError transport_error(int status, size_t max_body_bytes);

/// Counters and histograms behind GET /metrics (thread-safe).
class Metrics {
public:
    void request(const std::string& endpoint, int status, double seconds);
    void error(const std::string& kind);
    void batch(int64_t sentences, int64_t requests);
    void sentences(int64_t n);
    void reload(bool ok);
    /// Prometheus text exposition; queue_sentences and model_ready are read at call time.
    std::string text(int64_t queue_sentences, bool model_ready) const;

private:
    static constexpr std::array<double, 12> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                               0.5,   1,    2.5,   5,    10,  30};
    static constexpr std::array<double, 10> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, int64_t> requests_;
    std::map<std::string, int64_t> errors_;
    std::array<int64_t, kLatencyBuckets.size() + 1> latency_{};
    double latency_sum_ = 0;
    std::array<int64_t, kBatchBuckets.size() + 1> batch_{};
    double batch_sum_ = 0;
    int64_t batches_ = 0, batch_requests_ = 0, sentences_ = 0, reload_ok_ = 0, reload_failed_ = 0;
};

class Service {
public:
    /// Starts the batcher; the model comes from `model` (loaded by the caller, reloadable).
    Service(ServiceOptions opt, std::shared_ptr<ModelHolder> model);
    ~Service();
    Service(const Service&) = delete;
    Service& operator=(const Service&) = delete;

    /// Answers one request; thread-safe; never throws.
    HttpResponse handle(const HttpRequest& req);
    /// The answer to a request the HTTP layer refused before handle() could see it (a body over
    /// the limit, malformed HTTP): error_response(e), counted in /metrics as handle() counts its
    /// own errors, under the endpoint "http". Thread-safe.
    HttpResponse refuse(const ApiError& e);
    /// Reloads the model folder (ModelHolder::reload), logs the outcome on stderr, counts it.
    /// Returns true when the new model serves.
    bool reload();
    /// Decodes queued translations without waiting for batch-mates (a shutdown has begun).
    void drain();
    /// Finishes queued translations and stops the batcher (after the HTTP server has stopped
    /// handing in requests). Later translation requests get 503.
    void stop();
    Metrics& metrics() { return metrics_; }

private:
    HttpResponse translate(const HttpRequest& req, Endpoint endpoint);
    /// nullopt when no key is configured or the request carries the right one (header X-API-Key,
    /// Authorization: Bearer, then `body_key`); else 401 "unauthorized" when it carries none and
    /// 403 "forbidden" when it carries another (LibreTranslate's "Invalid API key" status).
    /// `accepted` names where a key may be given, for the 401's message.
    std::optional<ApiError> key_error(const HttpRequest& req, const std::string& body_key,
                                      const char* accepted) const;

    ServiceOptions opt_;
    std::shared_ptr<ModelHolder> model_;
    Metrics metrics_;
    std::unique_ptr<Batcher> batcher_;
};

}  // namespace qkv::serve
