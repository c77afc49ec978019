// Thread count control through OpenMP (oneDNN's OpenMP runtime follows omp_set_num_threads).
#include "qkv/core/parallel.h"

#include <omp.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define QKV_HAS_MXCSR 1
#endif

#include "qkv/core/error.h"

namespace qkv {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
    QKV_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
    // libgomp crashes (or aborts) when it cannot create the threads asked for; far more threads
    // than cores only slows every parallel region down, so refuse it with a clear message.
    QKV_CHECK(n <= kMaxThreads, "set_num_threads: ", n, " threads is more than the limit of ", kMaxThreads,
              " (this machine has ", omp_get_num_procs(), " cores)");
    omp_set_num_threads(n);
}

#ifdef QKV_HAS_MXCSR
namespace {
constexpr unsigned kFlushBits = 0x8040u;  // MXCSR bit 15 (FTZ) and bit 6 (DAZ)

void set_mxcsr_flush(bool on) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? (csr | kFlushBits) : (csr & ~kFlushBits));
}
}  // namespace

bool set_flush_denormal(bool on) {
    set_mxcsr_flush(on);
    // Each worker of the pool sets its own register; the pool is as large as the next parallel
    // region's team (omp_get_max_threads), and threads libgomp adds later copy the creator's.
#pragma omp parallel
    set_mxcsr_flush(on);
    return true;
}

bool flush_denormal() { return (_mm_getcsr() & kFlushBits) == kFlushBits; }
#else
bool set_flush_denormal(bool) { return false; }
bool flush_denormal() { return false; }
#endif

}  // namespace qkv
