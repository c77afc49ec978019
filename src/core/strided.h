#pragma once
// Private helper: row-major iteration over an n-d index space with several strided operands.
// `inner(count, offsets, steps)` is called once per innermost row: operand k's elements are at
// offsets[k] + i * steps[k] for i in [0, count). Used by element-wise, copy and reduction ops.
#include <array>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "core/parallel_for.h"
#include "qkv/core/shape.h"

namespace qkv::detail {

/// for_each_strided over the rows [row_begin, row_end) of the index space (a row = one run of the
/// innermost dim; rows counted row-major over the other dims). Requires a rank >= 1 and no zero dim.
template <size_t N, class F>
void for_each_strided_rows(const Shape& shape, const std::array<const Shape*, N>& strides,
                           const std::array<int64_t, N>& base, int64_t row_begin, int64_t row_end, F&& inner) {
    const int64_t rank = int64_t(shape.size());
    const int64_t last = shape[size_t(rank - 1)];
    std::array<int64_t, N> steps{};
    for (size_t k = 0; k < N; ++k) steps[k] = (*strides[k])[size_t(rank - 1)];
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    std::array<int64_t, N> off = base;
    int64_t r = row_begin;
    for (int64_t d = rank - 2; d >= 0; --d) {  // unravel row_begin
        const size_t du = size_t(d);
        idx[du] = r % shape[du];
        r /= shape[du];
        for (size_t k = 0; k < N; ++k) off[k] += idx[du] * (*strides[k])[du];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
        inner(last, off, steps);
        for (int64_t d = rank - 2; d >= 0; --d) {
            const size_t du = size_t(d);
            if (++idx[du] < shape[du]) {
                for (size_t k = 0; k < N; ++k) off[k] += (*strides[k])[du];
                break;
            }
            for (size_t k = 0; k < N; ++k) off[k] -= (*strides[k])[du] * (shape[du] - 1);
            idx[du] = 0;
        }
    }
}

/// Every row of the index space, row-major (rank 0: one call of one element; a zero dim: none).
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
    int64_t rows = 1;
    for (int64_t i = 0; i + 1 < rank; ++i) rows *= shape[size_t(i)];
    for_each_strided_rows<N>(shape, strides, base, 0, rows, inner);
}

/// for_each_strided with the rows split into contiguous ranges, one per OpenMP thread, when the
/// index space holds more than `grain` elements (and start_team allows a team). Only for `inner`s whose rows write disjoint
/// memory (e.g. a contiguous destination); each row is still visited once, in row-major order
/// within a thread, so per-element results equal the serial walk's.
template <size_t N, class F>
void parallel_for_each_strided(const Shape& shape, const std::array<const Shape*, N>& strides,
                               const std::array<int64_t, N>& base, int64_t grain, F&& inner) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (shape.size() < 2 || !start_team(numel > grain)) {  // no team of one (core/parallel_for.h)
        for_each_strided<N>(shape, strides, base, inner);
        return;
    }
    const int64_t rows = numel / shape.back();
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t b = rows * t / nt, e = rows * (t + 1) / nt;
        if (b < e) for_each_strided_rows<N>(shape, strides, base, b, e, inner);
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
