#pragma once
// Shared test helpers: named tolerances (tests/README.md explains each) and comparisons that
// print the first mismatches with index, both values and the max error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::test {

/// Exact comparisons (shape, view, gather, mask ops).
constexpr double kTolExact = 0.0;
/// Element-wise fast kernel vs reference (fp32 rounding of one or two operations).
constexpr double kTolElemAtol = 1e-6;
constexpr double kTolElemRtol = 1e-5;
/// Modules vs PyTorch golden fixtures (fp32 sums of up to a few thousand terms).
constexpr double kTolGoldenAtol = 1e-5;
constexpr double kTolGoldenRtol = 1e-4;
/// The flash-attention rule: err_fast <= kErrFactor * err_ref32 + kErrFloor, both against f64.
constexpr double kErrFactor = 2.0;
constexpr double kErrFloor  = 1e-6;

/// Max |a - b| over n elements.
template <class A, class B>
double max_abs_diff(const A* a, const B* b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    return m;
}

/// Checks |got - want| <= atol + rtol*|want| element-wise; on failure reports up to 5 mismatches.
template <class A, class B>
::testing::AssertionResult all_close(const A* got, const B* want, int64_t n, double atol,
                                     double rtol) {
    int64_t bad = 0;
    double worst = 0;
    std::ostringstream os;
    for (int64_t i = 0; i < n; ++i) {
        const double g = double(got[i]), w = double(want[i]);
        const double err = std::abs(g - w);
        const bool ok = err <= atol + rtol * std::abs(w) && !(std::isnan(g) != std::isnan(w));
        if (!ok) {
            if (bad < 5) os << "  [" << i << "] got " << g << " want " << w << " err " << err << "\n";
            ++bad;
        }
        worst = std::max(worst, err);
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << n << " elements differ (max err "
                                         << worst << ", atol " << atol << ", rtol " << rtol
                                         << "):\n" << os.str();
}

template <class A, class B>
::testing::AssertionResult all_close(const std::vector<A>& got, const std::vector<B>& want,
                                     double atol, double rtol) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure()
               << "size mismatch: " << got.size() << " vs " << want.size();
    return all_close(got.data(), want.data(), int64_t(got.size()), atol, rtol);
}

/// Deterministic pseudo-random values in [lo, hi) (tests need no Generator).
inline std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    std::vector<float> v(static_cast<size_t>(n));
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (auto& x : v) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x = lo + (hi - lo) * float((s >> 40) & 0xFFFFFF) / 16777216.0f;
    }
    return v;
}

/// The message of the qkv::Error `f` throws, or "(no error)" when it throws none (so a search
/// for any part of a message fails and prints what happened).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

/// Expects `f` to throw a qkv::Error whose message contains `text`.
template <class F>
void expect_error_containing(F f, const std::string& text) {
    try {
        f();
        ADD_FAILURE() << "no exception; expected one containing '" << text << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
}

}  // namespace qkv::test
