#pragma once
// GRU cell kernel bodies written once as templates over the ISA (vector type simd::Vec<I>),
// instantiated per ISA by variants.inc (declared in variants.h).
// σ and tanh come from activation_simd.h.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/activation_simd.h"
#include "kernels/params.h"

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {

/// Below this many elements (B·H) the cell stays on the calling thread (an OpenMP fork/join
/// costs a few µs, about what one thread needs for 10⁴ gate evaluations).
constexpr int64_t kGruMinParallel = 1 << 14;

namespace {

// One row's gates for lanes [j, j + n) (n = V::W, or a tail n < V::W via masked loads/stores).
template <class V, bool kTail>
inline void gru_cell_lanes(float* hn_out, float* w, const float* gi, const float* gh,
                           const float* h, int64_t H, int64_t j, int64_t n) {
    auto ld = [&](const float* p) { return kTail ? V::load_tail(p, n, 0.f) : V::load(p); };
    auto st = [&](float* p, typename V::R a) {
        if constexpr (kTail) V::store_tail(p, a, n); else V::store(p, a);
    };
    const auto r  = sigmoid<V>(V::add(ld(gi + j), ld(gh + j)));
    const auto z  = sigmoid<V>(V::add(ld(gi + H + j), ld(gh + H + j)));
    const auto hn = ld(gh + 2 * H + j);
    const auto nn = tanh<V>(V::add(ld(gi + 2 * H + j), V::mul(r, hn)));
    const auto hp = ld(h + j);
    if (w) {
        st(w + j, r);
        st(w + H + j, z);
        st(w + 2 * H + j, nn);
        st(w + 3 * H + j, hn);
    }
    st(hn_out + j, V::add(nn, V::mul(z, V::sub(hp, nn))));
}

}  // namespace

template <Isa I>
void gru_cell_forward(const GruCellParams<float>& p) {
    using V = Vec<I>;
    float *const  h_new = p.h_new, *const ws = p.ws;
    const float * gi = p.gi, *gh = p.gh, *h = p.h;
    const int64_t B = p.B, H = p.H;
#pragma omp parallel for schedule(static) if (B * H >= kGruMinParallel)
    for (int64_t b = 0; b < B; ++b) {
        const float* gib = gi + b * 3 * H;
        const float* ghb = gh + b * 3 * H;
        const float* hb  = h + b * H;
        float* ob        = h_new + b * H;
        float* wb        = ws ? ws + b * 4 * H : nullptr;
        int64_t j        = 0;
        for (; j + V::W <= H; j += V::W) gru_cell_lanes<V, false>(ob, wb, gib, ghb, hb, H, j, V::W);
        if (j < H) gru_cell_lanes<V, true>(ob, wb, gib, ghb, hb, H, j, H - j);
    }
}

namespace {

// One row's backward for lanes [j, j + n) (full vectors, or a masked tail).
template <class V, bool kTail>
inline void gru_cell_backward_lanes(float* di, float* dg, float* dhb, const float* w, const float* g,
                                    const float* hb, int64_t H, int64_t j, int64_t n) {
    auto ld = [&](const float* p) { return kTail ? V::load_tail(p, n, 0.f) : V::load(p); };
    auto st = [&](float* p, typename V::R a) {
        if constexpr (kTail) V::store_tail(p, a, n); else V::store(p, a);
    };
    const auto one = V::set1(1.0f);
    const auto r = ld(w + j), z = ld(w + H + j), nn = ld(w + 2 * H + j), hn = ld(w + 3 * H + j);
    const auto gj = ld(g + j);
    const auto an = V::mul(V::mul(gj, V::sub(one, z)), V::fnmadd(nn, nn, one));   // g(1−z)(1−n²)
    const auto az = V::mul(V::mul(gj, V::sub(ld(hb + j), nn)), V::mul(z, V::sub(one, z)));
    const auto ar = V::mul(V::mul(an, hn), V::mul(r, V::sub(one, r)));
    st(di + j, ar);
    st(dg + j, ar);
    st(di + H + j, az);
    st(dg + H + j, az);
    st(di + 2 * H + j, an);
    st(dg + 2 * H + j, V::mul(an, r));
    if (dhb) st(dhb + j, V::mul(gj, z));
}

}  // namespace

template <Isa I>
void gru_cell_backward(const GruCellGradParams<float>& gp) {
    using V = Vec<I>;
    float *const  dgi = gp.dgi, *const dgh = gp.dgh, *const dh = gp.dh;
    const float * dh_new = gp.dh_new, *ws = gp.ws, *h = gp.h;
    const int64_t B = gp.B, H = gp.H;
#pragma omp parallel for schedule(static) if (B * H >= kGruMinParallel)
    for (int64_t b = 0; b < B; ++b) {
        const float* w  = ws + b * 4 * H;
        const float* g  = dh_new + b * H;
        const float* hb = h + b * H;
        float* di       = dgi + b * 3 * H;
        float* dg       = dgh + b * 3 * H;
        float* dhb      = dh ? dh + b * H : nullptr;
        int64_t j       = 0;
        for (; j + V::W <= H; j += V::W) gru_cell_backward_lanes<V, false>(di, dg, dhb, w, g, hb, H, j, V::W);
        if (j < H) gru_cell_backward_lanes<V, true>(di, dg, dhb, w, g, hb, H, j, H - j);
    }
}

}  // namespace qkv::kernels::cpu::simd
#endif
