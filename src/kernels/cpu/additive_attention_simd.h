#pragma once
// Additive-attention score kernel bodies, one template over the ISA, instantiated per ISA by
// variants.inc. The backward writes dq and dk rows
// of batch row b only from iteration b (race-free), and dw into a per-b partial row.
#include <cstdint>

#include "kernels/cpu/activation_simd.h"
#include "kernels/params.h"

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {

/// Below this many tanh evaluations (B·Tq·Tk·H) the kernels stay on the calling thread.
constexpr int64_t kAdditiveMinParallel = 1 << 15;

template <Isa I>
void additive_scores_forward(const AdditiveScoresParams<float>& p) {
    using V = Vec<I>;
    float* const  scores = p.scores;
    const float * q = p.q, *k = p.k, *w = p.w;
    const int64_t B = p.B, Tq = p.Tq, Tk = p.Tk, H = p.H;
#pragma omp parallel for schedule(static) if (B * Tq * Tk * H >= kAdditiveMinParallel)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Tq; ++i) {
            const float* qi = q + (b * Tq + i) * H;
            for (int64_t j = 0; j < Tk; ++j) {
                const float* kj = k + (b * Tk + j) * H;
                auto acc        = V::zero();
                int64_t h       = 0;
                for (; h + V::W <= H; h += V::W)
                    acc = V::fmadd(V::load(w + h), tanh<V>(V::add(V::load(qi + h), V::load(kj + h))), acc);
                if (h < H) {
                    const int64_t n = H - h;  // tail: w = 0 in the padding lanes
                    acc = V::fmadd(V::load_tail(w + h, n, 0.f),
                                   tanh<V>(V::add(V::load_tail(qi + h, n, 0.f), V::load_tail(kj + h, n, 0.f))),
                                   acc);
                }
                scores[(b * Tq + i) * Tk + j] = V::reduce_add(acc);
            }
        }
}

// g.dw: (B, H) partial sums of e·f per batch row (reduced by the caller in b order); every output
// non-null.
template <Isa I>
void additive_scores_backward(const AdditiveScoresParams<float>& p, const AdditiveScoresGradParams<float>& g) {
    using V = Vec<I>;
    float *const  dq = g.dq, *const dk = g.dk, *const dw_part = g.dw;
    const float*  dscores = g.dscores;
    const float * q = p.q, *k = p.k, *w = p.w;
    const int64_t B = p.B, Tq = p.Tq, Tk = p.Tk, H = p.H;
    const auto one = V::set1(1.0f);
#pragma omp parallel for schedule(static) if (B * Tq * Tk * H >= kAdditiveMinParallel)
    for (int64_t b = 0; b < B; ++b) {
        float* dqb = dq + b * Tq * H;
        float* dkb = dk + b * Tk * H;
        float* dwb = dw_part + b * H;
        for (int64_t n = 0; n < Tq * H; ++n) dqb[n] = 0.f;
        for (int64_t n = 0; n < Tk * H; ++n) dkb[n] = 0.f;
        for (int64_t h = 0; h < H; ++h) dwb[h] = 0.f;
        for (int64_t i = 0; i < Tq; ++i) {
            const float* qi = q + (b * Tq + i) * H;
            float* dqi      = dqb + i * H;
            for (int64_t j = 0; j < Tk; ++j) {
                const float* kj = k + (b * Tk + j) * H;
                float* dkj      = dkb + j * H;
                const auto e    = V::set1(dscores[(b * Tq + i) * Tk + j]);
                int64_t h       = 0;
                auto step       = [&](int64_t at, int64_t n) {
                    const bool tail = n < V::W;
                    auto ld = [&](const float* x) { return tail ? V::load_tail(x + at, n, 0.f) : V::load(x + at); };
                    auto st = [&](float* y, typename V::R a) {
                        if (tail) V::store_tail(y + at, a, n); else V::store(y + at, a);
                    };
                    const auto f = tanh<V>(V::add(ld(qi), ld(kj)));
                    const auto t = V::mul(V::mul(e, ld(w)), V::fnmadd(f, f, one));  // e·w·(1 − f²)
                    st(dqi, V::add(ld(dqi), t));
                    st(dkj, V::add(ld(dkj), t));
                    st(dwb, V::fmadd(e, f, ld(dwb)));
                };
                for (; h + V::W <= H; h += V::W) step(h, V::W);
                if (h < H) step(h, H - h);
            }
        }
    }
}

}  // namespace qkv::kernels::cpu::simd
#endif
