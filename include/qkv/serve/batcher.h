#pragma once
// Dynamic batching for `qkv serve` (as Marian's server and CTranslate2's batch translators do):
// requests that arrive within max_wait of the oldest waiting one, with the same decoding
// settings, are decoded together, up to max_batch_tokens source tokens; the decoder sorts their
// sentences by length (runtime::translate_tokens). A bounded queue (max_queue sentences) turns
// excess load into an immediate refusal (HTTP 503 + Retry-After) instead of a growing backlog;
// a job still waiting at its deadline is answered with an error, never decoded late, and a batch
// whose every job is past its deadline stops decoding at the next step (decode/deadline.h).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "qkv/serve/request.h"
#include "qkv/serve/translator.h"

namespace qkv::serve {

using Clock = std::chrono::steady_clock;

/// The batcher's time: a job's arrival, the oldest job's max_wait, deadlines (in the queue and,
/// through decode::DecodeDeadline, while decoding). SteadyClock in qkv serve; tests pass a clock
/// they advance by hand, so they order events without sleeping or timing.
class BatcherClock {
public:
    virtual ~BatcherClock() = default;
    virtual Clock::time_point now() = 0;
    /// Blocks on `cv`, whose mutex `lock` holds, until it is notified or now() reaches `until`.
    /// May return earlier (the batcher checks its conditions again and waits again).
    virtual void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                            Clock::time_point until) = 0;
};

/// steady_clock, waiting with condition_variable::wait_until.
class SteadyClock final : public BatcherClock {
public:
    Clock::time_point now() override { return Clock::now(); }
    void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Clock::time_point until) override {
        cv.wait_until(lock, until);
    }
};

struct BatcherOptions {
    /// Most source tokens (words + <eos>) per decoder batch; a single request larger than this is
    /// still decoded (alone). 1 decodes one request at a time (batching off).
    int64_t max_batch_tokens = 4096;
    /// How long the oldest waiting request may wait for batch-mates.
    std::chrono::milliseconds max_wait{5};
    /// Most sentences waiting; a request that would exceed it is refused (unless the queue is
    /// empty, so a request of max_sentences is always accepted when idle).
    int64_t max_queue = 256;
};

struct Job {
    std::vector<std::string> sentences;
    ResolvedSettings settings;    // jobs are batched only with equal settings
    int64_t tokens = 1;           // cost against max_batch_tokens
    Clock::time_point deadline = Clock::time_point::max();
};

struct JobOutcome {
    std::vector<SentenceResult> results;   // one per sentence, when error is empty
    std::optional<ApiError> error;         // deadline passed before or during decoding (503), decoder failure (500)
    int64_t batch_sentences = 0;           // sentences in the decoder batch this job went in
};

/// Decodes the sentences of one batch with one settings value (the service passes
/// translate_sentences on the current model). Throws on failure; runs under a
/// decode::DecodeDeadline (the batch's last job deadline), so greedy_decode / beam_search inside
/// it throw decode::DeadlineExceeded once that has passed (answered 503 "deadline").
using DecodeFn = std::function<std::vector<SentenceResult>(const std::vector<std::string>&, const ResolvedSettings&)>;

class Batcher {
public:
    /// Starts the worker thread. Throws qkv::Error on options out of range (max_batch_tokens,
    /// max_queue < 1; max_wait < 0). `clock`: null for SteadyClock.
    Batcher(BatcherOptions opt, DecodeFn decode, std::shared_ptr<BatcherClock> clock = nullptr);
    ~Batcher();  // stop()
    Batcher(const Batcher&) = delete;
    Batcher& operator=(const Batcher&) = delete;

    /// Queues a job; the future is always fulfilled (with results or an error). nullopt: the
    /// queue is full or the batcher is stopping (answer 503).
    std::optional<std::future<JobOutcome>> submit(Job job);
    /// Stops waiting for batch-mates (max_wait): queued jobs are decoded at once. Jobs may
    /// still be submitted (requests already accepted when a server begins to shut down).
    void drain();
    /// Decodes every queued job, then ends the worker. Idempotent.
    void stop();

    int64_t queued_sentences() const;
    /// False once stop() has begun: submit refuses from then on.
    bool accepting() const;
    /// Called by the worker after each decoder batch: sentences and requests in it.
    std::function<void(int64_t sentences, int64_t requests)> on_batch;

private:
    struct Entry {
        Job job;
        Clock::time_point arrived;
        std::promise<JobOutcome> done;
    };
    void run();

    BatcherOptions opt_;
    DecodeFn decode_;
    std::shared_ptr<BatcherClock> clock_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Entry> queue_;
    int64_t queued_sentences_ = 0;
    bool stopping_ = false, draining_ = false;
    std::thread worker_;
};

}  // namespace qkv::serve
