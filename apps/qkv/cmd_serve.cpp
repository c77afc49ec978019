// `qkv serve`: the translation service (serve/service.h) over HTTP/1.1 with cpp-httplib
// (Debian's libcpp-httplib-dev). This file only adapts httplib to qkv::serve::Service and
// handles the signals: SIGTERM / SIGINT stop accepting connections, finish the requests in
// flight and exit 0; SIGHUP reloads the model folder (a damaged folder is refused, the old model
// keeps serving).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <httplib.h>

#include <cstdlib>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/serve/service.h"
#include "qkv/util/atomic_file.h"

namespace qkv::cli {
namespace {

struct ServeArgs {
    std::string model = "runs/qkv", host = "127.0.0.1", api_key, port_file, compute_type = "fp32";
    int64_t port = 8080, max_batch_tokens = 4096, max_wait_ms = 5, max_queue = 256, timeout_ms = 30000;
    int64_t max_body_bytes = 1 << 20, max_sentences = 64, max_chars = 1000, http_threads = 0;
};

serve::HttpRequest to_request(const httplib::Request& r) {
    serve::HttpRequest q;
    q.method = r.method;
    q.path   = r.path;
    q.body   = r.body;
    for (const auto& [k, v] : r.headers) q.headers.emplace_back(k, v);
    return q;
}

void apply(const serve::HttpResponse& s, httplib::Response& r) {
    r.status = s.status;
    for (const auto& [k, v] : s.headers) r.set_header(k.c_str(), v);
    r.set_content(s.body, s.content_type.c_str());
}

// Signals arrive at whichever thread does not block them (OpenMP's workers may exist already), so
// the handler only writes the signal's number into a pipe; one thread reads it and acts.
int g_signal_pipe[2] = {-1, -1};
extern "C" void on_signal(int sig) {
    const int saved = errno;
    const char c = char(sig);
    [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1);
    errno = saved;
}

serve::ServiceOptions service_options(const ServeArgs& a) {
    serve::ServiceOptions so;
    so.limits.max_body_bytes   = size_t(a.max_body_bytes);
    so.limits.max_sentences    = a.max_sentences;
    so.limits.max_chars        = a.max_chars;
    so.batcher.max_batch_tokens = a.max_batch_tokens;
    so.batcher.max_wait         = std::chrono::milliseconds(a.max_wait_ms);
    so.batcher.max_queue        = a.max_queue;
    so.timeout                  = std::chrono::milliseconds(a.timeout_ms);
    so.api_key                  = a.api_key;
    if (a.max_queue < a.max_sentences)
        usage_error("serve: --max-queue (" + std::to_string(a.max_queue) + ") must be at least --max-sentences (" +
                    std::to_string(a.max_sentences) + ")");
    return so;
}

/// Checks --port-file before the model loads and before listening: a port file that cannot be
/// written would end the server once it listens, and one of the model's files would be
/// overwritten. Returns the FIFO's descriptor when --port-file is one, else -1.
int check_port_file(const ServeArgs& a) {
    check_not_model_file("--port-file", a.port_file, a.model);
    check_output_file("--port-file", a.port_file);
    // A FIFO waits in open() for its reader, and SIGTERM (SA_RESTART) would not end that wait:
    // opened now without waiting, refused when no process reads it, and kept open for the port.
    int port_fifo = -1;
    if (struct stat st {}; !a.port_file.empty() && ::stat(a.port_file.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
        port_fifo = ::open(a.port_file.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (port_fifo < 0)
            usage_error("--port-file '" + a.port_file + "' is a FIFO " +
                        (errno == ENXIO ? std::string("that no process reads: start its reader first")
                                        : std::string("that cannot be opened: ") + std::strerror(errno)));
        ::fcntl(port_fifo, F_SETFL, ::fcntl(port_fifo, F_GETFL) & ~O_NONBLOCK);
    }
    return port_fifo;
}

void install_signal_handlers() {
    QKV_CHECK(pipe(g_signal_pipe) == 0, "serve: cannot create a pipe for signals");
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaction(s, &sa, nullptr);
}

/// Threads, limits and socket options of the server. `listen_fd` receives the listening socket.
void configure_server(httplib::Server& svr, const ServeArgs& a, int& listen_fd, std::atomic<bool>& closing) {
    // Every connection waiting for a thread sits in httplib's own queue, which has no bound: with
    // at least --max-queue threads the waiting requests reach the batcher, whose bounded queue
    // answers the excess with 503 instead of a growing backlog.
    const int nthreads = int(a.http_threads > 0 ? a.http_threads : std::min<int64_t>(a.max_queue + 64, 2048));
    svr.new_task_queue = [nthreads] { return new httplib::ThreadPool(size_t(nthreads)); };
    svr.set_payload_max_length(size_t(a.max_body_bytes));
    svr.set_keep_alive_timeout(2);
    // Headers and body leave in separate writes: without TCP_NODELAY, Nagle's algorithm holds the
    // body until the client's delayed ACK (40 ms per request on Linux).
    svr.set_tcp_nodelay(true);
    // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
    // library): bursts of connections beyond it wait for SYN retries. The listening socket is the
    // first one given to these options; listen() again raises its backlog.
    svr.set_socket_options([&listen_fd](int sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        if (listen_fd < 0) listen_fd = sock;
    });
    // After SIGTERM every answer closes its connection: a keep-alive client would otherwise hold
    // its worker thread for the keep-alive timeout while connections queued behind it wait.
    svr.set_post_routing_handler([&closing](const httplib::Request&, httplib::Response& res) {
        if (closing) res.set_header("Connection", "close");
    });
}

/// Routes every method and path to the service.
void route(httplib::Server& svr, const ServeArgs& a, serve::Service& service) {
    auto handler = [&service](const httplib::Request& req, httplib::Response& res) {
        apply(service.handle(to_request(req)), res);
    };
    // A body qkv refuses before the service sees it: the connection closes, as the rest of the
    // body is never read.
    auto refuse = [&service](httplib::Response& res, const serve::ApiError& e) {
        apply(service.refuse(e), res);
        res.set_header("Connection", "close");
    };
    // Bodies are read here, not by httplib: its --max-body-bytes check (set_payload_max_length)
    // covers Content-Length bodies only, and a chunked body would be buffered whole, however
    // large, before any check. Reading stops at the first byte over the limit.
    auto body_handler = [&a, &service, refuse](const httplib::Request& req, httplib::Response& res,
                                               const httplib::ContentReader& read) {
        std::string body;
        bool over = false;
        const bool complete = read([&](const char* data, size_t n) {
            if (body.size() + n > size_t(a.max_body_bytes)) return !(over = true);
            body.append(data, n);
            return true;
        });
        // httplib refuses a Content-Length over the limit before reading (complete is false).
        if (over || (!complete && std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) >
                                      uint64_t(a.max_body_bytes)))
            return refuse(res, serve::body_too_large_error(size_t(a.max_body_bytes)));
        if (!complete)  // a malformed chunk, or the client went away
            return refuse(res, {400, "http", "the body could not be read (malformed chunked encoding?)", ""});
        serve::HttpRequest q = to_request(req);
        q.body = std::move(body);
        apply(service.handle(q), res);
    };
    svr.Get(".*", handler);
    svr.Post(".*", body_handler);
    svr.Put(".*", body_handler);
    svr.Patch(".*", body_handler);
    svr.Delete(".*", body_handler);
    svr.Options(".*", handler);
    // Errors httplib answers itself (body over the limit, malformed HTTP, unknown method) get the
    // same JSON shape; responses that already have a body (ours) pass through.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([&a, &service](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        apply(service.refuse(serve::transport_error(res.status, size_t(a.max_body_bytes))), res);
        return httplib::Server::HandlerResponse::Handled;
    }));
}

/// Writes the port listened on to --port-file (the FIFO opened before, when it is one).
void write_port_file(const ServeArgs& a, int port, int port_fifo) {
    const std::string line = std::to_string(port) + "\n";
    if (port_fifo >= 0) {
        const bool ok = ::write(port_fifo, line.data(), line.size()) == ssize_t(line.size());
        const int err = errno;
        ::close(port_fifo);
        QKV_CHECK(ok, "cannot write '", a.port_file, "': ", std::strerror(err));
    } else {
        util::write_file_atomic(a.port_file, line);
    }
}

/// The signal thread's loop: SIGHUP reloads; SIGTERM / SIGINT (or 0, written by run() at the end)
/// drain the service and stop accepting connections.
void handle_signals(const ServeArgs& a, serve::Service& service, httplib::Server& svr, int listen_fd,
                    std::atomic<bool>& stopping, std::atomic<bool>& closing) {
    // Shutdown stops accept() without httplib's stop(): stop() marks the server socket invalid,
    // and httplib then closes every accepted connection still waiting for a worker thread (more
    // clients than --http-threads) without reading its request. A listening socket shut down makes
    // accept() fail (EINVAL); httplib's loop ends and its thread pool finishes every queued
    // connection, each answered. Connections not yet accepted are refused by the kernel.
    auto stop_accepting = [&svr, listen_fd] {
        if (listen_fd < 0 || ::shutdown(listen_fd, SHUT_RDWR) != 0) svr.stop();
    };
    for (;;) {
        char c = 0;
        const ssize_t n = read(g_signal_pipe[0], &c, 1);
        if (n < 0 && errno == EINTR) continue;
        const int sig = n == 1 ? int(c) : 0;  // 0: woken by run() at the end
        if (sig == SIGHUP) {
            std::fprintf(stderr, "qkv serve: SIGHUP: reloading '%s'\n", a.model.c_str());
            service.reload();
            continue;
        }
        if (sig != 0)
            std::fprintf(stderr, "qkv serve: %s: finishing the requests in flight, then exiting\n",
                         sig == SIGTERM ? "SIGTERM" : "SIGINT");
        stopping = true;
        closing  = true;
        service.drain();
        if (sig != 0)
            stop_accepting();
        else
            svr.stop();  // the listener has ended already (its socket may be closed): a no-op
        return;
    }
}

void run(const ServeArgs& a) {
    const serve::ServiceOptions so = service_options(a);
    const int port_fifo = check_port_file(a);
    install_signal_handlers();

    auto holder = std::make_shared<serve::ModelHolder>(a.model, runtime::parse_compute_type(a.compute_type));
    serve::Service service(so, holder);

    httplib::Server svr;
    int listen_fd = -1;
    std::atomic<bool> closing{false};
    configure_server(svr, a, listen_fd, closing);
    route(svr, a, service);

    const int port = a.port == 0 ? svr.bind_to_any_port(a.host.c_str()) : (svr.bind_to_port(a.host.c_str(), int(a.port)) ? int(a.port) : -1);
    QKV_CHECK(port > 0, "serve: cannot listen on ", a.host, ":", a.port, " (address in use, or not an address of this machine)");
    if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
    std::thread listener([&svr] { svr.listen_after_bind(); });
    while (!svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::fprintf(stderr, "qkv serve: listening on http://%s:%d (model '%s' loading)\n", a.host.c_str(), port,
                 a.model.c_str());
    if (!a.port_file.empty()) {
        try {
            write_port_file(a, port, port_fifo);
        } catch (...) {  // e.g. its folder removed since the check: stop listening, then report
            svr.stop();
            listener.join();
            throw;
        }
    }

    std::atomic<bool> stopping{false};
    auto wake = [](char c) { [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1); };
    std::thread signals([&] { handle_signals(a, service, svr, listen_fd, stopping, closing); });
    if (!service.reload()) {
        svr.stop();
        listener.join();
        wake(0);
        signals.join();
        throw Error("serve: could not load the model folder '" + a.model + "' (see above)");
    }
    std::fprintf(stderr, "qkv serve: ready (%s compute)\n", a.compute_type.c_str());
    listener.join();  // returns once accepting has stopped and every accepted connection is answered
    service.stop();
    if (!stopping) wake(0);
    signals.join();
    std::fprintf(stderr, "qkv serve: stopped\n");
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* c = app.add_subcommand("serve", "serve translations over HTTP (LibreTranslate API, /v1/translate, a web page)");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)")->check(non_empty_path());
    c->add_option("--compute-type", a->compute_type, "fp32 (default), bf16 (bf16 products and attention) or int8 "
                                                     "(Linear weights quantized per channel), as qkv translate")
        ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
    c->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)");
    c->add_option("--port", a->port, "TCP port (default 8080; 0 = any free port, see --port-file)")->transform(int_range(0, 65535));
    c->add_option("--port-file", a->port_file, "write the port listened on to this file once listening (default: none)")
        ->check(non_empty_path());
    c->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "most source tokens decoded in one batch (default 4096; 1 = one request at a time)")
        ->transform(int_range(1, 1000000));
    c->add_option("--max-wait-ms", a->max_wait_ms, "how long a request may wait for batch-mates (default 5)")
        ->transform(int_range(0, 3600000));  // as --timeout-ms (a request's deadline bounds its wait anyway)
    c->add_option("--max-queue", a->max_queue, "most sentences waiting; beyond it 503 + Retry-After (default 256)")
        ->transform(int_range(1, 1000000));
    c->add_option("--timeout-ms", a->timeout_ms, "per-request deadline for waiting in the queue (default 30000)")
        ->transform(int_range(1, 3600000));
    c->add_option("--api-key", a->api_key, "require this key (X-API-Key, Authorization: Bearer, or api_key; default: none, no key)");
    c->add_option("--max-body-bytes", a->max_body_bytes, "largest request body (default 1048576; 413 beyond)")
        ->transform(int_range(64, 1 << 30));
    c->add_option("--max-sentences", a->max_sentences, "most sentences per request (default 64)")
        ->transform(int_range(1, 100000));
    c->add_option("--max-chars", a->max_chars, "most characters per sentence (default 1000)")->transform(int_range(1, 1000000));
    c->add_option("--http-threads", a->http_threads, "connections handled at once (default: --max-queue + 64)")->transform(int_range(1, 4096));
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
