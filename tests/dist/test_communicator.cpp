// The single-process communicator and the helpers every rank uses (the MPI collectives run under
// mpirun in mpi_probe.cpp / test_mpi.sh).
#include <gtest/gtest.h>

#include <cstdlib>

#include "qkv/core/error.h"
#include "qkv/dist/communicator.h"
#include "support/test_util.h"

namespace qkv {
namespace {

TEST(SingleProcess, CollectivesAreIdentity) {
    auto c = dist::make_single_process();
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    std::vector<float> f{1.5f, -2.f};
    c->allreduce_sum(std::span<float>(f));
    EXPECT_EQ(f, (std::vector<float>{1.5f, -2.f}));
    std::vector<int64_t> i{7};
    c->allreduce_sum(std::span<int64_t>(i));
    EXPECT_EQ(i[0], 7);
    EXPECT_EQ(c->allgather("abc"), std::vector<std::string>{"abc"});
    std::vector<std::byte> b(3, std::byte{9});
    c->broadcast(b, 0);
    EXPECT_EQ(b[2], std::byte{9});
    EXPECT_THROW(c->broadcast(b, 1), Error);
    c->barrier();
    dist::check_same_on_all_ranks(*c, "--data", "anything");  // one rank: nothing to differ
}

TEST(Fingerprint, IsFnv1a) {
    // FNV-1a 64 of "" is the offset basis, of "a" the published test vector.
    EXPECT_EQ(dist::fingerprint(""), 0xcbf29ce484222325ULL);
    EXPECT_EQ(dist::fingerprint("a"), 0xaf63dc4c8601ec8cULL);
    EXPECT_NE(dist::fingerprint("ab"), dist::fingerprint("ba"));
}

TEST(World, WithoutMpirunIsSingleProcess) {
    if (dist::launched_by_mpirun()) GTEST_SKIP() << "run under mpirun";
    auto w = dist::world();
    EXPECT_EQ(w->size(), 1);
    EXPECT_EQ(w->backend(), "single");
    EXPECT_EQ(w.get(), dist::world().get());  // one world per process
}

}  // namespace
}  // namespace qkv
