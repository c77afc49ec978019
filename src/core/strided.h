#pragma once
// Private helper: row-major iteration over an n-d index space with several strided operands.
// `inner(count, offsets, steps)` is called once per innermost row: operand k's elements are at
// offsets[k] + i * steps[k] for i in [0, count). Used by element-wise, copy and reduction ops.
#include <array>
#include <cstdint>
#include <vector>

#include "qkv/core/shape.h"

namespace qkv::detail {

template <size_t N, class F>
void for_each_strided(const Shape& shape, const std::array<const Shape*, N>& strides,
                      const std::array<int64_t, N>& base, F&& inner) {
    const int64_t rank = int64_t(shape.size());
    for (int64_t d : shape)
        if (d == 0) return;
    if (rank == 0) {
        inner(int64_t(1), base, std::array<int64_t, N>{});
        return;
    }
    const int64_t last = shape[size_t(rank - 1)];
    std::array<int64_t, N> steps{};
    for (size_t k = 0; k < N; ++k) steps[k] = (*strides[k])[size_t(rank - 1)];
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    std::array<int64_t, N> off = base;
    while (true) {
        inner(last, off, steps);
        int64_t d = rank - 2;
        for (; d >= 0; --d) {
            const size_t du = size_t(d);
            if (++idx[du] < shape[du]) {
                for (size_t k = 0; k < N; ++k) off[k] += (*strides[k])[du];
                break;
            }
            for (size_t k = 0; k < N; ++k) off[k] -= (*strides[k])[du] * (shape[du] - 1);
            idx[du] = 0;
        }
        if (d < 0) return;
    }
}

/// Strides of a tensor of `shape`/`strides` broadcast to `out` (0 on broadcast dims).
inline Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out) {
    Shape st(out.size(), 0);
    const size_t lead = out.size() - shape.size();
    for (size_t i = 0; i < shape.size(); ++i)
        st[lead + i] = shape[i] == 1 && out[lead + i] != 1 ? 0 : strides[i];
    return st;
}

}  // namespace qkv::detail
