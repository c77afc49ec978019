// The single-process communicator and the helpers every rank uses (the MPI collectives run under
// mpirun in mpi_probe.cpp / test_mpi.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

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

// A communicator of `n` ranks that never communicates: lost_rank_line and the checkpoint notes only.
class FakeWorld final : public dist::Communicator {
public:
    explicit FakeWorld(int n) : n_(n) {}
    int rank() const override { return 0; }
    int size() const override { return n_; }
    std::string backend() const override { return "fake"; }
    void broadcast(std::span<std::byte>, int) override {}
    void allreduce_sum(std::span<float>) override {}
    void allreduce_sum(std::span<double>) override {}
    void allreduce_sum(std::span<int64_t>) override {}
    std::vector<std::string> allgather(const std::string& s) override { return std::vector<std::string>(size_t(n_), s); }
    void barrier() override {}
    [[noreturn]] void abort(const std::string&, int code) override { std::_Exit(code); }
    void collective_completed() { confirm_pending_checkpoint(); }

private:
    int n_;
};

TEST(LostRankLine, NamesTheRanksTheCheckpointAndTheResumeCommand) {
    FakeWorld w(4);
    EXPECT_EQ(w.lost_rank_line({1}, "its process ended"),
              "qkv: rank 1 lost (its process ended); no checkpoint was written yet (nothing to resume)");
    w.set_recovery_hint("qkv train", "qkv train --resume --out 'runs/a b'");
    w.note_checkpoint("runs/a b/checkpoint.safetensors", 16, /*written=*/true);
    EXPECT_EQ(w.lost_rank_line({1}, "its process ended"),
              "qkv train: rank 1 lost (its process ended); the last checkpoint is runs/a b/checkpoint.safetensors "
              "(step 16); resume with: mpirun -np 3 qkv train --resume --out 'runs/a b'");
    EXPECT_EQ(w.lost_rank_line({2, 3}, "host h1"),
              "qkv train: ranks 2, 3 lost (host h1); the last checkpoint is runs/a b/checkpoint.safetensors (step 16); "
              "resume with: mpirun -np 2 qkv train --resume --out 'runs/a b'");
    EXPECT_EQ(w.lost_rank_line({}, "why"),
              "qkv train: a rank was lost (why); the last checkpoint is runs/a b/checkpoint.safetensors (step 16); "
              "resume with: mpirun -np 4 qkv train --resume --out 'runs/a b'");
    // A rank that does not write the checkpoint counts it once its next collective has completed
    // (rank 0 reaches that collective only after the write).
    // Until then both are named: the folder holds one of them.
    w.note_checkpoint("runs/a b/checkpoint.safetensors", 24, /*written=*/false);
    EXPECT_NE(w.lost_rank_line({1}, "x").find("(step 16; step 24 if rank 0 completed writing it)"), std::string::npos);
    w.collective_completed();
    EXPECT_NE(w.lost_rank_line({1}, "x").find("(step 24)"), std::string::npos);
    w.collective_completed();
    EXPECT_NE(w.lost_rank_line({1}, "x").find("(step 24)"), std::string::npos);
    // Never fewer than one rank to resume on; no resume command without a hint.
    FakeWorld two(2);
    two.note_checkpoint("c.safetensors", 3, true);
    EXPECT_EQ(two.lost_rank_line({0, 1}, "all"), "qkv: ranks 0, 1 lost (all); the last checkpoint is c.safetensors (step 3)");
    two.set_recovery_hint("qkv train", "qkv train --resume --out d");
    EXPECT_NE(two.lost_rank_line({0, 1}, "all").find("mpirun -np 1 qkv train"), std::string::npos);
}

// The writer's side: a write under way is named with the one before it; once writes are closed (a
// lost rank reported) none begins, so the line keeps naming the checkpoint in the folder.
TEST(LostRankLine, NoCheckpointIsWrittenAfterTheLineNamedOne) {
    FakeWorld w(2);
    EXPECT_TRUE(w.begin_checkpoint_write("c.safetensors", 6));
    EXPECT_EQ(w.lost_rank_line({1}, "x"),
              "qkv: rank 1 lost (x); the first checkpoint (step 6) was being written to c.safetensors: resume from it "
              "if it is there");
    w.end_checkpoint_write(true);
    EXPECT_EQ(w.lost_rank_line({1}, "x"), "qkv: rank 1 lost (x); the last checkpoint is c.safetensors (step 6)");
    EXPECT_TRUE(w.begin_checkpoint_write("c.safetensors", 12));
    EXPECT_EQ(w.lost_rank_line({1}, "x"),
              "qkv: rank 1 lost (x); the last checkpoint is c.safetensors (step 6; step 12 if rank 0 completed writing it)");
    w.end_checkpoint_write(false);  // a failed write leaves the one before
    EXPECT_EQ(w.lost_rank_line({1}, "x"), "qkv: rank 1 lost (x); the last checkpoint is c.safetensors (step 6)");
    // The watchdog closes writes and waits for the one under way (here: ended by another thread).
    EXPECT_TRUE(w.begin_checkpoint_write("c.safetensors", 18));
    std::thread writer([&] { w.end_checkpoint_write(true); });
    w.close_checkpoint_writes(/*wait_s=*/600);
    writer.join();
    EXPECT_EQ(w.lost_rank_line({1}, "x"), "qkv: rank 1 lost (x); the last checkpoint is c.safetensors (step 18)");
    EXPECT_FALSE(w.begin_checkpoint_write("c.safetensors", 24));
    EXPECT_EQ(w.lost_rank_line({1}, "x"), "qkv: rank 1 lost (x); the last checkpoint is c.safetensors (step 18)");
    // A write that does not end within the wait stays named with both steps.
    FakeWorld slow(2);
    slow.note_checkpoint("c.safetensors", 3, true);
    EXPECT_TRUE(slow.begin_checkpoint_write("c.safetensors", 9));
    slow.close_checkpoint_writes(/*wait_s=*/0);
    EXPECT_NE(slow.lost_rank_line({1}, "x").find("(step 3; step 9 if rank 0 completed writing it)"), std::string::npos);
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
