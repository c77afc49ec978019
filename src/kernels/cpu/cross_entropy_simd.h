#pragma once
// Cross-entropy kernel bodies, one template over the ISA, instantiated per ISA by variants.inc
// (the params are in kernels/params.h).
#include <cstdint>

#include "core/parallel_for.h"
#include "kernels/cpu/simd.h"
#include "kernels/params.h"

#if defined(__AVX2__) || defined(__AVX512F__)
namespace qkv::kernels::cpu::simd {

/// Logits per block in the forward: 16 KiB, so the Σexp pass re-reads the block from L1.
constexpr int64_t kCrossEntropyBlock       = 4096;
constexpr int64_t kCrossEntropyMinParallel = 1 << 14;  // elements; as kSoftmaxMinParallel

template <Isa I>
void cross_entropy_forward(const CrossEntropyParams<float>& params) {
    const auto loss = params.loss; const auto lse = params.lse; const auto logits = params.logits;
    const auto target = params.target; const auto weight = params.weight; const auto N = params.N;
    const auto Vn = params.V; const auto ignore_index = params.ignore_index;
    const auto label_smoothing = params.label_smoothing;
    const float eps = float(label_smoothing);
    using V = Vec<I>;
    ::qkv::detail::parallel_for(N, N * Vn >= kCrossEntropyMinParallel, [&](int64_t i) {
        const float* x = logits + i * Vn;
        // Running (max m, Σ exp(x − m)) over blocks: s ← s·exp(m − m') + Σ_block exp(x − m').
        float m = kNegInf, s = 0.f, sum_x = 0.f;
        for (int64_t b = 0; b < Vn; b += kCrossEntropyBlock) {
            const int64_t n =
                Vn - b < kCrossEntropyBlock ? Vn - b : kCrossEntropyBlock;
            const float bm = row_max<V>(x + b, n);
            if (eps != 0.f) sum_x += row_sum<V>(x + b, n);
            const float nm = bm > m || bm != bm ? bm : m;  // NaN propagates
            if (nm == kNegInf)
                continue;  // only −inf so far: Σexp stays 0 (exp(−inf − −inf) is NaN)
            if (nm != m) s *= __builtin_expf(m - nm);  // exp(−inf) = 0 for the first finite block
            s += row_sum_exp<V, false>(nullptr, x + b, n, nm);
            m = nm;
        }
        const float l = m + __builtin_logf(s);
        if (lse) lse[i] = l;
        const int64_t t = target[i];
        if (t == ignore_index) {
            loss[i] = 0.f;
            return;
        }
        float li = (1.f - eps) * (l - x[t]);
        if (eps != 0.f) li += eps * (l - sum_x / float(Vn));
        loss[i] = (weight ? weight[i] : 1.f) * li;
    });
}


template <Isa I>
void cross_entropy_backward(const CrossEntropyParams<float>& params, const CrossEntropyGradParams<float>& grads) {
    const auto dlogits = grads.dlogits; const auto dloss = grads.dloss;
    const auto dloss_stride = grads.dloss_stride;
    const auto lse = params.lse; const auto logits = params.logits;
    const auto target = params.target; const auto weight = params.weight; const auto N = params.N;
    const auto Vn = params.V; const auto ignore_index = params.ignore_index;
    const auto label_smoothing = params.label_smoothing;
    const float eps = float(label_smoothing);
    using V = Vec<I>;
    using R = typename V::R;
    ::qkv::detail::parallel_for(N, N * Vn >= kCrossEntropyMinParallel, [&](int64_t i) {
        const float* x  = logits + i * Vn;
        float* dx       = dlogits + i * Vn;
        const int64_t t = target[i];
        const R zero    = V::zero();
        if (t == ignore_index) {
            int64_t j = 0;
            for (; j + V::W <= Vn; j += V::W) V::store(dx + j, zero);
            if (j < Vn) V::store_tail(dx + j, zero, Vn - j);
            return;
        }
        const float c   = dloss[i * dloss_stride] * (weight ? weight[i] : 1.f);
        const float l   = lse[i];
        const float q0  = eps / float(Vn);
        const float x_t = x[t];  // read before dx (which may alias x) is written
        const R vc = V::set1(c), vl = V::set1(l), vq = V::set1(q0);
        int64_t j = 0;
        for (; j + V::W <= Vn; j += V::W)
            V::store(dx + j, V::mul(vc, V::sub(exp<V>(V::sub(V::load(x + j), vl)), vq)));
        if (j < Vn) {
            const R p = exp<V>(V::sub(V::load_tail(x + j, Vn - j, 0.f), vl));
            V::store_tail(dx + j, V::mul(vc, V::sub(p, vq)), Vn - j);
        }
        dx[t] = c * (__builtin_expf(x_t - l) - ((1.f - eps) + q0));
    });
}

}  // namespace qkv::kernels::cpu::simd
#endif
