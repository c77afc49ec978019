#pragma once
// Private: argmax's choice rule, the one definition that argmax, max, argmax_allowed, every
// path of linear_argmax (hence greedy decoding) and the kernels of cpu/argmax.h follow.
#include <cstdint>

namespace qkv::detail {

/// Is value v at index i a better argmax than (best, bi)? The order: a NaN above everything (the
/// first NaN wins), then larger values, ties to the smaller index; bi < 0 means "nothing yet".
/// Indices may be seen in any order (linear_argmax merges column blocks and threads).
template <class T>
inline bool argmax_better(T v, int64_t i, T best, int64_t bi) {
    if (bi < 0) return true;
    const bool vn = v != v, bn = best != best;
    if (vn || bn) return vn && (!bn || i < bi);
    return v > best || (v == best && i < bi);
}

/// The argmax_better winner of row[0, n), skipping each j with banned != nullptr and banned[j]
/// != 0; -1 when every index is banned.
template <class T>
int64_t row_argmax(const T* row, int64_t n, const char* banned) {
    T best = T(0);
    int64_t bi = -1;
    for (int64_t j = 0; j < n; ++j) {
        if (banned && banned[j]) continue;
        if (argmax_better(row[j], j, best, bi)) best = row[j], bi = j;
    }
    return bi;
}

}  // namespace qkv::detail
