#pragma once
// Communication between the processes of a data-parallel run (one model, N processes, each on a
// share of every global batch; PyTorch DDP, Marian's multi-node training). The interface is the
// collectives data parallelism needs; the MPI implementation runs them on Open MPI, the
// single-process one is the identity, so code written against Communicator runs unchanged with
// or without `mpirun`.
//
// Every rank must call the collectives in the same order with the same sizes (the MPI rule).
// Reductions are sums in a fixed order for a given world size (MPI_Allreduce with the same
// message sizes picks the same algorithm on every call), so a run is reproducible for a given N;
// across different N the sum's rounding differs (fp32: about N ulp of the largest term).
//
// Faults: a collective that does not complete within timeout_s() (QKV_DIST_TIMEOUT, seconds)
// stops the whole job (MPI_Abort) with a message naming the ranks that never arrived, as seen
// by rank 0; a rank that dies is reported by mpirun itself ("process rank R ... exited on
// signal 9") and the job ends. Neither ever waits forever. In every case one surviving rank also
// prints lost_rank_line(): which rank was lost, the last checkpoint and the command that resumes
// it (docs/distributed.md, "Losing a rank or a host").
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace qkv::dist {

/// One process's view of the job. Not thread-safe: one thread at a time calls a communicator.
class Communicator {
public:
    virtual ~Communicator() = default;
    /// 0-based index of this process; 0 writes files and prints the run's messages.
    virtual int rank() const = 0;
    /// Processes in the job (1 without mpirun).
    virtual int size() const = 0;
    /// "mpi" or "single".
    virtual std::string backend() const = 0;

    /// Copies root's `data` into every rank's `data` (same byte count on every rank).
    virtual void broadcast(std::span<std::byte> data, int root) = 0;
    /// Replaces `data` on every rank by the element-wise sum over ranks.
    virtual void allreduce_sum(std::span<float> data) = 0;
    virtual void allreduce_sum(std::span<double> data) = 0;
    virtual void allreduce_sum(std::span<int64_t> data) = 0;
    /// Returns every rank's `s`, indexed by rank (strings may differ in length).
    virtual std::vector<std::string> allgather(const std::string& s) = 0;

    // ---- Sharded data (ZeRO, train/data_parallel.h ZeroRedundancyAdam) ----
    // `counts` (size() entries, >= 0, summing to data.size(), the same on every rank) cuts `data`
    // into blocks in rank order: rank r's block is [offset(r), offset(r) + counts[r]), offset(r) =
    // counts[0] + ... + counts[r-1]. Both throw qkv::Error on counts that do not fit.
    /// Reduce-scatter (MPI_Reduce_scatter): rank r's block of `data` becomes the element-wise sum
    /// over ranks of that block; the rest of `data` is unspecified afterwards. The sum is the same
    /// kind of fixed-order sum as allreduce_sum (bitwise equal to it with 2 ranks: a + b = b + a).
    /// The base implementation all-reduces the whole of `data` (a communicator without a native
    /// one); the MPI one moves 1/N of it per rank.
    virtual void reduce_scatter_sum(std::span<float> data, std::span<const int64_t> counts);
    /// All-gather in place (MPI_Allgatherv, MPI_IN_PLACE): every rank's `data` receives rank r's
    /// block from rank r, for every r; this rank's own block is kept. The base implementation
    /// zeroes the other blocks and all-reduces (exact: x + 0 = x).
    virtual void allgather_blocks(std::span<float> data, std::span<const int64_t> counts);
    /// Returns once every rank has called it.
    virtual void barrier() = 0;
    /// Ends every process of the job with exit code `code` after printing `message` (prefixed
    /// "qkv: rank R: ") on stderr. Single process: prints and exits.
    [[noreturn]] virtual void abort(const std::string& message, int code) = 0;

    /// Seconds a collective may wait before the job is stopped (QKV_DIST_TIMEOUT, default 600).
    double timeout_s() const { return timeout_s_; }
    void set_timeout_s(double s) { timeout_s_ = s; }

    // ---- What the job says when it is lost (the collective watchdog prints it) ----
    /// `prefix` starts the line ("qkv train"); `resume_command` is the command that continues
    /// the run, without the launcher ("qkv train --resume --out runs/x"); "" leaves the resume
    /// part out. Thread-safe (the watchdog thread reads it).
    void set_recovery_hint(std::string prefix, std::string resume_command);
    /// Records that the checkpoint `path` holds step `step`. `written` says it is on disk (the
    /// rank that wrote it, or a resumed run that read it); a rank that only knows rank 0 is
    /// writing it passes false, and the checkpoint counts once this rank's next collective has
    /// completed (rank 0 reaches it only after the write). Thread-safe.
    void note_checkpoint(std::string path, int64_t step, bool written);
    /// The writer (rank 0) brackets each checkpoint write: begin returns false, and the write must
    /// be skipped, once close_checkpoint_writes() has run, so the checkpoint a lost-rank line names
    /// stays the one in the folder (a survivor keeps computing until its next collective, and
    /// would otherwise write a newer one after the line). end(true) records the write as on disk;
    /// end(false): it failed. Thread-safe.
    bool begin_checkpoint_write(std::string path, int64_t step);
    void end_checkpoint_write(bool written);
    /// Refuses later checkpoint writes and waits up to `wait_s` seconds for one under way (mpirun's
    /// SIGKILL follows its SIGTERM within about a second, so the wait is short). The watchdog calls
    /// it before lost_rank_line(). Thread-safe.
    void close_checkpoint_writes(double wait_s);
    /// A SIGINT/SIGTERM flag (util::InterruptGuard::flag()) the watchdog reads: mpirun stops a
    /// job whose rank died by SIGTERM to the others, which then wait in a collective that cannot
    /// complete. nullptr: none. The flag must outlive the communicator's use of it.
    void watch_interrupt(const volatile std::sig_atomic_t* flag);
    /// The one line said when ranks `lost` (0-based; may be empty: not known which) of this
    /// job are gone, `why` in parentheses: "qkv train: rank 1 lost (its process ended); the last
    /// checkpoint is runs/x/checkpoint.safetensors (step 40); resume with: mpirun -np 1 qkv train
    /// --resume --out runs/x" (-np: size() less the lost ranks, at least 1), or "...; no
    /// checkpoint was written yet (nothing to resume)". A checkpoint whose write may or may not
    /// have completed (this rank's write still under way, or rank 0's not yet confirmed by a
    /// collective) is named with both steps: "(step 40; step 48 if rank 0 completed writing it)".
    /// No newline.
    std::string lost_rank_line(const std::vector<int>& lost, const std::string& why) const;

protected:
    /// For run(): promotes a checkpoint noted with written=false (this rank's collective completed).
    void confirm_pending_checkpoint();
    const volatile std::sig_atomic_t* interrupt_flag() const;

    double timeout_s_ = 600;

private:
    mutable std::mutex note_mu_;
    std::string prefix_ = "qkv", resume_command_;
    std::string ckpt_path_, pending_path_;
    int64_t ckpt_step_ = -1, pending_step_ = -1;
    int64_t writing_step_ = -1;   // this rank's write under way
    bool writes_closed_ = false;  // close_checkpoint_writes() ran
    std::condition_variable write_cv_;
    const volatile std::sig_atomic_t* interrupt_ = nullptr;
};

/// The process alone (rank 0 of 1): collectives return their input.
std::unique_ptr<Communicator> make_single_process();

/// Whether this build has the MPI implementation (CMake option QKV_MPI, Open MPI found).
bool built_with_mpi();

/// Whether this process was started by mpirun/mpiexec (Open MPI's or a PMI launcher's
/// environment variables), whatever the build.
bool launched_by_mpirun();

/// The number of processes the launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE, ...), without
/// initialising MPI: 1 when not launched by mpirun, 0 when launched but the size is not given.
int64_t launched_world_size();

/// The communicator for this process: MPI when launched by mpirun with world size > 1 or when
/// `force_mpi`, else the single process. Initialises MPI once (MPI_THREAD_MULTIPLE, for the collective watchdog thread);
/// MPI_Finalize runs at exit. Throws qkv::Error when launched by mpirun but the build has no MPI
/// ("mpirun needs the MPI build: ...") — N copies of a single-process run would each train
/// alone and overwrite each other's files. QKV_DIST_TIMEOUT (seconds > 0) sets timeout_s();
/// a malformed value throws naming the variable.
std::shared_ptr<Communicator> world(bool force_mpi = false);

/// The communicator world() made, or nullptr when nothing has called world() yet (it starts
/// nothing). The qkv program's error exit uses it to stop the other ranks of a job.
std::shared_ptr<Communicator> world_if_started();

/// Stable 64-bit FNV-1a hash of bytes, for comparing data and configuration across ranks.
uint64_t fingerprint(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);

/// Compares `value` (e.g. a configuration's JSON text, or a data fingerprint in hex) over all
/// ranks; throws qkv::Error on every rank naming `what` and the ranks whose value differs from
/// rank 0's, each shown around the first difference, e.g. "the ranks disagree on --data: rank 1
/// has 'b.tsv' where rank 0 has 'a.tsv' (every rank must run the same command on the same files)".
void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value);

}  // namespace qkv::dist
