#pragma once
// Fused Adam body, one template over the ISA, instantiated per ISA by variants.inc.
#include <cstdint>

#include "core/parallel_for.h"
#include "kernels/cpu/simd.h"

namespace qkv::kernels::cpu::detail {

/// Scalars of one Adam step, already rounded to float (see ref::adam_step).
struct AdamScalars {
    float step_size, bc2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float weight_decay, decay;  // decay = 1 − lr·wd (AdamW)
    float grad_scale;           // applied first when scaled (clip_grad_norm's factor)
    bool use_wd, decoupled, scaled;
};

constexpr int64_t kAdamMinParallel = 1 << 15;  // elements

}  // namespace qkv::kernels::cpu::detail

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {
namespace {

// The operations of ref::adam_step in the same order, kept unfused (fp-contract is off).
template <class V>
inline void adam_lanes(typename V::R& p,
                       typename V::R g,
                       typename V::R& m,
                       typename V::R& v,
                       const detail::AdamScalars& s) {
    if (s.scaled) g = V::mul(g, V::set1(s.grad_scale));
    if (s.use_wd) {
        if (s.decoupled)
            p = V::mul(p, V::set1(s.decay));
        else
            g = V::add(g, V::mul(V::set1(s.weight_decay), p));
    }
    m = V::add(V::mul(m, V::set1(s.beta1)), V::mul(V::set1(s.one_minus_beta1), g));
    v = V::add(V::mul(v, V::set1(s.beta2)), V::mul(V::mul(V::set1(s.one_minus_beta2), g), g));
    const typename V::R denom = V::add(V::div(V::sqrt(v), V::set1(s.bc2_sqrt)), V::set1(s.eps));
    p                         = V::add(p, V::div(V::mul(V::set1(-s.step_size), m), denom));
}

}  // namespace

template <Isa I>
void adam_step(
    float* param, const float* grad, float* m, float* v, int64_t n, const detail::AdamScalars& s) {
    using V = Vec<I>;
    using R              = typename V::R;
    const int64_t blocks = (n + V::W - 1) / V::W;
    ::qkv::detail::parallel_for(blocks, n >= detail::kAdamMinParallel, [&](int64_t b) {
        const int64_t i = b * V::W;
        if (i + V::W <= n) {
            R p = V::load(param + i), vm = V::load(m + i), vv = V::load(v + i);
            adam_lanes<V>(p, V::load(grad + i), vm, vv, s);
            V::store(param + i, p), V::store(m + i, vm), V::store(v + i, vv);
        } else {
            const int64_t t = n - i;
            R p = V::load_tail(param + i, t, 0.f), vm = V::load_tail(m + i, t, 0.f);
            R vv = V::load_tail(v + i, t, 0.f);
            adam_lanes<V>(p, V::load_tail(grad + i, t, 0.f), vm, vv, s);
            V::store_tail(param + i, p, t), V::store_tail(m + i, vm, t),
                V::store_tail(v + i, vv, t);
        }
    });
}

}  // namespace qkv::kernels::cpu::simd
#endif
