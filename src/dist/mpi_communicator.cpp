// The Open MPI communicator. Each collective is started non-blocking and completed by polling
// MPI_Test, so a rank that never arrives is noticed after timeout_s() instead of blocking
// forever. To name the late rank, every rank > 0 posts a small "arrived at collective k" note to
// rank 0 on a duplicated communicator before each collective; rank 0 reads them while it waits,
// and on a timeout names the ranks whose note for k is missing. Ranks > 0 wait a grace period
// longer, so rank 0's diagnosis normally ends the job first.
#include "dist/mpi_communicator.h"

#include "qkv/core/error.h"

#if QKV_HAVE_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
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

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

class MpiWorld final : public Communicator {
public:
    MpiWorld() {
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited) {
            int provided = 0;
            MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
            QKV_CHECK(provided >= MPI_THREAD_SERIALIZED,
                      "MPI: the library gives thread level ", provided,
                      ", qkv needs MPI_THREAD_SERIALIZED");
            std::atexit(finalize_at_exit);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        MPI_Comm_dup(MPI_COMM_WORLD, &notes_);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        arrived_.assign(static_cast<size_t>(size_), 0);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string backend() const override { return "mpi"; }

    void broadcast(std::span<std::byte> data, int root) override {
        QKV_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " out of range for ",
                  size_, " processes");
        run("broadcast", data.size(), [&](MPI_Request* req) {
            return MPI_Ibcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root,
                              MPI_COMM_WORLD, req);
        });
    }
    void allreduce_sum(std::span<float> d) override { allreduce(d.data(), d.size(), MPI_FLOAT); }
    void allreduce_sum(std::span<double> d) override { allreduce(d.data(), d.size(), MPI_DOUBLE); }
    void allreduce_sum(std::span<int64_t> d) override {
        allreduce(d.data(), d.size(), MPI_INT64_T);
    }

    std::vector<std::string> allgather(const std::string& s) override {
        int n = static_cast<int>(s.size());
        std::vector<int> lens(static_cast<size_t>(size_));
        run("allgather", sizeof(int), [&](MPI_Request* req) {
            return MPI_Iallgather(&n, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, req);
        });
        std::vector<int> displs(static_cast<size_t>(size_));
        int total = 0;
        for (int r = 0; r < size_; ++r) {
            displs[static_cast<size_t>(r)] = total;
            total += lens[static_cast<size_t>(r)];
        }
        std::string all(static_cast<size_t>(total), '\0');
        run("allgather", static_cast<size_t>(total), [&](MPI_Request* req) {
            return MPI_Iallgatherv(s.data(), n, MPI_CHAR, all.data(), lens.data(), displs.data(),
                                   MPI_CHAR, MPI_COMM_WORLD, req);
        });
        std::vector<std::string> out;
        for (int r = 0; r < size_; ++r)
            out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                     static_cast<size_t>(lens[static_cast<size_t>(r)])));
        return out;
    }

    void barrier() override {
        run("barrier", 0, [&](MPI_Request* req) { return MPI_Ibarrier(MPI_COMM_WORLD, req); });
    }

    [[noreturn]] void abort(const std::string& message, int code) override {
        std::fprintf(stderr, "qkv: rank %d: %s\n", rank_, message.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);
    }

private:
    void allreduce(void* data, size_t n, MPI_Datatype type) {
        // Counts above INT_MAX would need chunking; a model that large is out of scope here.
        QKV_CHECK(n <= static_cast<size_t>(INT32_MAX), "allreduce: ", n, " elements is too many");
        run("allreduce", n, [&](MPI_Request* req) {
            return MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), type, MPI_SUM,
                                  MPI_COMM_WORLD, req);
        });
    }

    void post_arrival() {
        if (rank_ == 0) return;
        // Notes whose sends completed are dropped; each pending note keeps its own buffer.
        while (!notes_out_.empty()) {
            int done = 0;
            MPI_Test(&notes_out_.front().first, &done, MPI_STATUS_IGNORE);
            if (!done) break;
            notes_out_.pop_front();
        }
        notes_out_.emplace_back(MPI_REQUEST_NULL, std::make_unique<int64_t>(seq_));
        auto& [req, value] = notes_out_.back();
        MPI_Isend(value.get(), 1, MPI_INT64_T, 0, kArrivalTag, notes_, &req);
    }

    void read_arrivals() {
        if (rank_ != 0) return;
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

    template <class Start>
    void run(const char* what, size_t count, Start start) {
        ++seq_;
        post_arrival();
        MPI_Request req;
        int rc = start(&req);
        if (rc != MPI_SUCCESS) abort(::qkv::detail::str(what, " failed to start (MPI error ", rc, ")"), 3);
        const double limit = timeout_s() + (rank_ == 0 ? 0.0 : kGraceS);
        const auto t0 = std::chrono::steady_clock::now();
        auto pause = std::chrono::microseconds(0);
        for (;;) {
            int done = 0;
            rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) abort(::qkv::detail::str(what, " failed (MPI error ", rc, ")"), 3);
            if (done) break;
            read_arrivals();
            double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (waited > limit) abort(timeout_message(what, count, waited), 4);
            // Spin briefly (gradient buckets complete in microseconds), then back off to 1 ms.
            if (waited > 1e-3) {
                pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(50));
                std::this_thread::sleep_for(pause);
            }
        }
        read_arrivals();
    }

    std::string timeout_message(const char* what, size_t count, double waited) const {
        std::string missing;
        if (rank_ == 0) {
            for (int r = 1; r < size_; ++r)
                if (arrived_[static_cast<size_t>(r)] < seq_)
                    missing += ::qkv::detail::str(missing.empty() ? "" : ", ", r);
        }
        std::string who =
            rank_ != 0 ? "rank 0 did not report the late rank first, so rank 0 itself is likely stuck or dead"
            : missing.empty() ? "every rank arrived; the collective itself stalled"
                              : "rank(s) " + missing + " never reached it: stuck or dead";
        return ::qkv::detail::str(what, " #", seq_, " (", count, " elements) did not complete within ",
                                  static_cast<int64_t>(waited), " s (QKV_DIST_TIMEOUT=", timeout_s(),
                                  "): ", who, "; stopping the job");
    }

    int rank_ = 0, size_ = 1;
    MPI_Comm notes_ = MPI_COMM_NULL;
    int64_t seq_ = 0;
    std::deque<std::pair<MPI_Request, std::unique_ptr<int64_t>>> notes_out_;
    std::vector<int64_t> arrived_;
};

}  // namespace

namespace detail {
std::shared_ptr<Communicator> make_mpi_world() { return std::make_shared<MpiWorld>(); }
}  // namespace detail
#endif

}  // namespace qkv::dist
