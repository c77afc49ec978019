// decode/deadline.h: greedy_decode and beam_search stop with DeadlineExceeded once a
// DecodeDeadline on the thread has passed, decode as before under one still in the future, and
// the guard restores the outer deadline when it ends.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "qkv/core/generator.h"
#include "qkv/decode/beam_search.h"
#include "qkv/decode/deadline.h"
#include "qkv/decode/greedy.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

using Steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct DeadlineFixture {
    TinyCorpus c = tiny_corpus();
    Tensor src, vl;
    decode::GreedyOptions greedy;
    decode::BeamOptions beam;
    std::unique_ptr<models::Transformer> model;  // untrained, eval mode (seed 0)
    DeadlineFixture() {
        src = from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps});
        vl  = from_vector(c.arrays.src_valid_len, {c.arrays.n});
        greedy.bos = beam.bos = c.tgt_vocab.bos();
        greedy.eos = beam.eos = c.tgt_vocab.eos();
        greedy.max_len = beam.max_len = 12;
        beam.beam_size = 3;
        manual_seed(0);
        model = std::make_unique<models::Transformer>(tiny_config(c));
        model->eval();
    }
};

/// The message of the DeadlineExceeded that `f` throws ("" when it throws none).
template <class F>
std::string deadline_message(F&& f) {
    try {
        f();
    } catch (const decode::DeadlineExceeded& e) {
        return e.what();
    }
    return "";
}

TEST(DecodeDeadline, PassedDeadlineStopsGreedyAndBeamSearchNamingThem) {
    DeadlineFixture f;
    models::Transformer& m = *f.model;
    const decode::DecodeDeadline d(Steady::now() - 1ms);
    EXPECT_EQ(deadline_message([&] { decode::greedy_decode(m, f.src, f.vl, f.greedy); }),
              "greedy_decode: the decoding deadline passed before step 0");
    EXPECT_EQ(deadline_message([&] { decode::beam_search(m, f.src, f.vl, f.beam); }),
              "generate: the decoding deadline passed before step 0");
    // It is a qkv::Error, so callers that catch those still see it.
    EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, f.greedy), Error);
}

TEST(DecodeDeadline, FutureDeadlineChangesNothingAndTheGuardRestoresTheOuterOne) {
    DeadlineFixture f;
    models::Transformer& m = *f.model;
    const auto greedy_plain = decode::greedy_decode(m, f.src, f.vl, f.greedy);
    const auto beam_plain   = decode::beam_decode(m, f.src, f.vl, f.beam);
    {
        const decode::DecodeDeadline d(Steady::now() + 1h);
        EXPECT_EQ(decode::greedy_decode(m, f.src, f.vl, f.greedy), greedy_plain);
        EXPECT_EQ(decode::beam_decode(m, f.src, f.vl, f.beam), beam_plain);
        {
            const decode::DecodeDeadline inner(Steady::now() - 1ms);
            EXPECT_THROW(decode::greedy_decode(m, f.src, f.vl, f.greedy), decode::DeadlineExceeded);
        }
        // The inner guard is gone: the outer (future) deadline applies again.
        EXPECT_EQ(decode::greedy_decode(m, f.src, f.vl, f.greedy), greedy_plain);
    }
    // No guard at all: decoding never checks the clock.
    EXPECT_EQ(decode::greedy_decode(m, f.src, f.vl, f.greedy), greedy_plain);
}

TEST(DecodeDeadline, ReadsTheTimeFromTheClockItIsGiven) {
    // qkv serve's batcher passes its clock (tests advance it by hand): steady_clock is not read.
    DeadlineFixture f;
    models::Transformer& m = *f.model;
    const auto expected = decode::greedy_decode(m, f.src, f.vl, f.greedy);
    const Steady::time_point origin{};  // far in the past for steady_clock
    Steady::time_point now = origin;
    const decode::DecodeDeadline d(origin + 1s, [&] { return now; });
    EXPECT_EQ(decode::greedy_decode(m, f.src, f.vl, f.greedy), expected);  // steady_clock is past it
    now = origin + 2s;
    EXPECT_EQ(deadline_message([&] { decode::greedy_decode(m, f.src, f.vl, f.greedy); }),
              "greedy_decode: the decoding deadline passed before step 0");
}

TEST(DecodeDeadline, ADeadlineOnOneThreadDoesNotReachAnother) {
    DeadlineFixture f;
    models::Transformer& m = *f.model;
    const auto expected = decode::greedy_decode(m, f.src, f.vl, f.greedy);
    const decode::DecodeDeadline d(Steady::now() - 1ms);
    std::vector<std::vector<int64_t>> other;
    std::thread t([&] { other = decode::greedy_decode(m, f.src, f.vl, f.greedy); });
    t.join();
    EXPECT_EQ(other, expected);
}

}  // namespace
}  // namespace qkv::test
