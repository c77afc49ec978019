// qkv's default OpenMP wait policy (core/parallel.h). No OpenMP here: the Python package compiles
// this file into a module that does not load libgomp, and calls it before the one that does.
#include <cstdlib>

#include "qkv/core/parallel.h"

namespace qkv {

bool default_to_passive_omp_wait() {
    if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return false;  // the user's choice
    return setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
}

}  // namespace qkv
