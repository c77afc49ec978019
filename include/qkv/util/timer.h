#pragma once
// Wall-clock timer on std::chrono::steady_clock (monotonic: unaffected by clock changes), and the
// process's peak resident memory.
#include <chrono>
#include <cstdint>

namespace qkv::util {

/// Starts on construction; seconds()/millis() read the time since the last start/restart.
class Timer {
public:
    Timer() : start_(clock::now()) {}
    /// Restarts and returns the seconds elapsed before the restart.
    double restart() {
        const auto now = clock::now();
        const double s = std::chrono::duration<double>(now - start_).count();
        start_ = now;
        return s;
    }
    double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }
    double millis() const { return seconds() * 1e3; }

private:
    using clock = std::chrono::steady_clock;
    clock::time_point start_;
};

/// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss: the high-water
/// mark of physical memory, the figure PyTorch anchors report). Returns 0 where unavailable.
int64_t peak_rss_bytes();

}  // namespace qkv::util
