#pragma once
// SIMD building blocks for the fast fp32 kernels: run-time ISA selection (always available), and,
// in translation units compiled with the ISA's flags (files named *_avx2.cpp / *_avx512.cpp), the
// vector wrappers V8 (AVX2+FMA, 8 lanes) and V16 (AVX-512F, 16 lanes), a polynomial exp, and
// row reductions (max, Σ, Σ exp). Kernel bodies are written once as templates over V and
// instantiated per ISA file (softmax_avx2.cpp / softmax_avx512.cpp show the pattern).
//
// Polynomial exp (simd::exp<V>), Cephes expf scheme:
//   x is clamped to [-104, 88.8] (NaN passes through); n = round(x·log2 e);
//   r = x − n·ln2 (two-constant Cody–Waite reduction with FMA), |r| <= ln2/2;
//   e^r = 1 + r + r²·P(r), P a degree-5 minimax polynomial (Cephes coefficients);
//   e^x = e^r · 2^⌊n/2⌋ · 2^(n−⌊n/2⌋) (two exact power-of-two factors, so results down to the
//   subnormal range and the overflow to +inf come out right without special cases).
// Accuracy against double exp (tests/kernels/test_softmax_kernels.cpp, ExpSimd.*): the error is
//   at most 1.3 ulp of the exact value for normal results, x in [-87.3, 88.7] (AVX2, every 97th
//   float bit pattern in [-110, 90]: worst 1.26 ulp at x = -71.03); subnormal results are off by
//   less than 2^-149 (0.78·2^-149 worst); exp(-inf) = 0, exp(x > 88.73) = +inf, exp(NaN) = NaN.
//
// ODR note: everything ISA-specific sits in an unnamed namespace so that copies compiled with
// AVX-512 flags can never be linked into code that runs on an AVX2-only CPU.
#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
// GCC implements _mm*_mul_ps/_add_ps as plain vector arithmetic and, in C++, contracts a·b ± c
// into an FMA by default. Kernels here ask for FMA explicitly (V::fmadd) and rely on a product
// being rounded the same way twice (layer norm's g − mean(g) must cancel exactly when N = 1), so
// contraction is off for every function of an ISA translation unit.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's own avx512fintrin.h trips -W(maybe-)uninitialized (_mm512_undefined_ps, GCC PR 105593);
// the warning is reported where the intrinsics are inlined, so it is off for the whole AVX-512 TU.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qkv::kernels::cpu {

/// Instruction sets the fast kernels are compiled for, in increasing order.
enum class Isa : uint8_t { scalar, avx2, avx512 };

/// The ISA the fast kernels use: the best one this CPU supports (AVX2 needs AVX2+FMA; AVX-512
/// needs F+BW+VL+DQ), capped by set_max_isa(). `scalar` falls back to the reference kernels.
Isa simd_isa();
/// The best ISA this CPU supports, ignoring the cap.
Isa cpu_isa();
/// Caps the ISA used by later kernel calls (tests run every path the CPU has; benchmarks compare
/// them). Not thread-safe: call it between kernel calls. Returns the previous cap.
Isa set_max_isa(Isa cap);
/// Name for messages: "scalar", "avx2", "avx512".
const char* isa_name(Isa isa);

/// y[i] = e^{x[i]} for i < n with the polynomial exp of the selected ISA (std::exp when scalar).
/// y may alias x. Used by the tests to measure the exp's accuracy; single-threaded.
void exp_simd(float* y, const float* x, int64_t n);

namespace detail {
void exp_simd_avx2(float* y, const float* x, int64_t n);
void exp_simd_avx512(float* y, const float* x, int64_t n);
}  // namespace detail

namespace simd {
namespace {

// ---- exp constants (Cephes expf) ----------------------------------------------------------------
constexpr float kExpHi = 88.8f;    // e^88.8 > FLT_MAX: saturates to +inf
constexpr float kExpLo = -104.0f;  // e^-104 < 2^-150: rounds to 0
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi has 9 bits
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f;
constexpr float kExpP1 = 1.3981999507e-3f;
constexpr float kExpP2 = 8.3334519073e-3f;
constexpr float kExpP3 = 4.1665795894e-2f;
constexpr float kExpP4 = 1.6666665459e-1f;
constexpr float kExpP5 = 5.0000001201e-1f;

#if defined(__AVX2__) && defined(__FMA__)
/// 8 fp32 lanes (AVX2 + FMA).
struct V8 {
    using R                    = __m256;
    static constexpr int64_t W = 8;

    static R zero() { return _mm256_setzero_ps(); }
    static R set1(float a) { return _mm256_set1_ps(a); }
    static R load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, R a) { _mm256_storeu_ps(p, a); }
    /// Lanes [0, n) from p, the others `fill`; 0 <= n < W. Never reads past p + n.
    static R load_tail(const float* p, int64_t n, float fill) {
        const __m256i m = tail_mask(n);
        return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m),
                                _mm256_castsi256_ps(m));
    }
    static void store_tail(float* p, R a, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), a); }

    static R add(R a, R b) { return _mm256_add_ps(a, b); }
    static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
    static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
    static R div(R a, R b) { return _mm256_div_ps(a, b); }
    static R sqrt(R a) { return _mm256_sqrt_ps(a); }
    static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a*b + c
    static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b
    /// max/min return the second operand when either is NaN (x86 semantics).
    static R max(R a, R b) { return _mm256_max_ps(a, b); }
    static R min(R a, R b) { return _mm256_min_ps(a, b); }
    static R round(R a) {
        return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    static R floor(R a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
    /// 2^k for integer-valued k in [-126, 127] (exact, built from the exponent bits).
    static R pow2i(R k) {
        const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    }
    static float reduce_add(R a) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s        = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s        = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static float reduce_max(R a) {
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s        = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s        = _mm_max_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

private:
    static __m256i tail_mask(int64_t n) {
        alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                      0,  0,  0,  0,  0,  0,  0,  0};
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
    }
};
#endif

#if defined(__AVX512F__)
/// 16 fp32 lanes (AVX-512F; tails use mask registers).
struct V16 {
    using R                    = __m512;
    static constexpr int64_t W = 16;

    static R zero() { return _mm512_setzero_ps(); }
    static R set1(float a) { return _mm512_set1_ps(a); }
    static R load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, R a) { _mm512_storeu_ps(p, a); }
    static R load_tail(const float* p, int64_t n, float fill) {
        return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
    }
    static void store_tail(float* p, R a, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), a); }

    static R add(R a, R b) { return _mm512_add_ps(a, b); }
    static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
    static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
    static R div(R a, R b) { return _mm512_div_ps(a, b); }
    static R sqrt(R a) { return _mm512_sqrt_ps(a); }
    static R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
    static R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
    static R max(R a, R b) { return _mm512_max_ps(a, b); }
    static R min(R a, R b) { return _mm512_min_ps(a, b); }
    static R round(R a) {
        return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    static R floor(R a) {
        return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    static R pow2i(R k) {
        const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127));
        return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    }
    static float reduce_add(R a) { return _mm512_reduce_add_ps(a); }
    static float reduce_max(R a) { return _mm512_reduce_max_ps(a); }

private:
    static __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }
};
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
/// e^x per lane (see the file comment for the algorithm and its accuracy).
template <class V>
inline typename V::R exp(typename V::R x) {
    using R = typename V::R;
    // Clamp with x as the second operand so that NaN propagates.
    x         = V::max(V::set1(kExpLo), V::min(V::set1(kExpHi), x));
    const R n = V::round(V::mul(x, V::set1(kLog2e)));
    R r       = V::fnmadd(n, V::set1(kLn2Hi), x);
    r         = V::fnmadd(n, V::set1(kLn2Lo), r);
    R p       = V::set1(kExpP0);
    p         = V::fmadd(p, r, V::set1(kExpP1));
    p         = V::fmadd(p, r, V::set1(kExpP2));
    p         = V::fmadd(p, r, V::set1(kExpP3));
    p         = V::fmadd(p, r, V::set1(kExpP4));
    p         = V::fmadd(p, r, V::set1(kExpP5));
    p         = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
    // n in [-150, 129]: split so that each factor 2^k has k in [-75, 65] (a normal float).
    const R n1 = V::floor(V::mul(n, V::set1(0.5f)));
    const R n2 = V::sub(n, n1);
    return V::mul(V::mul(p, V::pow2i(n1)), V::pow2i(n2));
}

constexpr float kNegInf = -__builtin_inff();

// ---- row helpers over n contiguous floats (tails use masked loads, never read past the end) ----

/// max_j x[j] (a NaN may or may not survive; callers' sums turn NaN rows into NaN anyway).
template <class V>
float row_max(const float* x, int64_t n) {
    using R = typename V::R;
    R m0 = V::set1(kNegInf), m1 = m0;
    int64_t j = 0;
    for (; j + 2 * V::W <= n; j += 2 * V::W) {
        m0 = V::max(m0, V::load(x + j));
        m1 = V::max(m1, V::load(x + j + V::W));
    }
    for (; j + V::W <= n; j += V::W) m0 = V::max(m0, V::load(x + j));
    if (j < n) m0 = V::max(m0, V::load_tail(x + j, n - j, kNegInf));
    return V::reduce_max(V::max(m0, m1));
}

/// Σ_j exp(x[j] − m); with kStore also stores each exp(x[j] − m) to y[j].
template <class V, bool kStore>
float row_sum_exp(float* y, const float* x, int64_t n, float m) {
    using R    = typename V::R;
    const R vm = V::set1(m);
    R s0 = V::zero(), s1 = V::zero();
    int64_t j = 0;
    for (; j + 2 * V::W <= n; j += 2 * V::W) {
        const R e0 = exp<V>(V::sub(V::load(x + j), vm));
        const R e1 = exp<V>(V::sub(V::load(x + j + V::W), vm));
        if constexpr (kStore) {
            V::store(y + j, e0);
            V::store(y + j + V::W, e1);
        }
        s0 = V::add(s0, e0);
        s1 = V::add(s1, e1);
    }
    for (; j + V::W <= n; j += V::W) {
        const R e = exp<V>(V::sub(V::load(x + j), vm));
        if constexpr (kStore) V::store(y + j, e);
        s0 = V::add(s0, e);
    }
    if (j < n) {
        // Lanes past the end hold −inf, so they add exp(−inf) = 0.
        const R e = exp<V>(V::sub(V::load_tail(x + j, n - j, kNegInf), vm));
        if constexpr (kStore) V::store_tail(y + j, e, n - j);
        s0 = V::add(s0, e);
    }
    return V::reduce_add(V::add(s0, s1));
}

/// y[j] = a·x[j] + b.
template <class V>
void row_affine(float* y, const float* x, int64_t n, float a, float b) {
    using R    = typename V::R;
    const R va = V::set1(a), vb = V::set1(b);
    int64_t j = 0;
    for (; j + V::W <= n; j += V::W) V::store(y + j, V::fmadd(V::load(x + j), va, vb));
    if (j < n) V::store_tail(y + j, V::fmadd(V::load_tail(x + j, n - j, 0.f), va, vb), n - j);
}

/// Σ_j x[j].
template <class V>
float row_sum(const float* x, int64_t n) {
    using R = typename V::R;
    R s0 = V::zero(), s1 = V::zero();
    int64_t j = 0;
    for (; j + 2 * V::W <= n; j += 2 * V::W) {
        s0 = V::add(s0, V::load(x + j));
        s1 = V::add(s1, V::load(x + j + V::W));
    }
    for (; j + V::W <= n; j += V::W) s0 = V::add(s0, V::load(x + j));
    if (j < n) s0 = V::add(s0, V::load_tail(x + j, n - j, 0.f));
    return V::reduce_add(V::add(s0, s1));
}
#endif

}  // namespace
}  // namespace simd
}  // namespace qkv::kernels::cpu
