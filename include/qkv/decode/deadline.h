#pragma once
// A deadline for decoding on the calling thread: greedy_decode and beam_search check it once per
// step and stop with DeadlineExceeded when it has passed, so a server can take its decoder back
// from a request whose client has already been told it timed out (qkv serve's --timeout-ms).
#include <chrono>
#include <functional>

#include "qkv/core/error.h"

namespace qkv::decode {

/// Thrown by greedy_decode and beam_search at the first step that begins after the deadline of a
/// DecodeDeadline alive on the calling thread. The message names the function and the step.
class DeadlineExceeded : public Error {
public:
    using Error::Error;
};

/// Where a DecodeDeadline reads the time: steady_clock::now when empty; qkv serve's batcher
/// passes its own clock (serve/batcher.h), which tests advance by hand.
using DeadlineClock = std::function<std::chrono::steady_clock::time_point()>;

/// While alive, decoding on the constructing thread stops (DeadlineExceeded) at the first step
/// that begins after `deadline` (as `now` tells the time). Scoped and nestable: the innermost one
/// applies, and its destructor restores the one before. Not shared with other threads (OpenMP
/// workers inside a step are not interrupted: a step always finishes). A step costs
/// milliseconds, so the decoder is free within about one step of the deadline.
class DecodeDeadline {
public:
    explicit DecodeDeadline(std::chrono::steady_clock::time_point deadline, DeadlineClock now = {});
    ~DecodeDeadline();
    DecodeDeadline(const DecodeDeadline&)            = delete;
    DecodeDeadline& operator=(const DecodeDeadline&) = delete;

private:
    std::chrono::steady_clock::time_point previous_;
    DeadlineClock previous_now_;
};

namespace detail {
/// Throws DeadlineExceeded ("<where>: the decoding deadline passed before step <step>") when a
/// DecodeDeadline on this thread has passed; otherwise nothing (no clock read without one).
void check_decode_deadline(const char* where, int64_t step);
}  // namespace detail

}  // namespace qkv::decode
