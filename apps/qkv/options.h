#pragma once
// Checks for the qkv CLI's option values, with readable bounds: --help shows "INT:[1, 100000]",
// a bad value gives "--batch-size: 0 is out of range: expected an integer from 1 to 100000"
// (CLI11 puts the flag in front; usage errors exit 2). CLI11's own PositiveNumber/Range print
// the double maximum in 309 digits.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace qkv::cli {

/// An integer in [lo, hi].
CLI::Validator int_range(int64_t lo, int64_t hi);

/// A real number in [lo, hi], or in (lo, hi] when lo_open (e.g. a learning rate > 0).
CLI::Validator real_range(double lo, double hi, bool lo_open = false);

/// A duration: "90" or "90s", "20m", "1.5h" (train::parse_duration), or "none"/"off" for no
/// limit. An explicit zero is refused with a message naming "none"/"off" (0 is the internal
/// "no limit", so "--time-budget 0" would otherwise silently mean the opposite of what it says).
CLI::Validator duration_or_off();

/// The seconds duration_or_off() accepted: 0 for "none"/"off". Throws qkv::Error otherwise.
double parse_duration_or_off(const std::string& s);

}  // namespace qkv::cli
