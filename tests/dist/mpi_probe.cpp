// Run under `mpirun -np N` by test_mpi.sh. Modes:
//   collectives  every collective against its closed form; prints "rank R: ok" (exit 1 on a
//                mismatch)
//   mismatch     check_same_on_all_ranks with a value that differs on rank 1: must throw on
//                every rank; prints the message
//   hang         rank 1 sleeps far longer than QKV_DIST_TIMEOUT before its allreduce: the job
//                must stop by itself (MPI_Abort) with a message naming rank 1
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/dist/communicator.h"

using namespace qkv;

static int fail(int rank, const std::string& what) {
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    return 1;
}

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "collectives";
    auto w = dist::world(/*force_mpi=*/true);
    const int r = w->rank(), n = w->size();
    if (mode == "collectives") {
        // Sums of small integers are exact in fp32, so the expected values are exact too.
        std::vector<float> f(1000);
        for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + 1) * static_cast<float>(i);
        w->allreduce_sum(std::span<float>(f));
        const float tri = static_cast<float>(n * (n + 1) / 2);
        for (size_t i = 0; i < f.size(); ++i)
            if (f[i] != tri * static_cast<float>(i)) return fail(r, "allreduce float at " + std::to_string(i));
        std::vector<double> d{0.25 * r};
        w->allreduce_sum(std::span<double>(d));
        if (d[0] != 0.25 * (n * (n - 1) / 2)) return fail(r, "allreduce double");
        std::vector<int64_t> k{int64_t{1} << 40, r};
        w->allreduce_sum(std::span<int64_t>(k));
        if (k[0] != n * (int64_t{1} << 40) || k[1] != n * (n - 1) / 2) return fail(r, "allreduce int64");
        std::vector<std::byte> b(17, std::byte(r == n - 1 ? 42 : 0));
        w->broadcast(b, n - 1);
        for (auto x : b)
            if (x != std::byte(42)) return fail(r, "broadcast");
        auto all = w->allgather(std::string(static_cast<size_t>(r), 'x'));
        if (static_cast<int>(all.size()) != n) return fail(r, "allgather size");
        for (int q = 0; q < n; ++q)
            if (all[static_cast<size_t>(q)] != std::string(static_cast<size_t>(q), 'x')) return fail(r, "allgather value");
        w->barrier();
        dist::check_same_on_all_ranks(*w, "--data", "same");
        std::printf("rank %d of %d: ok\n", r, n);
        return 0;
    }
    if (mode == "mismatch") {
        try {
            dist::check_same_on_all_ranks(*w, "--data", r == 1 ? "file-b" : "file-a");
        } catch (const Error& e) {
            std::printf("rank %d: refused: %s\n", r, e.what());
            return 0;
        }
        return fail(r, "a differing value was accepted");
    }
    if (mode == "hang") {
        if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
        std::vector<float> f(10, 1.f);
        w->allreduce_sum(std::span<float>(f));
        return fail(r, "the allreduce completed although rank 1 was asleep");
    }
    return fail(r, "unknown mode " + mode);
}
