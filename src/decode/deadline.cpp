// The per-thread decoding deadline (decode/deadline.h).
#include "qkv/decode/deadline.h"

#include <utility>

namespace qkv::decode {
namespace {
// time_point::max(): no deadline.
thread_local std::chrono::steady_clock::time_point t_deadline = std::chrono::steady_clock::time_point::max();
thread_local DeadlineClock t_now;  // empty: steady_clock::now
}  // namespace

DecodeDeadline::DecodeDeadline(std::chrono::steady_clock::time_point deadline, DeadlineClock now)
    : previous_(t_deadline), previous_now_(std::move(t_now)) {
    t_deadline = deadline;
    t_now      = std::move(now);
}

DecodeDeadline::~DecodeDeadline() {
    t_deadline = previous_;
    t_now      = std::move(previous_now_);
}

namespace detail {
void check_decode_deadline(const char* where, int64_t step) {
    if (t_deadline == std::chrono::steady_clock::time_point::max()) return;
    if ((t_now ? t_now() : std::chrono::steady_clock::now()) > t_deadline)
        throw DeadlineExceeded(::qkv::detail::str(where, ": the decoding deadline passed before step ", step));
}
}  // namespace detail

}  // namespace qkv::decode
