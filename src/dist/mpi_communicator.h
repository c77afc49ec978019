#pragma once
// Private: the MPI communicator's factory (mpi_communicator.cpp).
#include <memory>

#include "qkv/dist/communicator.h"

namespace qkv::dist::detail {
/// MPI_COMM_WORLD; initialises MPI on first call. Throws qkv::Error in a build without MPI.
std::shared_ptr<Communicator> make_mpi_world();
}  // namespace qkv::dist::detail
