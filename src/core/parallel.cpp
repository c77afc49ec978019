// Thread count control through OpenMP (oneDNN's OpenMP runtime follows omp_set_num_threads).
#include "qkv/core/parallel.h"

#include <omp.h>

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

}  // namespace qkv
