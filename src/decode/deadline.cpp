// The per-thread decoding deadline (decode/deadline.h).
#include "qkv/decode/deadline.h"

namespace qkv::decode {
namespace {
// time_point::max(): no deadline.
thread_local std::chrono::steady_clock::time_point t_deadline = std::chrono::steady_clock::time_point::max();
}  // namespace

DecodeDeadline::DecodeDeadline(std::chrono::steady_clock::time_point deadline) : previous_(t_deadline) {
    t_deadline = deadline;
}

DecodeDeadline::~DecodeDeadline() { t_deadline = previous_; }

namespace detail {
void check_decode_deadline(const char* where, int64_t step) {
    if (t_deadline == std::chrono::steady_clock::time_point::max()) return;
    if (std::chrono::steady_clock::now() > t_deadline)
        throw DeadlineExceeded(::qkv::detail::str(where, ": the decoding deadline passed before step ", step));
}
}  // namespace detail

}  // namespace qkv::decode
