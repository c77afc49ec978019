// Single-process communicator, the factory, fingerprints. The MPI implementation is in
// mpi_communicator.cpp (compiled to a stub that refuses when the build has no MPI).
#include "qkv/dist/communicator.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dist/mpi_communicator.h"
#include "qkv/core/error.h"

namespace qkv::dist {
namespace {

class SingleProcess final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::string backend() const override { return "single"; }
    void broadcast(std::span<std::byte>, int root) override {
        QKV_CHECK(root == 0, "broadcast: root ", root, " out of range for 1 process");
    }
    void allreduce_sum(std::span<float>) override {}
    void allreduce_sum(std::span<double>) override {}
    void allreduce_sum(std::span<int64_t>) override {}
    std::vector<std::string> allgather(const std::string& s) override { return {s}; }
    void reduce_scatter_sum(std::span<float> data, std::span<const int64_t> counts) override {
        check_block_counts(*this, data.size(), counts, "reduce_scatter_sum");
    }
    void allgather_blocks(std::span<float> data, std::span<const int64_t> counts) override {
        check_block_counts(*this, data.size(), counts, "allgather_blocks");
    }
    void barrier() override {}
    [[noreturn]] void abort(const std::string& message, int code) override {
        std::fprintf(stderr, "qkv: %s\n", message.c_str());
        std::fflush(stderr);
        std::_Exit(code);
    }
};

double timeout_from_env() {
    const char* v = std::getenv("QKV_DIST_TIMEOUT");
    if (v == nullptr || *v == '\0') return 600;
    char* end = nullptr;
    errno = 0;
    double s = std::strtod(v, &end);
    QKV_CHECK(errno == 0 && end != v && *end == '\0' && s > 0 && s < 1e9,
              "QKV_DIST_TIMEOUT: expected seconds, more than 0 and less than 1e9 (about 31 years), got '", v, "'");
    return s;
}

}  // namespace

std::unique_ptr<Communicator> make_single_process() { return std::make_unique<SingleProcess>(); }

int64_t check_block_counts(const Communicator& comm, size_t n, std::span<const int64_t> counts, const char* who) {
    QKV_CHECK(counts.size() == static_cast<size_t>(comm.size()), who, ": ", counts.size(), " block counts for ",
              comm.size(), " ranks");
    int64_t total = 0, offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        QKV_CHECK(counts[r] >= 0, who, ": block count ", counts[r], " of rank ", r, " is negative");
        if (static_cast<int>(r) == comm.rank()) offset = total;
        total += counts[r];
    }
    QKV_CHECK(total == static_cast<int64_t>(n), who, ": the block counts sum to ", total, ", the data has ", n,
              " elements");
    return offset;
}

void Communicator::reduce_scatter_sum(std::span<float> data, std::span<const int64_t> counts) {
    check_block_counts(*this, data.size(), counts, "reduce_scatter_sum");
    allreduce_sum(data);
}

void Communicator::allgather_blocks(std::span<float> data, std::span<const int64_t> counts) {
    const int64_t offset = check_block_counts(*this, data.size(), counts, "allgather_blocks");
    const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(rank())]);
    std::fill(data.begin(), data.begin() + offset, 0.f);
    std::fill(data.begin() + offset + static_cast<std::ptrdiff_t>(mine), data.end(), 0.f);
    allreduce_sum(data);
}

void Communicator::set_recovery_hint(std::string prefix, std::string resume_command) {
    std::lock_guard<std::mutex> lock(note_mu_);
    prefix_         = std::move(prefix);
    resume_command_ = std::move(resume_command);
}

void Communicator::note_checkpoint(std::string path, int64_t step, bool written) {
    std::lock_guard<std::mutex> lock(note_mu_);
    if (written) {
        ckpt_path_    = std::move(path);
        ckpt_step_    = step;
        pending_step_ = -1;
    } else {
        pending_path_ = std::move(path);
        pending_step_ = step;
    }
}

bool Communicator::begin_checkpoint_write(std::string path, int64_t step) {
    std::lock_guard<std::mutex> lock(note_mu_);
    if (writes_closed_) return false;
    pending_path_ = std::move(path);
    writing_step_ = step;
    return true;
}

void Communicator::end_checkpoint_write(bool written) {
    {
        std::lock_guard<std::mutex> lock(note_mu_);
        if (written && writing_step_ >= 0) {
            ckpt_path_ = pending_path_;
            ckpt_step_ = writing_step_;
        }
        writing_step_ = -1;
    }
    write_cv_.notify_all();
}

void Communicator::close_checkpoint_writes(double wait_s) {
    std::unique_lock<std::mutex> lock(note_mu_);
    writes_closed_ = true;
    write_cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [this] { return writing_step_ < 0; });
}

void Communicator::confirm_pending_checkpoint() {
    std::lock_guard<std::mutex> lock(note_mu_);
    if (pending_step_ < 0) return;
    ckpt_path_    = std::move(pending_path_);
    ckpt_step_    = pending_step_;
    pending_step_ = -1;
}

void Communicator::watch_interrupt(const volatile std::sig_atomic_t* flag) {
    std::lock_guard<std::mutex> lock(note_mu_);
    interrupt_ = flag;
}

const volatile std::sig_atomic_t* Communicator::interrupt_flag() const {
    std::lock_guard<std::mutex> lock(note_mu_);
    return interrupt_;
}

std::string Communicator::lost_rank_line(const std::vector<int>& lost, const std::string& why) const {
    std::lock_guard<std::mutex> lock(note_mu_);
    std::string who;
    for (size_t i = 0; i < lost.size(); ++i) who += ::qkv::detail::str(i == 0 ? "" : ", ", lost[i]);
    who = lost.empty() ? "a rank was lost" : ::qkv::detail::str(lost.size() == 1 ? "rank " : "ranks ", who, " lost");
    const int remaining = std::max(1, size() - static_cast<int>(lost.size()));
    std::string line = ::qkv::detail::str(prefix_, ": ", who, " (", why, ")");
    // A write that may have completed after this line: rank 0's (pending) or this rank's own.
    const int64_t maybe = writing_step_ >= 0 ? writing_step_ : pending_step_;
    const std::string also = maybe >= 0 && maybe != ckpt_step_
                                 ? ::qkv::detail::str("step ", maybe, " if rank 0 completed writing it")
                                 : "";
    if (ckpt_step_ < 0 && also.empty()) return line + "; no checkpoint was written yet (nothing to resume)";
    if (ckpt_step_ < 0)
        line += ::qkv::detail::str("; the first checkpoint (step ", maybe, ") was being written to ", pending_path_,
                                   ": resume from it if it is there");
    else
        line += ::qkv::detail::str("; the last checkpoint is ", ckpt_path_, " (step ", ckpt_step_,
                                   also.empty() ? "" : "; ", also, ")");
    if (!resume_command_.empty()) line += ::qkv::detail::str("; resume with: mpirun -np ", remaining, " ", resume_command_);
    return line;
}

bool launched_by_mpirun() {
    for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
        if (std::getenv(k) != nullptr) return true;
    return false;
}

int64_t launched_world_size() {
    for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
        if (const char* v = std::getenv(k)) {
            char* end = nullptr;
            const long long n = std::strtoll(v, &end, 10);
            if (end != v && *end == '\0' && n >= 1) return int64_t(n);
        }
    return launched_by_mpirun() ? 0 : 1;
}

namespace {
std::mutex world_mu;
std::shared_ptr<Communicator> the_world;
}  // namespace

std::shared_ptr<Communicator> world_if_started() {
    std::lock_guard<std::mutex> lock(world_mu);
    return the_world;
}

std::shared_ptr<Communicator> world(bool force_mpi) {
    std::lock_guard<std::mutex> lock(world_mu);
    if (the_world) return the_world;
    const double timeout = timeout_from_env();
    if (force_mpi || launched_by_mpirun()) {
        QKV_CHECK(built_with_mpi(),
                  "mpirun needs the MPI build: this qkv was built without Open MPI (install "
                  "libopenmpi-dev and reconfigure with -DQKV_MPI=ON); started as one of several "
                  "processes it would train alone and overwrite the others' files");
        the_world = detail::make_mpi_world();
    } else {
        the_world = make_single_process();
    }
    the_world->set_timeout_s(timeout);
    return the_world;
}

uint64_t fingerprint(std::string_view bytes, uint64_t seed) {
    uint64_t h = seed;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value) {
    if (comm.size() == 1) return;
    const std::vector<std::string> all = comm.allgather(value);
    // Long values are shown around their first difference from rank 0's.
    auto around = [](const std::string& s, size_t at) {
        const size_t from = at > 30 ? at - 30 : 0;
        std::string out = s.substr(from, 70);
        return (from > 0 ? "..." : "") + out + (from + 70 < s.size() ? "..." : "");
    };
    std::string diff;
    for (size_t r = 1; r < all.size() && diff.size() < 600; ++r) {
        if (all[r] == all[0]) continue;
        const auto mm = std::mismatch(all[0].begin(), all[0].end(), all[r].begin(), all[r].end());
        const size_t at = static_cast<size_t>(mm.first - all[0].begin());
        diff += ::qkv::detail::str(diff.empty() ? "" : "; ", "rank ", r, " has '", around(all[r], at),
                                   "' where rank 0 has '", around(all[0], at), "'");
    }
    QKV_CHECK(diff.empty(), "the ranks disagree on ", what, ": ", diff,
              " (every rank must run the same command on the same files)");
}

}  // namespace qkv::dist
