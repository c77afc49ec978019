// Thread count control through OpenMP (oneDNN's OpenMP runtime follows omp_set_num_threads).
#include "qkv/core/parallel.h"

#include <omp.h>

#include "qkv/core/error.h"

namespace qkv {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
    QKV_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
    omp_set_num_threads(n);
}

}  // namespace qkv
