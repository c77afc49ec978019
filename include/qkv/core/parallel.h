#pragma once
// Thread control (OpenMP underneath). Kernels parallelise with `#pragma omp parallel for`; this
// header sets how many threads they may use, and also sets oneDNN's (through OpenMP).
#include <cstdint>

namespace qkv {

/// Threads used by qkv kernels (default: OMP_NUM_THREADS or the number of cores).
int get_num_threads();
/// Most threads set_num_threads accepts (libgomp crashes when thread creation fails).
inline constexpr int kMaxThreads = 1024;
/// Sets the thread count for every later kernel call. Throws qkv::Error unless
/// 1 <= n <= kMaxThreads.
void set_num_threads(int n);

}  // namespace qkv
