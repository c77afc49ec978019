#pragma once
// argmax_block's per-ISA body (cpu/argmax.h), instantiated per tier by cpu/variants.inc.
#include <cstdint>
#include <limits>

#include "core/argmax_rule.h"
#include "kernels/cpu/argmax.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"

namespace qkv::kernels::cpu::simd {

namespace argmax_detail {
/// Column j's value in row n (cpu/argmax.h's formula), one lane at a time.
static inline float value(const ArgmaxBlockParams& p, int64_t n, int64_t j) {  // static: one copy per tier
    if (p.acc) return float(p.acc[n * p.width + j]) * p.sx[n] * p.sw[j] + (p.bias ? p.bias[j] : 0.0f);
    const float v = p.logits[n * p.width + j];
    return p.bias ? v + p.bias[j] : v;
}

/// The scalar rule over row n: the reference every tier matches.
static inline void scan_row(const ArgmaxBlockParams& p, int64_t n) {
    float best = 0.0f;
    int64_t bi = -1;
    for (int64_t j = 0; j < p.width; ++j) {
        if (p.banned && p.banned[j]) continue;
        const float v = value(p, n, j);
        if (qkv::detail::argmax_better(v, j, best, bi)) best = v, bi = j;
    }
    p.best[n] = best, p.index[n] = bi;
}
}  // namespace argmax_detail

template <Isa I>
void argmax_block(const ArgmaxBlockParams& p) {
    using argmax_detail::value;
    for (int64_t n = 0; n < p.rows; ++n) {
        if constexpr (I == Isa::scalar) {
            argmax_detail::scan_row(p, n);
        } else {
            using V = Vec<I>;
            constexpr float lowest = -std::numeric_limits<float>::infinity();
            const auto ninf = V::set1(lowest);
            const bool int8 = p.acc != nullptr;
            const auto s = V::set1(int8 ? p.sx[n] : 0.0f), zero = V::zero();
            const int32_t* a = int8 ? p.acc + n * p.width : nullptr;
            const float* l = int8 ? nullptr : p.logits + n * p.width;
            // W values of columns [j, j + W), banned ones -inf.
            auto lanes = [&](int64_t j) {
                typename V::R v;
                if (int8) {
                    v = V::add(V::mul(V::mul(V::load_i32(a + j), s), V::load(p.sw + j)),
                               p.bias ? V::load(p.bias + j) : zero);
                } else {
                    v = V::load(l + j);
                    if (p.bias) v = V::add(v, V::load(p.bias + j));
                }
                if (p.banned) v = V::select(V::bytes_nonzero(reinterpret_cast<const uint8_t*>(p.banned + j)), ninf, v);
                return v;
            };
            const int64_t wv = p.width / V::W * V::W;
            auto mv = ninf;
            unsigned bad = 0;
            for (int64_t j = 0; j < wv; j += V::W) {
                const auto v = lanes(j);
                bad |= V::nan_bits(v);
                mv = V::max(v, mv);
            }
            float m = V::reduce_max(mv);
            for (int64_t j = wv; j < p.width; ++j) {
                if (p.banned && p.banned[j]) continue;
                const float v = value(p, n, j);
                bad |= unsigned(v != v);
                m = v > m ? v : m;
            }
            if (bad || m == lowest) {  // a NaN, or nothing above -inf: argmax_better's own order
                argmax_detail::scan_row(p, n);
                continue;
            }
            // m is finite or +inf and some allowed column holds it: the first one wins.
            int64_t bi = -1;
            const auto mm = V::set1(m);
            for (int64_t j = 0; j < wv && bi < 0; j += V::W)
                if (const unsigned e = V::eq_bits(lanes(j), mm)) bi = j + __builtin_ctz(e);
            for (int64_t j = wv; j < p.width && bi < 0; ++j)
                if (!(p.banned && p.banned[j]) && value(p, n, j) == m) bi = j;
            p.best[n] = value(p, n, bi), p.index[n] = bi;  // its own value: m may be the other zero
        }
    }
}

}  // namespace qkv::kernels::cpu::simd
