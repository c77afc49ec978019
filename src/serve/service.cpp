// HTTP-library-independent service of qkv serve (serve/service.h).
#include "qkv/serve/service.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/data/tokenizer.h"
#include "qkv/serve/web_page.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translation_data.h"

namespace qkv::serve {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse json_response(int status, const json& j) {
    HttpResponse r;
    r.status = status;
    r.body   = dump(j);
    return r;
}

/// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_key(const std::string& a, const std::string& b) {
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

struct Route {
    const char* path;
    const char* allow;
};
constexpr Route kRoutes[] = {{"/", "GET, HEAD"},           {"/index.html", "GET, HEAD"},
                             {"/health", "GET, HEAD"},     {"/metrics", "GET, HEAD"},
                             {"/languages", "GET, HEAD"},  {"/translate", "POST"},
                             {"/v1/translate", "POST"}};

/// The languages a model records (LanguagePair: "" for a side it does not).
LanguagePair languages_of(const runtime::ModelDir& m) {
    return {runtime::source_language(m.config.data), runtime::target_language(m.config.data)};
}

/// A code for LibreTranslate's fields: "und" (ISO 639-2 "undetermined") for a side the model
/// does not record.
std::string code_or_und(const std::string& code) { return code.empty() ? "und" : code; }

std::string prom_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '\\' || c == '"') o.push_back('\\');
        if (c == '\n') {
            o += "\\n";
            continue;
        }
        o.push_back(c);
    }
    return o;
}

std::string num(double v) {
    std::ostringstream s;
    s.precision(10);
    s << v;
    return s.str();
}

}  // namespace

std::string HttpRequest::header(const std::string& name) const {
    const std::string n = lower(name);
    for (const auto& [k, v] : headers)
        if (lower(k) == n) return v;
    return "";
}

HttpResponse error_response(const ApiError& e) {
    HttpResponse r;
    r.status = e.status;
    r.body   = error_json(e);
    return r;
}

ApiError body_too_large_error(size_t max_body_bytes) {
    return {413, "limit", "the body is larger than " + std::to_string(max_body_bytes) + " bytes (max_body_bytes)",
            "max_body_bytes"};
}

ApiError transport_error(int status, size_t max_body_bytes) {
    if (status == 413) return body_too_large_error(max_body_bytes);
    if (status == 404) return {404, "not_found", "no such path", ""};
    if (status == 414) return {414, "limit", "the request line is too long", ""};
    if (status >= 500) return {status, "internal", "internal error", ""};
    return {status, "http", "bad request", ""};
}

namespace {

/// error_response, with Retry-After on a 503 (loading, queue full, deadline): the client may try
/// again after retry_after_s.
HttpResponse error_response(const ApiError& e, int retry_after_s) {
    HttpResponse r = error_response(e);
    if (e.status == 503) r.headers.push_back({"Retry-After", std::to_string(retry_after_s)});
    return r;
}

const ApiError kLoading{503, "loading", "the model is still loading; retry later", ""};
// Where a translation request may carry the API key (the 401's message).
constexpr const char* kKeyPlaces = "header X-API-Key, Authorization: Bearer, or \"api_key\"";

}  // namespace

// ---- metrics ----------------------------------------------------------------------------------

void Metrics::request(const std::string& endpoint, int status, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[{endpoint, status}];
    size_t b = 0;
    while (b < kLatencyBuckets.size() && seconds > kLatencyBuckets[b]) ++b;
    ++latency_[b];
    latency_sum_ += seconds;
}

void Metrics::error(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_[kind];
}

void Metrics::batch(int64_t sentences, int64_t requests) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t b = 0;
    while (b < kBatchBuckets.size() && double(sentences) > kBatchBuckets[b]) ++b;
    ++batch_[b];
    batch_sum_ += double(sentences);
    ++batches_;
    batch_requests_ += requests;
}

void Metrics::sentences(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    sentences_ += n;
}

void Metrics::reload(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++(ok ? reload_ok_ : reload_failed_);
}

std::string Metrics::text(int64_t queue_sentences, bool model_ready) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream o;
    o << "# HELP qkv_requests_total HTTP requests answered, by endpoint and status code.\n"
         "# TYPE qkv_requests_total counter\n";
    for (const auto& [k, v] : requests_)
        o << "qkv_requests_total{endpoint=\"" << prom_escape(k.first) << "\",code=\"" << k.second << "\"} " << v
          << "\n";
    o << "# HELP qkv_sentences_total Sentences translated (a text cut into several counts each).\n# TYPE qkv_sentences_total counter\n"
      << "qkv_sentences_total " << sentences_ << "\n";
    o << "# HELP qkv_errors_total Error responses, by kind.\n# TYPE qkv_errors_total counter\n";
    for (const auto& [k, v] : errors_) o << "qkv_errors_total{kind=\"" << prom_escape(k) << "\"} " << v << "\n";
    o << "# HELP qkv_batch_sentences Sentences per decoder batch.\n# TYPE qkv_batch_sentences histogram\n";
    int64_t cum = 0;
    for (size_t b = 0; b < kBatchBuckets.size(); ++b) {
        cum += batch_[b];
        o << "qkv_batch_sentences_bucket{le=\"" << num(kBatchBuckets[b]) << "\"} " << cum << "\n";
    }
    cum += batch_.back();
    o << "qkv_batch_sentences_bucket{le=\"+Inf\"} " << cum << "\nqkv_batch_sentences_sum " << num(batch_sum_)
      << "\nqkv_batch_sentences_count " << batches_ << "\n";
    o << "# HELP qkv_batch_requests_total Requests decoded, summed over batches.\n"
         "# TYPE qkv_batch_requests_total counter\nqkv_batch_requests_total "
      << batch_requests_ << "\n";
    o << "# HELP qkv_request_duration_seconds Time from request to answer.\n"
         "# TYPE qkv_request_duration_seconds histogram\n";
    cum = 0;
    int64_t total = 0;
    for (int64_t v : latency_) total += v;
    for (size_t b = 0; b < kLatencyBuckets.size(); ++b) {
        cum += latency_[b];
        o << "qkv_request_duration_seconds_bucket{le=\"" << num(kLatencyBuckets[b]) << "\"} " << cum << "\n";
    }
    o << "qkv_request_duration_seconds_bucket{le=\"+Inf\"} " << total << "\nqkv_request_duration_seconds_sum "
      << num(latency_sum_) << "\nqkv_request_duration_seconds_count " << total << "\n";
    o << "# HELP qkv_queue_sentences Sentences waiting for the decoder.\n# TYPE qkv_queue_sentences gauge\n"
      << "qkv_queue_sentences " << queue_sentences << "\n";
    o << "# HELP qkv_model_ready 1 once a model is loaded.\n# TYPE qkv_model_ready gauge\nqkv_model_ready "
      << (model_ready ? 1 : 0) << "\n";
    o << "# HELP qkv_model_reloads_total Model folder loads, by result.\n# TYPE qkv_model_reloads_total counter\n"
      << "qkv_model_reloads_total{result=\"ok\"} " << reload_ok_ << "\nqkv_model_reloads_total{result=\"refused\"} "
      << reload_failed_ << "\n";
    return o.str();
}

// ---- service ----------------------------------------------------------------------------------

Service::Service(ServiceOptions opt, std::shared_ptr<ModelHolder> model) : opt_(std::move(opt)), model_(std::move(model)) {
    batcher_ = std::make_unique<Batcher>(opt_.batcher, [this](const std::vector<std::string>& s, const ResolvedSettings& rs) {
        return translate_sentences(*model_, s, rs);  // sets this worker thread's precision
    });
    batcher_->on_batch = [this](int64_t sentences, int64_t requests) { metrics_.batch(sentences, requests); };
}

Service::~Service() { stop(); }

void Service::drain() { batcher_->drain(); }

void Service::stop() { batcher_->stop(); }

bool Service::reload() {
    const std::string err = model_->reload();
    metrics_.reload(err.empty());
    if (err.empty())
        std::fprintf(stderr, "qkv serve: loaded the model in '%s' (load %lld)\n", model_->dir().c_str(),
                     static_cast<long long>(model_->generation()));
    else
        std::fprintf(stderr, "qkv serve: refused to load '%s'; %s: %s\n", model_->dir().c_str(),
                     model_->get() ? "the previous model keeps serving" : "no model is loaded", err.c_str());
    return err.empty();
}

std::optional<ApiError> Service::key_error(const HttpRequest& req, const std::string& body_key,
                                           const char* accepted) const {
    if (opt_.api_key.empty()) return std::nullopt;
    std::string key = req.header("X-API-Key");
    const std::string auth = req.header("Authorization");
    if (key.empty() && lower(auth.substr(0, 7)) == "bearer ") key = auth.substr(7);
    if (key.empty()) key = body_key;
    if (key.empty()) return ApiError{401, "unauthorized", std::string("an API key is required (") + accepted + ")", ""};
    if (!same_key(key, opt_.api_key))
        return ApiError{403, "forbidden", "the API key is not valid (check it with the server's operator)", ""};
    return std::nullopt;
}

HttpResponse Service::refuse(const ApiError& e) {
    metrics_.error(e.kind);
    metrics_.request("http", e.status, 0);
    return error_response(e);
}

HttpResponse Service::handle(const HttpRequest& req) {
    const auto t0 = Clock::now();
    std::string endpoint = "other";
    HttpResponse res;
    try {
        const Route* route = nullptr;
        for (const Route& r : kRoutes)
            if (req.path == r.path) route = &r;
        if (!route) {
            res = error_response({404, "not_found", "no such path (paths: /, /health, /metrics, /languages, "
                                                    "/translate, /v1/translate)", ""});
        } else {
            endpoint = route->path;
            const bool is_get = req.method == "GET" || req.method == "HEAD";
            const bool allowed = std::string(route->allow) == "POST" ? req.method == "POST" : is_get;
            if (!allowed) {
                res = error_response({405, "method", req.path + " accepts " + route->allow + " only", ""});
                res.headers.push_back({"Allow", route->allow});
            } else if (req.path == "/" || req.path == "/index.html") {
                res.content_type = "text/html; charset=utf-8";
                auto m = model_->get();
                res.body = index_html(m ? languages_of(*m) : LanguagePair{}, !m || m->transformer() != nullptr,
                                      !opt_.api_key.empty());
            } else if (req.path == "/health") {
                auto m = model_->get();
                if (m)
                    res = json_response(200, {{"status", "ok"},
                                              {"model", {{"architecture", runtime::model_kind_name(m->config.architecture)},
                                                         {"generation", model_->generation()},
                                                         {"compute_type", runtime::compute_type_name(model_->compute_type())},
                                                         {"source_language", runtime::source_language(m->config.data)},
                                                         {"target_language", runtime::target_language(m->config.data)},
                                                         {"beam_size", m->config.decode.beam},
                                                         {"max_length", m->config.decode.max_len}}}});
                else
                    res = json_response(503, {{"status", "loading"}});
            } else if (req.path == "/metrics") {
                if (auto e = key_error(req, "", "header X-API-Key or Authorization: Bearer")) {
                    res = error_response(*e);
                } else {
                    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
                    res.body         = metrics_.text(batcher_->queued_sentences(), model_->get() != nullptr);
                }
            } else if (req.path == "/languages") {
                // LibreTranslate's list, from the served model (a reload may change it).
                if (auto m = model_->get()) {
                    const LanguagePair p = languages_of(*m);
                    const std::string name = language_name(p.source);
                    res = json_response(200, json::array({{{"code", code_or_und(p.source)},
                                                           {"name", name.empty() ? "unrecorded" : name},
                                                           {"targets", {code_or_und(p.target)}}}}));
                } else {
                    res = error_response(kLoading, opt_.retry_after_s);
                }
            } else {
                res = translate(req, req.path == "/translate" ? Endpoint::libretranslate : Endpoint::v1);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qkv serve: %s %s failed: %s\n", req.method.c_str(), req.path.c_str(), e.what());
        res = error_response({500, "internal", "internal error (see the server's log)", ""});
    }
    if (res.status >= 400) {
        try {
            metrics_.error(json::parse(res.body).value("kind", "other"));
        } catch (const std::exception&) {
            metrics_.error("other");
        }
    }
    metrics_.request(endpoint, res.status, std::chrono::duration<double>(Clock::now() - t0).count());
    return res;
}

HttpResponse Service::translate(const HttpRequest& req, Endpoint endpoint) {
    ParseResult parsed = parse_translate_request(endpoint, req.body, req.header("Content-Type"), opt_.limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
        // Without a key in the headers, an unauthenticated client learns nothing from the body.
        if (auto k = key_error(req, "", kKeyPlaces)) return error_response(*k);
        return error_response(*e);
    }
    TranslateRequest& r = std::get<TranslateRequest>(parsed);
    if (auto k = key_error(req, r.api_key, kKeyPlaces)) return error_response(*k);
    auto m = model_->get();
    if (!m) return error_response(kLoading, opt_.retry_after_s);
    const LanguagePair languages = languages_of(*m);
    if (auto e = check_languages(r, languages)) return error_response(*e);
    ResolvedSettings rs;
    try {
        rs = resolve_settings(*m, r.settings, endpoint == Endpoint::v1);
    } catch (const Error& e) {
        return error_response({400, "bad_request", e.what(), ""});
    }
    Job job;
    job.sentences = r.q;
    job.settings  = rs;
    job.tokens    = 0;
    for (const auto& w : runtime::tokenize_sentences(*m, r.q)) job.tokens += int64_t(w.size()) + 1;
    const auto deadline = Clock::now() + opt_.timeout;
    job.deadline = deadline;
    auto fut = batcher_->submit(std::move(job));
    if (!fut)
        return error_response({503, "overloaded", "the server is busy (its queue is full) or shutting down; retry later", ""},
                              opt_.retry_after_s);
    // The answer comes by the deadline whatever the batcher is doing (a long decode of other
    // requests, or waiting for batch-mates): past it the client gets 503 at once, and the job, if
    // still queued, is dropped undecoded when the batcher reaches it.
    if (fut->wait_until(deadline) != std::future_status::ready)
        return error_response({503, "deadline", "the request was not decoded within its deadline (--timeout-ms); retry later", ""},
                              opt_.retry_after_s);
    JobOutcome out = fut->get();
    if (out.error) return error_response(*out.error, opt_.retry_after_s);
    int64_t translated = 0;  // a text of several sentences counts each (serve::SentenceResult::sentences)
    for (const auto& s : out.results) translated += s.sentences;
    metrics_.sentences(translated);
    json j;
    if (endpoint == Endpoint::libretranslate) {
        if (r.q_is_list) {
            j["translatedText"] = json::array();
            for (const auto& s : out.results) j["translatedText"].push_back(s.translation);
        } else {
            j["translatedText"] = out.results.front().translation;
        }
        if (r.source == "auto") {
            // No detection: the model has one source language, so that is the answer.
            const json detected = {{"confidence", 100.0}, {"language", code_or_und(languages.source)}};
            j["detectedLanguage"] = r.q_is_list ? json(std::vector<json>(out.results.size(), detected)) : detected;
        }
        return json_response(200, j);
    }
    j["translations"] = json::array();
    for (size_t i = 0; i < out.results.size(); ++i) {
        const SentenceResult& s = out.results[i];
        json t = {{"source", r.q[i]}, {"translation", s.translation}, {"hypotheses", json::array()}};
        for (const auto& h : s.hypotheses)
            t["hypotheses"].push_back({{"text", h.text}, {"units", h.units}, {"log_prob", h.log_prob},
                                       {"score", h.score}, {"finished", h.finished}});
        if (rs.attention && !s.attention.source.empty()) {
            const CrossAttention& a = s.attention;
            const size_t Tt = a.target.size(), Ts = a.source.size();
            json layers = json::array();
            for (int64_t l = 0; l < a.layers; ++l) {
                json heads = json::array();
                for (int64_t h = 0; h < a.heads; ++h) {
                    json rows = json::array();
                    for (size_t q = 0; q < Tt; ++q) {
                        const float* w = a.weights.data() + ((size_t(l * a.heads + h) * Tt + q) * Ts);
                        std::vector<double> row(Ts);
                        for (size_t k = 0; k < Ts; ++k) row[k] = std::round(double(w[k]) * 1e5) / 1e5;
                        rows.push_back(row);
                    }
                    heads.push_back(std::move(rows));
                }
                layers.push_back(std::move(heads));
            }
            t["attention"] = {{"source", a.source}, {"target", a.target}, {"layers", a.layers},
                              {"heads", a.heads}, {"weights", std::move(layers)}};
        }
        j["translations"].push_back(std::move(t));
    }
    j["settings"] = {{"beam_size", rs.options.beam}, {"max_length", rs.options.max_len},
                     {"length_penalty", rs.options.length_penalty}, {"n_best", rs.n_best},
                     {"no_unk", rs.options.no_unk}};
    j["batch_sentences"] = out.batch_sentences;
    return json_response(200, j);
}

}  // namespace qkv::serve
