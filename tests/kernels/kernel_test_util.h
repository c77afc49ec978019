#pragma once
// Helpers shared by the pointer-level kernel tests: run a test body once per SIMD path the CPU
// has, the 2x rule against a float64 reference, and float64 central-difference gradients.
#include <functional>
#include <vector>

#include "kernels/cpu/simd.h"
#include "support/test_util.h"

namespace qkv::test {

/// Gradient checks in float64 (PyTorch gradcheck defaults, CONVENTIONS.md §11).
constexpr double kGradEps  = 1e-6;
constexpr double kGradAtol = 1e-5;
constexpr double kGradRtol = 1e-3;

/// Caps the fast kernels at one ISA for the guard's lifetime.
class IsaGuard {
public:
    explicit IsaGuard(kernels::cpu::Isa isa) : old_(kernels::cpu::set_max_isa(isa)) {}
    ~IsaGuard() { kernels::cpu::set_max_isa(old_); }
    IsaGuard(const IsaGuard&)            = delete;
    IsaGuard& operator=(const IsaGuard&) = delete;

private:
    kernels::cpu::Isa old_;
};

/// Every path the fast kernels can take on this CPU (scalar fallback, AVX2, AVX-512).
inline std::vector<kernels::cpu::Isa> available_isas() {
    using kernels::cpu::Isa;
    std::vector<Isa> out;
    for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
        if (i <= kernels::cpu::cpu_isa()) out.push_back(i);
    return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// The flash-attention rule: max|fast − ref64| <= kErrFactor·max|ref32 − ref64| + kErrFloor.
inline ::testing::AssertionResult within_2x(const float* fast,
                                            const float* ref32,
                                            const double* ref64,
                                            int64_t n) {
    const double err_fast = max_abs_diff(fast, ref64, n);
    const double err_ref  = max_abs_diff(ref32, ref64, n);
    const double bound    = kErrFactor * err_ref + kErrFloor;
    if (err_fast <= bound && !(err_fast != err_fast)) return ::testing::AssertionSuccess();
    auto fail = ::testing::AssertionFailure();
    fail << "err_fast " << err_fast << " > 2·err_ref32 + floor = " << bound
         << "; first mismatches:";
    int shown = 0;
    for (int64_t i = 0; i < n && shown < 5; ++i) {
        const double e = std::abs(double(fast[i]) - ref64[i]);
        if (e > bound || e != e) {
            fail << "\n  [" << i << "] fast " << fast[i] << " ref32 " << ref32[i] << " ref64 "
                 << ref64[i];
            ++shown;
        }
    }
    return fail;
}
inline ::testing::AssertionResult within_2x(const std::vector<float>& fast,
                                            const std::vector<float>& ref32,
                                            const std::vector<double>& ref64) {
    if (fast.size() != ref64.size() || ref32.size() != ref64.size())
        return ::testing::AssertionFailure() << "size mismatch";
    return within_2x(fast.data(), ref32.data(), ref64.data(), int64_t(ref64.size()));
}

/// Central differences of L(x) = Σ_j w_j · f(x)_j in float64: returns dL/dx.
inline std::vector<double> numeric_grad(
    const std::function<std::vector<double>(const std::vector<double>&)>& f,
    std::vector<double> x,
    const std::vector<double>& w) {
    std::vector<double> g(x.size());
    auto loss = [&](const std::vector<double>& xv) {
        const auto y = f(xv);
        double s     = 0;
        for (size_t j = 0; j < y.size(); ++j) s += w[j] * y[j];
        return s;
    };
    for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i]            = x0 + kGradEps;
        const double lp = loss(x);
        x[i]            = x0 - kGradEps;
        const double lm = loss(x);
        x[i]            = x0;
        g[i]            = (lp - lm) / (2 * kGradEps);
    }
    return g;
}

}  // namespace qkv::test
