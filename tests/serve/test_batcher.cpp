// serve/batcher.h with a fake decoder: which jobs share a batch, the queue bound, deadlines,
// draining on stop, and failures reaching every job of a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <stdexcept>

#include "qkv/decode/deadline.h"
#include "qkv/serve/batcher.h"

namespace qkv::serve {
namespace {

using namespace std::chrono_literals;

/// Records each batch; answers "T(sentence)". While `gate` is set, the first call blocks until
/// it is released, so the test can queue jobs behind it deterministically.
struct FakeDecoder {
    std::mutex mu;
    std::vector<std::vector<std::string>> batches;
    std::shared_future<void> gate;
    std::atomic<bool> entered{false};
    bool fail = false;
    DecodeFn fn() {
        return [this](const std::vector<std::string>& s, const ResolvedSettings&) {
            entered = true;
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
    while (!d.entered) std::this_thread::sleep_for(1ms);
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
    Batcher b({100, /*max_wait=*/300ms, 100}, d.fn());
    const auto t0 = Clock::now();
    auto f1 = *b.submit(job({"a"}));
    std::this_thread::sleep_for(20ms);
    auto f2 = *b.submit(job({"b"}));
    f1.get(), f2.get();
    EXPECT_GE(Clock::now() - t0, 300ms);
    ASSERT_EQ(d.batches.size(), 1u);
    EXPECT_EQ(d.batches[0], (std::vector<std::string>{"a", "b"}));
}

TEST(ServeBatcher, DrainDecodesWithoutWaitingAndStillAccepts) {
    FakeDecoder d;
    Batcher b({100, /*max_wait=*/std::chrono::milliseconds(60000), 100}, d.fn());
    auto f1 = *b.submit(job({"a"}));
    std::this_thread::sleep_for(20ms);
    const auto t0 = Clock::now();
    b.drain();
    EXPECT_EQ(f1.get().results.at(0).translation, "T(a)");
    auto f2 = b.submit(job({"b"}));
    ASSERT_TRUE(f2);
    EXPECT_EQ(f2->get().results.at(0).translation, "T(b)");
    EXPECT_LT(Clock::now() - t0, 30s);
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
    Batcher b({100, 0ms, 100}, d.fn());
    std::future<JobOutcome> first;
    auto release = block_worker(b, d, first);
    Job late = job({"late"});
    late.deadline = Clock::now() + 5ms;
    auto f = *b.submit(std::move(late));
    auto g = *b.submit(job({"on time"}));
    std::this_thread::sleep_for(20ms);
    release.set_value();
    const JobOutcome o = f.get();
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->status, 503);
    EXPECT_EQ(o.error->kind, "deadline");
    EXPECT_FALSE(g.get().error);
    for (const auto& batch : d.batches)
        for (const auto& s : batch) EXPECT_NE(s, "late");
}

/// A decoder that works on "long" sentences step by step until the decoding deadline stops it
/// (as greedy_decode and beam_search check it), for at most `cap`; other batches return at once.
DecodeFn stepping_decoder(std::atomic<int>& steps, std::chrono::milliseconds cap) {
    return [&steps, cap](const std::vector<std::string>& s, const ResolvedSettings&) {
        const auto give_up = Clock::now() + cap;
        if (std::find(s.begin(), s.end(), "long") != s.end())
            for (int64_t t = 0; Clock::now() < give_up; ++t) {
                decode::detail::check_decode_deadline("fake", t);
                ++steps;
                std::this_thread::sleep_for(1ms);
            }
        std::vector<SentenceResult> out(s.size());
        for (size_t i = 0; i < s.size(); ++i) out[i].translation = "T(" + s[i] + ")";
        return out;
    };
}

TEST(ServeBatcher, DecodingStopsAtTheDeadlineAndTheNextJobIsServed) {
    std::atomic<int> steps{0};
    Batcher b({/*max_batch_tokens=*/1, 0ms, 100}, stepping_decoder(steps, 20s));
    Job heavy = job({"long"});
    heavy.deadline = Clock::now() + 50ms;
    const auto t0 = Clock::now();
    auto f = *b.submit(std::move(heavy));
    auto g = *b.submit(job({"next"}));
    const JobOutcome o = f.get();
    ASSERT_TRUE(o.error);
    EXPECT_EQ(o.error->status, 503);
    EXPECT_EQ(o.error->kind, "deadline");
    EXPECT_GT(steps.load(), 0);  // it was decoding, not refused in the queue
    const JobOutcome n = g.get();
    ASSERT_FALSE(n.error);
    EXPECT_EQ(n.results[0].translation, "T(next)");
    // Freed long before the decoder's own 20 s: the next job did not wait for it.
    EXPECT_LT(Clock::now() - t0, 10s);
}

TEST(ServeBatcher, ABatchIsNotCutWhileOneOfItsJobsIsWithinItsDeadline) {
    std::atomic<int> steps{0};
    // Both jobs are queued within max_wait, so they share a batch, which decodes from ~50 ms to
    // ~350 ms: the first job's deadline passes while it runs.
    Batcher b({/*max_batch_tokens=*/100, /*max_wait=*/50ms, 100}, stepping_decoder(steps, 300ms));
    Job hurried = job({"long"});
    hurried.deadline = Clock::now() + 150ms;
    auto f = *b.submit(std::move(hurried));
    auto g = *b.submit(job({"patient"}));      // no deadline: the batch runs to its end
    const JobOutcome o1 = f.get(), o2 = g.get();
    ASSERT_FALSE(o1.error);
    ASSERT_FALSE(o2.error);
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
    std::this_thread::sleep_for(10ms);
    release.set_value();
    stopper.join();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(fs[size_t(i)].get().results.at(0).translation, "T(s" + std::to_string(i) + ")");
    EXPECT_FALSE(b->submit(job({"after"})));
}

TEST(ServeBatcher, DecoderFailureReachesEveryJobWithoutDetails) {
    FakeDecoder d;
    d.fail = true;
    Batcher b({100, 50ms, 100}, d.fn());
    auto f1 = *b.submit(job({"a"}));
    auto f2 = *b.submit(job({"b"}));
    for (auto* f : {&f1, &f2}) {
        const JobOutcome o = f->get();
        ASSERT_TRUE(o.error);
        EXPECT_EQ(o.error->status, 500);
        EXPECT_EQ(o.error->message.find("/secret"), std::string::npos);
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
