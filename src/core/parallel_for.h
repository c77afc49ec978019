#pragma once
// Private helper: a loop split over the OpenMP threads only when that is worth a team.
//
// Why not `#pragma omp parallel for if (cond)`: with `cond` false, or nested inside another
// parallel region, libgomp still starts a team of one thread (nested: a new team every time) and
// wakes it with a futex system call, about 1-4 µs each here. Small ops pay it on every call: a D2L
// training step made ~800 such calls (counted by interposing GOMP_parallel), most of them the
// cross-entropy rows of linear_cross_entropy's own chunks (nested) and Adam on small parameters.
#include <cstdint>

#include <omp.h>

namespace qkv::detail {

/// Whether a loop should start an OpenMP team: the caller judges it worth threads, more than one
/// thread is set (qkv::set_num_threads) and this thread is not already in a parallel region.
inline bool start_team(bool worth_threads) {
    return worth_threads && !omp_in_parallel() && omp_get_max_threads() > 1;
}

/// body(i) for i in [0, n): statically split over the threads when start_team(worth_threads)
/// (the same chunks as `#pragma omp parallel for schedule(static)`), else a plain loop on this
/// thread, without any OpenMP call.
template <class F>
void parallel_for(int64_t n, bool worth_threads, F&& body) {
    if (start_team(worth_threads)) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) body(i);
    } else {
        for (int64_t i = 0; i < n; ++i) body(i);
    }
}

}  // namespace qkv::detail
