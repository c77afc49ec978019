#pragma once
// Private: the MPI communicator's factory (mpi_communicator.cpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "qkv/dist/communicator.h"

namespace qkv::dist::detail {
/// MPI_COMM_WORLD; initialises MPI on first call. Throws qkv::Error in a build without MPI.
std::shared_ptr<Communicator> make_mpi_world();
}  // namespace qkv::dist::detail

namespace qkv::dist {
/// Checks a block layout (communicator.h, "Sharded data": one count per rank, none negative,
/// summing to n) naming `who`; returns this rank's block offset. Throws qkv::Error.
int64_t check_block_counts(const Communicator& comm, size_t n, std::span<const int64_t> counts, const char* who);
}  // namespace qkv::dist
