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

/// qkv's OpenMP default: passive waiting. Sets OMP_WAIT_POLICY=passive in this process's
/// environment unless the user has set OMP_WAIT_POLICY or GOMP_SPINCOUNT (their choice is kept);
/// returns true when it set it. Why: libgomp's default has idle threads spin at every barrier,
/// and spinning threads starve the working ones when the cores are shared (other processes, two
/// qkv calls, ctest -j): the same work then takes several times longer.
/// The OpenMP runtime reads its environment once, when it is loaded, so this must run before that:
/// the qkv program calls it first and re-executes itself; the Python package calls it from a
/// module that does not load libgomp (qkv._openmp) before importing the one that does (qkv._qkv).
/// Calls setenv: not thread-safe. Does not throw.
bool default_to_passive_omp_wait();

/// Flush-to-zero and denormals-are-zero for float arithmetic on the calling thread and on every
/// OpenMP worker thread (threads created later inherit it from the thread that creates them).
/// With `on`, a subnormal result (|x| < 1.18e-38 in float32, < 2.2e-308 in float64) becomes ±0
/// and a subnormal operand reads as ±0; with `!on`, IEEE 754 gradual underflow (the default).
///
/// Why: x86 cores take a microcode assist of about a hundred cycles per subnormal operand or
/// result. Peaked softmax rows give attention probabilities and their gradients in the subnormal
/// range (exp(s) below e^-87); in the anchor Transformer's encoder about 4 % of dQ/dK/dV were
/// subnormal, and the GEMMs reading them ran 8× slower (bench/RESULTS_avx512.md §15).
/// PyTorch's torch.set_flush_denormal(bool) does the same; TensorFlow flushes by default.
/// The qkv program flushes unless given `--denormals keep`; the library leaves the default alone.
///
/// Returns true when the CPU supports it (x86-64 with SSE); false, changing nothing, elsewhere.
/// Does not throw. Call it outside any parallel region.
bool set_flush_denormal(bool on);

/// True when the calling thread flushes subnormals (both FTZ and DAZ set); false otherwise.
bool flush_denormal();

}  // namespace qkv
