// The Open MPI communicator. Collectives are MPI's blocking ones (Open MPI's non-blocking
// collectives advance only inside MPI_Test and ran 1.6-2.8x slower here); a watchdog thread
// (MPI_THREAD_MULTIPLE) notices a collective that has not returned after timeout_s() and stops
// the job. To name the late rank, every rank > 0 posts a small "arrived at collective k" note to
// rank 0 on a duplicated communicator before each collective; rank 0's watchdog reads them, and on
// a timeout names the ranks whose note for k is missing. Ranks > 0 wait a grace period longer,
// so rank 0's diagnosis normally ends the job first.
//
// A lost rank (killed, crashed, its host gone): mpirun stops the job by SIGTERM (then SIGKILL
// odls_base_sigkill_timeout = 1 s later) to the others, which wait in a collective that cannot
// complete, so the trainer never sees the stop. The watchdog says it instead (lost_rank_line): at
// start every rank learns where the others run (host, boot, PID namespace, PID, start time), and
// each tick the lowest live rank of a machine looks whether a rank of its machine has ended
// (/proc), or, once a SIGTERM came while this rank has been waiting in a collective for
// kLostGraceS since, names the ranks elsewhere it waits for. A rank that stops the job itself
// (abort()) or reports a lost rank tells the others (a note, and a marker file for its machine),
// which then say nothing more.
#include "dist/mpi_communicator.h"

#include "qkv/core/error.h"

#if QKV_HAVE_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#endif

namespace qkv::dist {

#if !QKV_HAVE_MPI
bool built_with_mpi() { return false; }
namespace detail {
std::shared_ptr<Communicator> make_mpi_world() {
    throw Error("this qkv was built without MPI (-DQKV_MPI=ON with libopenmpi-dev installed)");
}
}  // namespace detail
#else
bool built_with_mpi() { return true; }

namespace {

constexpr int kArrivalTag = 7;
/// A rank that stops the job itself (abort()) or reports a lost rank says so to the others first,
/// so that the job's end is explained once.
constexpr int kSpokeTag = 8;
/// Seconds a collective must stay stuck after a SIGTERM before the ranks it waits for are
/// reported lost: the ranks of a job stopped on purpose reach it sooner (they are at most the
/// imbalance of one step apart), and mpirun's SIGKILL comes 1 s after its SIGTERM.
/// Rank 0, which knows who never arrived, goes first; the others after kLostGraceOthersS.
constexpr double kLostGraceS = 0.5, kLostGraceOthersS = 0.8;
/// Seconds the line waits for this rank's checkpoint write under way (a small model's takes
/// milliseconds; mpirun's SIGKILL comes odls_base_sigkill_timeout = 1 s after its SIGTERM).
constexpr double kWriteWaitS = 0.5;
/// Extra seconds ranks > 0 wait past the timeout, so rank 0 (which knows who is missing)
/// reports first.
constexpr double kGraceS = 5.0;
/// How often the watchdog looks (and rank 0 reads arrival notes).
constexpr auto kWatchTick = std::chrono::milliseconds(100);

class MpiWorld;
MpiWorld* g_world = nullptr;
void finalize_at_exit();

/// Where a process runs and which process it is: same `machine` means /proc shows the other's
/// process (same host name, boot and PID namespace); `start` (clock ticks after boot) tells a
/// reused PID from the process.
struct Whereabouts {
    std::string machine, host;
    long pid = 0;
    unsigned long long start = 0;
};

std::string read_first_line(const char* path) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    return line;
}

/// The process's state letter and start time from /proc/PID/stat; false when it is gone.
bool proc_stat(long pid, char& state, unsigned long long& start) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(f, text)) return false;
    const size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) return false;
    std::istringstream rest(text.substr(close + 1));
    std::string field;
    // Fields after the name: 3 state ... 22 starttime.
    for (int i = 3; i <= 22 && rest >> field; ++i) {
        if (i == 3) state = field.empty() ? '?' : field[0];
        if (i == 22) {
            start = std::strtoull(field.c_str(), nullptr, 10);
            return true;
        }
    }
    return false;
}

Whereabouts here() {
    Whereabouts w;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    w.host = host;
    struct stat ns {};
    stat("/proc/self/ns/pid", &ns);
    w.machine = ::qkv::detail::str(host, "|", read_first_line("/proc/sys/kernel/random/boot_id"), "|", ns.st_ino);
    w.pid = static_cast<long>(getpid());
    char state = 0;
    proc_stat(w.pid, state, w.start);
    return w;
}

/// Whether the process `w` (on this machine) still runs: not gone, not a zombie, not a new
/// process with its PID.
bool still_runs(const Whereabouts& w) {
    char state = 0;
    unsigned long long start = 0;
    return proc_stat(w.pid, state, start) && start == w.start && state != 'Z' && state != 'X';
}

class MpiWorld final : public Communicator {
public:
    MpiWorld() {
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited) {
            int provided = 0;
            MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
            QKV_CHECK(provided >= MPI_THREAD_MULTIPLE,
                      "MPI: the library gives thread level ", provided,
                      ", qkv's collective watchdog needs MPI_THREAD_MULTIPLE");
            std::atexit(finalize_at_exit);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        MPI_Comm_dup(MPI_COMM_WORLD, &notes_);
        arrived_.assign(static_cast<size_t>(size_), 0);
        spoke_.assign(static_cast<size_t>(size_), 0);
        gather_whereabouts();
        // Named by rank 0's process, which no other job has: the ranks of a machine see it at once.
        spoke_marker_ = (std::filesystem::temp_directory_path() /
                         ::qkv::detail::str("qkv-mpi-", peers_[0].pid, "-", peers_[0].start, ".spoke"))
                            .string();
        g_world = this;
        watchdog_ = std::thread([this] { watch(); });
    }
    ~MpiWorld() override { stop_watchdog(); }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string backend() const override { return "mpi"; }

    void broadcast(std::span<std::byte> data, int root) override {
        QKV_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " out of range for ",
                  size_, " processes");
        QKV_CHECK(data.size() <= static_cast<size_t>(INT32_MAX), "broadcast: ", data.size(), " bytes is too many");
        run("broadcast", data.size(), [&] {
            return MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, MPI_COMM_WORLD);
        });
    }
    void allreduce_sum(std::span<float> d) override { allreduce(d.data(), d.size(), MPI_FLOAT); }
    void allreduce_sum(std::span<double> d) override { allreduce(d.data(), d.size(), MPI_DOUBLE); }
    void allreduce_sum(std::span<int64_t> d) override { allreduce(d.data(), d.size(), MPI_INT64_T); }

    std::vector<std::string> allgather(const std::string& s) override {
        QKV_CHECK(s.size() <= static_cast<size_t>(INT32_MAX / std::max(size_, 1)), "allgather: string too long");
        int n = static_cast<int>(s.size());
        std::vector<int> lens(static_cast<size_t>(size_));
        run("allgather", 1, [&] { return MPI_Allgather(&n, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD); });
        std::vector<int> displs(static_cast<size_t>(size_));
        int total = 0;
        for (int r = 0; r < size_; ++r) {
            displs[static_cast<size_t>(r)] = total;
            total += lens[static_cast<size_t>(r)];
        }
        std::string all(static_cast<size_t>(total), '\0');
        run("allgather", static_cast<size_t>(total), [&] {
            return MPI_Allgatherv(s.data(), n, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                                  MPI_COMM_WORLD);
        });
        std::vector<std::string> out;
        for (int r = 0; r < size_; ++r)
            out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                     static_cast<size_t>(lens[static_cast<size_t>(r)])));
        return out;
    }

    void reduce_scatter_sum(std::span<float> data, std::span<const int64_t> counts) override {
        const int64_t offset = check_block_counts(*this, data.size(), counts, "reduce_scatter_sum");
        QKV_CHECK(data.size() <= static_cast<size_t>(INT32_MAX), "reduce_scatter_sum: ", data.size(),
                  " elements is too many");
        std::vector<int> recv(counts.begin(), counts.end());
        const size_t mine = static_cast<size_t>(recv[static_cast<size_t>(rank_)]);
        // Out of place: MPI_IN_PLACE would leave the block at the start of the buffer.
        scatter_out_.resize(std::max<size_t>(mine, 1));
        run("reduce_scatter", data.size(), [&] {
            return MPI_Reduce_scatter(data.data(), scatter_out_.data(), recv.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
        std::copy_n(scatter_out_.begin(), mine, data.begin() + offset);
    }

    void allgather_blocks(std::span<float> data, std::span<const int64_t> counts) override {
        check_block_counts(*this, data.size(), counts, "allgather_blocks");
        QKV_CHECK(data.size() <= static_cast<size_t>(INT32_MAX), "allgather_blocks: ", data.size(),
                  " elements is too many");
        std::vector<int> recv(counts.begin(), counts.end()), displs(recv.size());
        for (size_t r = 1; r < recv.size(); ++r) displs[r] = displs[r - 1] + recv[r - 1];
        run("allgather_blocks", data.size(), [&] {
            return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), recv.data(), displs.data(),
                                  MPI_FLOAT, MPI_COMM_WORLD);
        });
    }

    void barrier() override { run("barrier", 0, [&] { return MPI_Barrier(MPI_COMM_WORLD); }); }

    [[noreturn]] void abort(const std::string& message, int code) override {
        mark_spoken();  // the others must not report this rank lost: it says why it stops
        std::fprintf(stderr, "qkv: rank %d: %s\n", rank_, message.c_str());
        std::fflush(stderr);
        tell_others_i_spoke();  // after the message: see say()
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);
    }

    void stop_watchdog() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (quit_) return;
            quit_ = true;
        }
        cv_.notify_all();
        if (watchdog_.joinable()) watchdog_.join();
        for (auto& [req, value] : notes_out_)
            if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);
        notes_out_.clear();
    }

private:
    void allreduce(void* data, size_t n, MPI_Datatype type) {
        // Counts above INT_MAX would need chunking; a model that large is out of scope here.
        QKV_CHECK(n <= static_cast<size_t>(INT32_MAX), "allreduce: ", n, " elements is too many");
        run("allreduce", n, [&] {
            return MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), type, MPI_SUM, MPI_COMM_WORLD);
        });
    }

    void post_arrival(int64_t seq) {
        if (rank_ == 0) return;
        // Notes whose sends completed are dropped; each pending note keeps its own buffer.
        while (!notes_out_.empty()) {
            int done = 0;
            MPI_Test(&notes_out_.front().first, &done, MPI_STATUS_IGNORE);
            if (!done) break;
            notes_out_.pop_front();
        }
        notes_out_.emplace_back(MPI_REQUEST_NULL, std::make_unique<int64_t>(seq));
        auto& [req, value] = notes_out_.back();
        MPI_Isend(value.get(), 1, MPI_INT64_T, 0, kArrivalTag, notes_, &req);
    }

    // Rank 0, watchdog thread.
    void read_arrivals() {
        for (;;) {
            int flag = 0;
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, notes_, &flag, &st);
            if (!flag) return;
            int64_t k = 0;
            MPI_Recv(&k, 1, MPI_INT64_T, st.MPI_SOURCE, kArrivalTag, notes_, MPI_STATUS_IGNORE);
            arrived_[static_cast<size_t>(st.MPI_SOURCE)] = k;
        }
    }

    template <class Call>
    void run(const char* what, size_t count, Call call) {
        int64_t seq = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            seq = ++seq_;
            current_ = what;
            count_ = count;
            since_ = std::chrono::steady_clock::now();
            in_collective_ = true;
        }
        post_arrival(seq);
        const int rc = call();
        {
            std::lock_guard<std::mutex> lock(mu_);
            in_collective_ = false;
        }
        if (rc == MPI_SUCCESS) confirm_pending_checkpoint();
        if (rc != MPI_SUCCESS) abort(::qkv::detail::str(what, " failed (MPI error ", rc, ")"), 3);
    }

    void watch() {
        std::unique_lock<std::mutex> lock(mu_);
        while (!quit_) {
            cv_.wait_for(lock, kWatchTick);
            if (quit_) return;
            if (rank_ == 0) read_arrivals();
            look_for_lost_ranks();
            if (!in_collective_) continue;
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
            if (waited > timeout_s() + (rank_ == 0 ? 0.0 : kGraceS)) {
                if (rank_ == 0) read_arrivals();
                const std::string message = timeout_message(waited);
                read_spoke_notes();
                if (!someone_spoke()) {
                    const std::vector<int> lost = rank_ == 0 ? missing_ranks() : std::vector<int>{0};
                    say(final_lost_line(lost, ::qkv::detail::str("no answer within QKV_DIST_TIMEOUT=", timeout_s(),
                                                                " s in ", current_, " #", seq_)));
                }
                abort(message, 4);
            }
        }
    }

    /// Every rank's Whereabouts (before the watchdog starts; raw MPI: no collective is counted).
    void gather_whereabouts() {
        const Whereabouts me = here();
        const std::string mine = ::qkv::detail::str(me.machine, '\n', me.host, '\n', me.pid, '\n', me.start);
        int n = static_cast<int>(mine.size());
        std::vector<int> lens(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
        MPI_Allgather(&n, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
        int total = 0;
        for (int r = 0; r < size_; ++r) {
            displs[static_cast<size_t>(r)] = total;
            total += lens[static_cast<size_t>(r)];
        }
        std::string all(static_cast<size_t>(total), '\0');
        MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD);
        for (int r = 0; r < size_; ++r) {
            std::istringstream in(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
            Whereabouts w;
            std::string pid, start;
            std::getline(in, w.machine);
            std::getline(in, w.host);
            std::getline(in, pid);
            std::getline(in, start);
            w.pid   = std::strtol(pid.c_str(), nullptr, 10);
            w.start = std::strtoull(start.c_str(), nullptr, 10);
            peers_.push_back(std::move(w));
        }
    }

    void tell_others_i_spoke() {
        static int64_t note = 1;
        for (int r = 0; r < size_; ++r)
            if (r != rank_) {
                MPI_Request req;
                MPI_Isend(&note, 1, MPI_INT64_T, r, kSpokeTag, notes_, &req);
                MPI_Request_free(&req);
            }
    }

    /// Watchdog thread (under mu_): the notes of ranks that explained the job's end.
    void read_spoke_notes() {
        for (;;) {
            int flag = 0;
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, kSpokeTag, notes_, &flag, &st);
            if (!flag) return;
            int64_t k = 0;
            MPI_Recv(&k, 1, MPI_INT64_T, st.MPI_SOURCE, kSpokeTag, notes_, MPI_STATUS_IGNORE);
            spoke_[static_cast<size_t>(st.MPI_SOURCE)] = 1;
        }
    }
    bool someone_spoke() const {
        return std::find(spoke_.begin(), spoke_.end(), 1) != spoke_.end() || ::access(spoke_marker_.c_str(), F_OK) == 0;
    }
    /// The ranks of this machine learn at once (a file) that the job's end was explained; the
    /// notes (MPI) reach the others, unless their connection to this rank was never opened.
    void mark_spoken() const {
        if (std::FILE* f = std::fopen(spoke_marker_.c_str(), "w")) std::fclose(f);
    }

public:
    /// At exit (finalize_at_exit): stops the watchdog and removes the marker of a job that ended
    /// normally (one whose end was explained keeps it: a rank still in the job may look for it).
    void at_exit() {
        stop_watchdog();
        if (!someone_spoke()) std::remove(spoke_marker_.c_str());
    }

private:
    std::string hosts_of(const std::vector<int>& ranks) const {
        std::vector<std::string> hosts;
        for (int r : ranks) {
            const std::string& h = peers_[static_cast<size_t>(r)].host;
            if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
        }
        std::string out;
        for (const std::string& h : hosts) out += (out.empty() ? "" : ", ") + h;
        return out;
    }

    /// The ranks of `elsewhere` on the machines of the ranks rank 0 saw miss the current
    /// collective (a machine's ranks are lost together: its link, its daemon); else all of them.
    std::vector<int> lost_elsewhere(const std::vector<int>& elsewhere) const {
        std::vector<int> lost;
        const std::vector<int> missing = rank_ == 0 ? missing_ranks() : std::vector<int>{};
        for (int r : elsewhere)
            for (int m : missing)
                if (peers_[static_cast<size_t>(m)].machine == peers_[static_cast<size_t>(r)].machine) {
                    lost.push_back(r);
                    break;
                }
        return lost.empty() ? elsewhere : lost;
    }

    /// Rank 0: the ranks whose arrival note for the current collective is missing.
    std::vector<int> missing_ranks() const {
        std::vector<int> out;
        for (int r = 1; r < size_; ++r)
            if (arrived_[static_cast<size_t>(r)] < seq_) out.push_back(r);
        return out;
    }

    /// lost_rank_line() once no checkpoint write can follow it (Communicator::close_checkpoint_writes).
    std::string final_lost_line(const std::vector<int>& lost, const std::string& why) {
        close_checkpoint_writes(kWriteWaitS);
        return lost_rank_line(lost, why);
    }

    void say(const std::string& line) {
        mark_spoken();
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
        // Last: a send towards a lost rank's closed TCP connection may end this process (SIGPIPE).
        tell_others_i_spoke();
    }

    // Watchdog thread, under mu_. See the file's comment.
    void look_for_lost_ranks() {
        // Said (or left to another rank) once. The rank does not end itself: the others on its
        // machine would see a rank end and report it lost; mpirun's SIGKILL ends them all.
        if (job_lost_) return;
        const Whereabouts& me = peers_[static_cast<size_t>(rank_)];
        std::vector<int> ended, elsewhere;
        int lowest_live_here = rank_;
        for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            const Whereabouts& w = peers_[static_cast<size_t>(r)];
            if (w.machine != me.machine) {
                elsewhere.push_back(r);
            } else if (!still_runs(w)) {
                ended.push_back(r);
            } else {
                lowest_live_here = std::min(lowest_live_here, r);
            }
        }
        const auto now = std::chrono::steady_clock::now();
        if (!ended.empty()) {
            read_spoke_notes();
            // A rank that stopped the job itself said why; else the lowest live rank here says it.
            if (!someone_spoke() && lowest_live_here == rank_)
                say(final_lost_line(ended, ::qkv::detail::str(ended.size() == 1 ? "its process" : "their processes", " on ",
                                                             me.host, " ended: killed or crashed")));
            job_lost_ = true;
            return;
        }
        const volatile std::sig_atomic_t* flag = interrupt_flag();
        if (flag == nullptr || *flag != SIGTERM) return;
        if (!term_seen_) {
            term_seen_ = true;
            term_at_   = now;
        }
        if (!in_collective_ || elsewhere.empty()) return;
        const auto stuck_since = std::max(term_at_, since_);
        if (std::chrono::duration<double>(now - stuck_since).count() < (rank_ == 0 ? kLostGraceS : kLostGraceOthersS))
            return;
        read_spoke_notes();
        if (rank_ == 0) read_arrivals();
        job_lost_ = true;
        if (someone_spoke() || lowest_live_here != rank_) {
            close_checkpoint_writes(0);  // another rank's line names the checkpoint
            return;
        }
        const std::vector<int> lost = lost_elsewhere(elsewhere);
        say(final_lost_line(lost, ::qkv::detail::str("on ", hosts_of(lost), ": mpirun is stopping the job while rank ", rank_,
                                                    " waits for ", lost.size() == 1 ? "it" : "them", " in ", current_,
                                                    " #", seq_)));
    }

    std::string timeout_message(double waited) const {
        std::string missing;
        if (rank_ == 0)
            for (int r = 1; r < size_; ++r)
                if (arrived_[static_cast<size_t>(r)] < seq_) missing += ::qkv::detail::str(missing.empty() ? "" : ", ", r);
        const std::string who =
            rank_ != 0       ? "rank 0 did not report the late rank first, so rank 0 itself is likely stuck or dead"
            : missing.empty() ? "every rank arrived; the collective itself stalled"
                              : "rank(s) " + missing + " never reached it: stuck or dead";
        return ::qkv::detail::str(current_, " #", seq_, " (", count_, " elements) did not complete within ",
                                  static_cast<int64_t>(waited), " s (QKV_DIST_TIMEOUT=", timeout_s(), "): ", who,
                                  "; stopping the job");
    }

    int rank_ = 0, size_ = 1;
    std::vector<float> scatter_out_;  // reduce_scatter_sum's block, reused
    MPI_Comm notes_ = MPI_COMM_NULL;
    std::deque<std::pair<MPI_Request, std::unique_ptr<int64_t>>> notes_out_;
    std::vector<int64_t> arrived_;
    std::vector<Whereabouts> peers_;  // by rank
    std::string spoke_marker_;
    // Watchdog thread only.
    std::vector<char> spoke_;         // by rank: explained the job's end (abort(), a lost rank)
    bool job_lost_ = false, term_seen_ = false;
    std::chrono::steady_clock::time_point term_at_;
    // Shared with the watchdog (under mu_).
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false, in_collective_ = false;
    int64_t seq_ = 0;
    const char* current_ = "";
    size_t count_ = 0;
    std::chrono::steady_clock::time_point since_;
    std::thread watchdog_;
};

void finalize_at_exit() {
    if (g_world) g_world->at_exit();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

}  // namespace

namespace detail {
std::shared_ptr<Communicator> make_mpi_world() { return std::make_shared<MpiWorld>(); }
}  // namespace detail
#endif

}  // namespace qkv::dist
