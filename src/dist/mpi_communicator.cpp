// The Open MPI communicator. Collectives are MPI's blocking ones (Open MPI's non-blocking
// collectives advance only inside MPI_Test and ran 1.6-2.8x slower here); a watchdog thread
// (MPI_THREAD_MULTIPLE) notices a collective that has not returned after timeout_s() and stops
// the job. To name the late rank, every rank > 0 posts a small "arrived at collective k" note to
// rank 0 on a duplicated communicator before each collective; rank 0's watchdog reads them, and on
// a timeout names the ranks whose note for k is missing. Ranks > 0 wait a grace period longer,
// so rank 0's diagnosis normally ends the job first.
#include "dist/mpi_communicator.h"

#include "qkv/core/error.h"

#if QKV_HAVE_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdio>
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
/// Extra seconds ranks > 0 wait past the timeout, so rank 0 (which knows who is missing)
/// reports first.
constexpr double kGraceS = 5.0;
/// How often the watchdog looks (and rank 0 reads arrival notes).
constexpr auto kWatchTick = std::chrono::milliseconds(100);

class MpiWorld;
MpiWorld* g_world = nullptr;
void finalize_at_exit();

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

    void barrier() override { run("barrier", 0, [&] { return MPI_Barrier(MPI_COMM_WORLD); }); }

    [[noreturn]] void abort(const std::string& message, int code) override {
        std::fprintf(stderr, "qkv: rank %d: %s\n", rank_, message.c_str());
        std::fflush(stderr);
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
        if (rc != MPI_SUCCESS) abort(::qkv::detail::str(what, " failed (MPI error ", rc, ")"), 3);
    }

    void watch() {
        std::unique_lock<std::mutex> lock(mu_);
        while (!quit_) {
            cv_.wait_for(lock, kWatchTick);
            if (quit_) return;
            if (rank_ == 0) read_arrivals();
            if (!in_collective_) continue;
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
            if (waited > timeout_s() + (rank_ == 0 ? 0.0 : kGraceS)) {
                if (rank_ == 0) read_arrivals();
                abort(timeout_message(waited), 4);
            }
        }
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
    MPI_Comm notes_ = MPI_COMM_NULL;
    std::deque<std::pair<MPI_Request, std::unique_ptr<int64_t>>> notes_out_;
    std::vector<int64_t> arrived_;
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
    if (g_world) g_world->stop_watchdog();
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
