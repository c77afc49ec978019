#pragma once
// Thread control (OpenMP underneath). Kernels parallelise with `#pragma omp parallel for`; this
// header sets how many threads they may use, and also sets oneDNN's (through OpenMP).
#include <cstdint>

namespace qkv {

/// Threads used by qkv kernels (default: OMP_NUM_THREADS or the number of cores).
int get_num_threads();
/// Sets the thread count for every later kernel call (>= 1; throws otherwise).
void set_num_threads(int n);

}  // namespace qkv
