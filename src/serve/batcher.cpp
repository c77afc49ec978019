// Dynamic batching for qkv serve (serve/batcher.h).
#include "qkv/serve/batcher.h"

#include <algorithm>
#include <exception>
#include <cstdio>

#include "qkv/core/error.h"
#include "qkv/decode/deadline.h"

namespace qkv::serve {

Batcher::Batcher(BatcherOptions opt, DecodeFn decode, std::shared_ptr<BatcherClock> clock)
    : opt_(opt), decode_(std::move(decode)), clock_(clock ? std::move(clock) : std::make_shared<SteadyClock>()) {
    QKV_CHECK(opt_.max_batch_tokens >= 1, "batcher: max_batch_tokens must be >= 1, got ", opt_.max_batch_tokens);
    QKV_CHECK(opt_.max_queue >= 1, "batcher: max_queue must be >= 1, got ", opt_.max_queue);
    QKV_CHECK(opt_.max_wait.count() >= 0, "batcher: max_wait must be >= 0 ms, got ", opt_.max_wait.count());
    worker_ = std::thread([this] { run(); });
}

Batcher::~Batcher() { stop(); }

std::optional<std::future<JobOutcome>> Batcher::submit(Job job) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t n = int64_t(job.sentences.size());
    if (stopping_ || (!queue_.empty() && queued_sentences_ + n > opt_.max_queue)) return std::nullopt;
    Entry e{std::move(job), clock_->now(), {}};
    auto fut = e.done.get_future();
    queue_.push_back(std::move(e));
    queued_sentences_ += n;
    cv_.notify_all();
    return fut;
}

void Batcher::drain() {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    cv_.notify_all();
}

void Batcher::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
        cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
}

int64_t Batcher::queued_sentences() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_sentences_;
}

bool Batcher::accepting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return !stopping_;
}

void Batcher::run() {
    for (;;) {
        std::vector<Entry> batch;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping, and nothing left
            // Wait for batch-mates until the oldest job has waited max_wait, or enough tokens of
            // its settings are queued to fill a batch.
            for (;;) {
                const ResolvedSettings& key = queue_.front().job.settings;
                int64_t tokens = 0;
                for (const Entry& e : queue_)
                    if (e.job.settings == key) tokens += e.job.tokens;
                const auto until = queue_.front().arrived + opt_.max_wait;
                if (stopping_ || draining_ || tokens >= opt_.max_batch_tokens || clock_->now() >= until) break;
                clock_->wait_until(cv_, lock, until);
            }
            const ResolvedSettings key = queue_.front().job.settings;
            int64_t tokens = 0;
            for (auto it = queue_.begin(); it != queue_.end();) {
                if (!(it->job.settings == key) ||
                    (!batch.empty() && tokens + it->job.tokens > opt_.max_batch_tokens)) {
                    ++it;
                    continue;
                }
                tokens += it->job.tokens;
                queued_sentences_ -= int64_t(it->job.sentences.size());
                batch.push_back(std::move(*it));
                it = queue_.erase(it);
            }
        }
        // Jobs past their deadline are answered without decoding.
        const auto now = clock_->now();
        std::vector<std::string> sentences;
        std::vector<Entry*> live;
        for (Entry& e : batch) {
            if (now > e.job.deadline) {
                JobOutcome o;
                o.error = ApiError{503, "deadline", "the request waited past its deadline before it could be decoded; retry later", ""};
                e.done.set_value(std::move(o));
                continue;
            }
            live.push_back(&e);
            sentences.insert(sentences.end(), e.job.sentences.begin(), e.job.sentences.end());
        }
        if (live.empty()) continue;
        // The decoder stops once every job of the batch is past its deadline (their clients have
        // had their 503 from the service), so one long request cannot hold it after that.
        Clock::time_point last_deadline = Clock::time_point::min();
        for (const Entry* e : live) last_deadline = std::max(last_deadline, e->job.deadline);
        std::vector<SentenceResult> results;
        std::optional<ApiError> error;
        try {
            const decode::DecodeDeadline deadline(last_deadline, [c = clock_.get()] { return c->now(); });
            results = decode_(sentences, live.front()->job.settings);
            QKV_CHECK(results.size() == sentences.size(), "batcher: the decoder returned ", results.size(),
                      " results for ", sentences.size(), " sentences");
        } catch (const decode::DeadlineExceeded&) {
            error = ApiError{503, "deadline", "the request was not decoded within its deadline (--timeout-ms); retry later", ""};
        } catch (const std::exception& ex) {
            // The message may name files: it goes to the log, the client gets a plain 500.
            std::fprintf(stderr, "qkv serve: decoding a batch of %zu sentences failed: %s\n", sentences.size(),
                         ex.what());
            error = ApiError{500, "internal", "translation failed (see the server's log)", ""};
        }
        if (on_batch) on_batch(int64_t(sentences.size()), int64_t(live.size()));
        size_t at = 0;
        for (Entry* e : live) {
            JobOutcome o;
            o.batch_sentences = int64_t(sentences.size());
            const size_t n    = e->job.sentences.size();
            if (error) {
                o.error = error;
            } else {
                o.results.assign(std::make_move_iterator(results.begin() + int64_t(at)),
                                 std::make_move_iterator(results.begin() + int64_t(at + n)));
            }
            at += n;
            e->done.set_value(std::move(o));
        }
    }
}

}  // namespace qkv::serve
