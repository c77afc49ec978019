// serve/batcher.h with a fake decoder: which jobs share a batch, the queue bound, deadlines,
// draining on stop, and failures reaching every job of a batch. Time is a ManualClock advanced by
// hand, and threads are ordered by handshakes (the decoder says it has entered a batch or taken a
// step; the clock says the batcher is waiting for time to pass): no sleeps, no timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>

#include "qkv/decode/deadline.h"
#include "qkv/serve/batcher.h"

namespace qkv::serve {
namespace {

using namespace std::chrono_literals;

/// Time that moves only when the test advances it. wait_until counts the batcher's waits, so a
/// test can wait until the batcher is waiting for time to pass (await_waits), then advance.
class ManualClock final : public BatcherClock {
public:
    Clock::time_point now() override {
        std::lock_guard<std::mutex> lock(mu_);
        return now_;
    }
    void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Clock::time_point until) override {
        {
            std::lock_guard<std::mutex> l(mu_);
            waiter_cv_ = &cv, waiter_mu_ = lock.mutex();
            ++waits_;
            waits_cv_.notify_all();
            // Under mu_: an advance() before this point is seen here; one after it finds this
            // waiter and takes the batcher's mutex before notifying, so its notification cannot
            // come before cv.wait has released that mutex (no lost wake-up).
            if (now_ >= until) return;
        }
        cv.wait(lock);
    }
    void advance(Clock::duration d) {
        std::condition_variable* cv = nullptr;
        std::mutex* m               = nullptr;
        {
            std::lock_guard<std::mutex> l(mu_);
            now_ += d;
            cv = waiter_cv_, m = waiter_mu_;
        }
        if (!cv) return;
        { std::lock_guard<std::mutex> l(*m); }  // the batcher is now waiting, or will read the new time
        cv->notify_all();
    }
    /// Blocks until the batcher has called wait_until n times in all.
    void await_waits(int n) {
        std::unique_lock<std::mutex> l(mu_);
        waits_cv_.wait(l, [&] { return waits_ >= n; });
    }
    int waits() {
        std::lock_guard<std::mutex> l(mu_);
        return waits_;
    }

private:
    std::mutex mu_;
    std::condition_variable waits_cv_;
    Clock::time_point now_{};  // an arbitrary origin: only differences matter
    int waits_ = 0;
    std::condition_variable* waiter_cv_ = nullptr;
    std::mutex* waiter_mu_              = nullptr;
};

/// Records each batch; answers "T(sentence)". While `gate` is set, the first call blocks until
/// it is released, so the test can queue jobs behind it deterministically.
struct FakeDecoder {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<std::string>> batches;
    std::shared_future<void> gate;
    bool entered = false;
    bool fail = false;
    DecodeFn fn() {
        return [this](const std::vector<std::string>& s, const ResolvedSettings&) {
            {
                std::lock_guard<std::mutex> lock(mu);
                entered = true;
                cv.notify_all();
            }
            if (gate.valid()) gate.wait();
            {
                std::lock_guard<std::mutex> lock(mu);
                batches.push_back(s);
            }
            if (fail) throw std::runtime_error("/secret/path/model.safetensors: broken");
            std::vector<SentenceResult> out(s.size());
            for (size_t i = 0; i < s.size(); ++i) out[i].translation = "T(" + s[i] + ")";
            return out;
        };
    }
};

Job job(std::vector<std::string> s, int64_t tokens = 1, int64_t beam = 1) {
    Job j;
    j.sentences = std::move(s);
    j.tokens = tokens;
    j.settings.options.beam = beam;
    return j;
}

/// Blocks the worker inside a first batch; returns the promise that releases it.
std::promise<void> block_worker(Batcher& b, FakeDecoder& d, std::future<JobOutcome>& first) {
    std::promise<void> release;
    d.gate = release.get_future().share();
    first = *b.submit(job({"first"}));
    std::unique_lock<std::mutex> lock(d.mu);
    d.cv.wait(lock, [&] { return d.entered; });
    return release;
}

TEST(ServeBatcher, JobsWaitingTogetherShareABatchAndGetTheirOwnResults) {
    FakeDecoder d;
    Batcher b({/*max_batch_tokens=*/100, /*max_wait=*/0ms, /*max_queue=*/100}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    auto f1 = *b.submit(job({"a", "b"}, 2));
    auto f2 = *b.submit(job({"c"}, 1));
    auto f3 = *b.submit(job({"d", "e", "f"}, 3));
    release.set_value();
    EXPECT_EQ(first.get().results[0].translation, "T(first)");
    const JobOutcome o1 = f1.get(), o2 = f2.get(), o3 = f3.get();
    ASSERT_FALSE(o1.error || o2.error || o3.error);
    EXPECT_EQ(o1.results[0].translation, "T(a)");
    EXPECT_EQ(o1.results[1].translation, "T(b)");
    EXPECT_EQ(o2.results[0].translation, "T(c)");
    EXPECT_EQ(o3.results[2].translation, "T(f)");
    EXPECT_EQ(o2.batch_sentences, 6);
    ASSERT_EQ(d.batches.size(), 2u);
    EXPECT_EQ(d.batches[1], (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
}

TEST(ServeBatcher, TokenBudgetAndSettingsSplitBatches) {
    FakeDecoder d;
    Batcher b({/*max_batch_tokens=*/5, 0ms, 100}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    auto f1 = *b.submit(job({"a"}, 3));
    auto f2 = *b.submit(job({"b"}, 3, /*beam=*/4));  // other settings: never with a or c
    auto f3 = *b.submit(job({"c"}, 2));
    auto f4 = *b.submit(job({"d"}, 3));  // 3 + 2 + 3 > 5: next batch
    auto f5 = *b.submit(job({"e"}, 9));  // over the budget alone: decoded alone
    release.set_value();
    for (auto* f : {&f1, &f2, &f3, &f4, &f5}) EXPECT_FALSE(f->get().error);
    const std::vector<std::vector<std::string>> want = {{"first"}, {"a", "c"}, {"b"}, {"d"}, {"e"}};
    EXPECT_EQ(d.batches, want);
}

TEST(ServeBatcher, OneRequestAtATimeWithBudgetOne) {
    FakeDecoder d;
    Batcher b({/*max_batch_tokens=*/1, 0ms, 100}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    auto f1 = *b.submit(job({"a", "b"}, 4));
    auto f2 = *b.submit(job({"c"}, 2));
    release.set_value();
    f1.get(), f2.get();
    const std::vector<std::vector<std::string>> want = {{"first"}, {"a", "b"}, {"c"}};
    EXPECT_EQ(d.batches, want);
}

TEST(ServeBatcher, WaitsForBatchMatesUpToMaxWait) {
    FakeDecoder d;
    auto clock = std::make_shared<ManualClock>();
    Batcher b({100, /*max_wait=*/300ms, 100}, d.fn(), clock);
    auto f1 = *b.submit(job({"a"}));
    clock->await_waits(1);  // the batcher holds "a" back, waiting for batch-mates
    clock->advance(20ms);
    auto f2 = *b.submit(job({"b"}));
    clock->advance(279ms);  // 299 ms after "a" arrived: still waiting
    const int waits = clock->waits();
    clock->advance(0ms);
    clock->await_waits(waits + 1);  // it woke, looked at the time, and waits again
    EXPECT_EQ(f1.wait_for(0s), std::future_status::timeout);
    {
        std::lock_guard<std::mutex> lock(d.mu);
        EXPECT_TRUE(d.batches.empty());
    }
    clock->advance(1ms);  // 300 ms: max_wait is over
    f1.get(), f2.get();
    ASSERT_EQ(d.batches.size(), 1u);
    EXPECT_EQ(d.batches[0], (std::vector<std::string>{"a", "b"}));
}

TEST(ServeBatcher, DrainDecodesWithoutWaitingAndStillAccepts) {
    FakeDecoder d;
    auto clock = std::make_shared<ManualClock>();
    Batcher b({100, /*max_wait=*/60s, 100}, d.fn(), clock);
    auto f1 = *b.submit(job({"a"}));
    clock->await_waits(1);  // waiting for batch-mates; the clock never moves in this test
    b.drain();
    EXPECT_EQ(f1.get().results.at(0).translation, "T(a)");
    auto f2 = b.submit(job({"b"}));
    ASSERT_TRUE(f2);
    EXPECT_EQ(f2->get().results.at(0).translation, "T(b)");
}

TEST(ServeBatcher, FullQueueRefusesAndNothingIsLost) {
    FakeDecoder d;
    Batcher b({100, 0ms, /*max_queue=*/3}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    auto f1 = b.submit(job({"a", "b"}));
    ASSERT_TRUE(f1);
    EXPECT_FALSE(b.submit(job({"c", "d"})));  // 2 + 2 > 3
    auto f2 = b.submit(job({"c"}));
    ASSERT_TRUE(f2);
    EXPECT_EQ(b.queued_sentences(), 3);
    EXPECT_FALSE(b.submit(job({"x"})));
    release.set_value();
    EXPECT_EQ(f1->get().results.size(), 2u);
    EXPECT_EQ(f2->get().results[0].translation, "T(c)");
    EXPECT_EQ(b.queued_sentences(), 0);
    // An empty queue takes a request larger than max_queue (max_sentences may exceed it).
    auto big = b.submit(job({"1", "2", "3", "4", "5"}));
    ASSERT_TRUE(big);
    EXPECT_EQ(big->get().results.size(), 5u);
}

TEST(ServeBatcher, DeadlinePassedInTheQueueIsAnsweredWithoutDecoding) {
    FakeDecoder d;
    auto clock = std::make_shared<ManualClock>();
    Batcher b({100, 0ms, 100}, d.fn(), clock);
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    Job late = job({"late"});
    late.deadline = clock->now() + 5ms;
    auto f = *b.submit(std::move(late));
    auto g = *b.submit(job({"on time"}));
    clock->advance(20ms);  // while both wait behind the first batch
    release.set_value();
    const JobOutcome o = f.get();
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->status, 503);
    EXPECT_EQ(o.error->kind, "deadline");
    EXPECT_FALSE(g.get().error);
    for (const auto& batch : d.batches)
        for (const auto& s : batch) EXPECT_NE(s, "late");
}

/// A decoder that works on "long" sentences step by step, checking the decoding deadline before
/// each step as greedy_decode and beam_search do, for at most max_steps; each step waits until
/// the test allows it (allow), so the test knows how far it got (await_steps). Other batches
/// return at once.
struct SteppingDecoder {
    std::mutex mu;
    std::condition_variable cv;
    int steps = 0, allowed = 1;
    int max_steps;
    explicit SteppingDecoder(int max) : max_steps(max) {}
    DecodeFn fn() {
        return [this](const std::vector<std::string>& s, const ResolvedSettings&) {
            if (std::find(s.begin(), s.end(), "long") != s.end())
                for (int64_t t = 0; t < max_steps; ++t) {
                    std::unique_lock<std::mutex> lock(mu);
                    cv.wait(lock, [&] { return steps < allowed; });
                    lock.unlock();
                    decode::detail::check_decode_deadline("fake", t);
                    lock.lock();
                    ++steps;
                    cv.notify_all();
                }
            std::vector<SentenceResult> out(s.size());
            for (size_t i = 0; i < s.size(); ++i) out[i].translation = "T(" + s[i] + ")";
            return out;
        };
    }
    void await_steps(int n) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return steps >= n; });
    }
    void allow(int n) {
        std::lock_guard<std::mutex> lock(mu);
        allowed = n;
        cv.notify_all();
    }
    int taken() {
        std::lock_guard<std::mutex> lock(mu);
        return steps;
    }
};

TEST(ServeBatcher, DecodingStopsAtTheDeadlineAndTheNextJobIsServed) {
    SteppingDecoder d(/*max_steps=*/1000);
    auto clock = std::make_shared<ManualClock>();
    Batcher b({/*max_batch_tokens=*/1, 0ms, 100}, d.fn(), clock);
    Job heavy = job({"long"});
    heavy.deadline = clock->now() + 50ms;
    auto f = *b.submit(std::move(heavy));
    auto g = *b.submit(job({"next"}));
    d.await_steps(1);       // decoding, within the deadline
    clock->advance(60ms);   // the deadline passes during step 1
    d.allow(1000);
    const JobOutcome o = f.get();
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->status, 503);
    EXPECT_EQ(o.error->kind, "deadline");
    EXPECT_EQ(d.taken(), 1);  // it was decoding, not refused in the queue, and stopped at the next step
    const JobOutcome n = g.get();
    ASSERT_FALSE(n.error);
    EXPECT_EQ(n.results[0].translation, "T(next)");
}

TEST(ServeBatcher, ABatchIsNotCutWhileOneOfItsJobsIsWithinItsDeadline) {
    SteppingDecoder d(/*max_steps=*/3);
    auto clock = std::make_shared<ManualClock>();
    // Both jobs are queued within max_wait (the clock has not moved), so they share a batch; the
    // first job's deadline passes while it decodes.
    Batcher b({/*max_batch_tokens=*/100, /*max_wait=*/50ms, 100}, d.fn(), clock);
    Job hurried = job({"long"});
    hurried.deadline = clock->now() + 150ms;
    auto f = *b.submit(std::move(hurried));
    auto g = *b.submit(job({"patient"}));      // no deadline: the batch runs to its end
    clock->advance(50ms);
    d.await_steps(1);
    clock->advance(200ms);  // past the first job's deadline
    d.allow(3);
    const JobOutcome o1 = f.get(), o2 = g.get();
    ASSERT_FALSE(o1.error);
    ASSERT_FALSE(o2.error);
    EXPECT_EQ(d.taken(), 3);
    EXPECT_EQ(o1.results[0].translation, "T(long)");
    EXPECT_EQ(o2.results[0].translation, "T(patient)");
    EXPECT_EQ(o1.batch_sentences, 2);
}

TEST(ServeBatcher, StopDrainsTheQueueThenRefuses) {
    FakeDecoder d;
    auto b = std::make_unique<Batcher>(BatcherOptions{100, 0ms, 100}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(*b, d, first);
    std::vector<std::future<JobOutcome>> fs;
    for (int i = 0; i < 10; ++i) fs.push_back(*b->submit(job({"s" + std::to_string(i)})));
    std::thread stopper([&] { b->stop(); });
    // stop() has begun (while the worker is held inside the first batch) before it is released.
    while (b->accepting()) std::this_thread::yield();
    release.set_value();
    stopper.join();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(fs[size_t(i)].get().results.at(0).translation, "T(s" + std::to_string(i) + ")");
    EXPECT_FALSE(b->submit(job({"after"})));
}

TEST(ServeBatcher, DecoderFailureReachesEveryJobWithoutDetails) {
    FakeDecoder d;
    d.fail = true;
    auto clock = std::make_shared<ManualClock>();
    Batcher b({100, 50ms, 100}, d.fn(), clock);
    auto f1 = *b.submit(job({"a"}));
    auto f2 = *b.submit(job({"b"}));
    clock->advance(50ms);  // one batch of both
    for (auto* f : {&f1, &f2}) {
        const JobOutcome o = f->get();
        ASSERT_TRUE(o.error);
        EXPECT_EQ(o.error->status, 500);
        EXPECT_EQ(o.error->message.find("/secret"), std::string::npos);
        EXPECT_EQ(o.batch_sentences, 2);
    }
}

TEST(ServeBatcher, BadOptions) {
    FakeDecoder d;
    EXPECT_THROW(Batcher({0, 0ms, 1}, d.fn()), Error);
    EXPECT_THROW(Batcher({1, 0ms, 0}, d.fn()), Error);
    EXPECT_THROW(Batcher({1, -1ms, 1}, d.fn()), Error);
}

}  // namespace
}  // namespace qkv::serve
