// Run under `mpirun -np N` by test_mpi.sh. Modes:
//   collectives  every collective against its closed form; prints "rank R: ok" (exit 1 on a
//                mismatch)
//   mismatch     check_same_on_all_ranks with a value that differs on rank 1: must throw on
//                every rank; prints the message
//   grad_sync    GradientReducer on a tiny Transformer's shares of one batch: overlapped and
//                after-backward reductions give the same gradients (bitwise with 2 ranks), equal
//                to the whole batch's gradient computed in one process
//   train DIR STEPS RESUME OVERLAP DROPOUT [SHARD]
//                a tiny Transformer trained data-parallel (Trainer with TrainRuntime::comm) to
//                STEPS steps into DIR (RESUME 1: from DIR's checkpoint; SHARD 1: Adam's state
//                sharded over the ranks, TrainOptions::shard_optimizer); rank 0 prints
//                "loss STEP VALUE" per step (%.9g) for test_mpi.sh to compare across world sizes,
//                every rank "rank R optimizer state B of T bytes" (its moments, Adam's whole) on
//                stderr; SIGINT/SIGTERM stop it at a step boundary, as qkv train
//   bench_allreduce FLOATS [SMALL_FLOATS]
//                median time of an fp32 all-reduce, mean of back-to-back small ones
//                (bench/netns_comm.sh); not a test
//   hang         rank 1 sleeps far longer than QKV_DIST_TIMEOUT before its allreduce: the job
//                must stop by itself (MPI_Abort) with a message naming rank 1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/dist/communicator.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/loss.h"
#include "qkv/train/trainer.h"
#include "qkv/core/generator.h"
#include "qkv/util/interrupt.h"
#include "train/tiny_corpus.h"

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
    if (mode == "grad_sync") {
        auto c = test::tiny_corpus();
        data::BatcherOptions bo;
        bo.batch_size = 8;
        bo.shuffle = false;
        data::Batcher batcher(c.arrays, bo);
        batcher.start_epoch(0);
        const data::Batch b = batcher.batch(0);
        default_generator().manual_seed(5);
        models::Transformer m(test::tiny_config(c));
        const auto params = m.parameters();
        train::Seq2SeqLossOptions lo;
        lo.pad = c.tgt_vocab.pad();
        int64_t total = 0;
        for (int64_t v : b.tgt_valid_len) total += v;
        auto loss_of = [&](const data::Batch& x) {
            train::BatchTensors t = train::to_tensors(x);
            return train::seq2seq_loss(m, t.src, t.src_valid_len, t.dec_input, t.label, lo);
        };
        auto grads = [&] {
            std::vector<std::vector<float>> g;
            for (auto& p : params) g.push_back(p.grad().contiguous().to_vector<float>());
            return g;
        };
        auto clear = [&] { for (auto& p : params) Tensor(p).reset_grad(); };
        clear();
        loss_of(b).loss.backward();
        const auto full = grads();
        const data::Batch s = train::shard_batch(b, r, n);
        int64_t mine = 0;
        for (int64_t v : s.tgt_valid_len) mine += v;
        std::vector<std::vector<std::vector<float>>> got;
        for (bool overlap : {true, false}) {
            train::GradientReducerOptions so;
            so.overlap = overlap;
            so.first_bucket_bytes = 4096;  // several buckets even for this tiny model
            so.bucket_bytes = 16384;
            train::GradientReducer sync(w, params, so);
            if (overlap && sync.num_buckets() < 3) return fail(r, "expected several buckets");
            clear();
            std::vector<double> scalars{double(mine)};
            sync.backward_and_sync([&] { if (s.size > 0) loss_of(s).loss.backward(); }, double(mine), double(total), scalars);
            if (scalars[0] != double(total)) return fail(r, "scalars not summed");
            got.push_back(grads());
        }
        for (size_t i = 0; i < full.size(); ++i) {
            float scale = 0;
            for (float e : full[i]) scale = std::max(scale, std::abs(e));
            for (size_t j = 0; j < full[i].size(); ++j) {
                if (n == 2 && got[0][i][j] != got[1][i][j]) return fail(r, "overlap differs from after-backward");
                // As test_data_parallel's identity: a few ulp of the largest term; 1e-5 is 100x.
                if (std::abs(got[0][i][j] - full[i][j]) > 1e-5f * scale + 1e-7f)
                    return fail(r, "parameter " + std::to_string(i) + " differs from the whole batch's gradient");
            }
        }
        std::printf("rank %d of %d: grad_sync ok (%lld of %lld tokens)\n", r, n, (long long)mine, (long long)total);
        return 0;
    }
    if (mode == "bench_allreduce") {
        // Median time of an fp32 all-reduce of argv[2] floats over 30 calls (bench/RESULTS.md's
        // check of the communication model), each after a barrier; then, if argv[3] is given,
        // the mean time of 100 back-to-back all-reduces of that many floats (a small message:
        // the latency term; back to back, so that the ranks' skew leaving a barrier, itself
        // about one message latency, does not hide in it). Not a test.
        const size_t count = argc > 2 ? std::stoul(argv[2]) : 1u << 20;
        std::vector<float> f(count, 1.f);
        std::vector<double> t;
        for (int i = 0; i < 33; ++i) {
            w->barrier();
            auto t0 = std::chrono::steady_clock::now();
            w->allreduce_sum(std::span<float>(f));
            t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin() + 3, t.end());
        if (r == 0)
            std::printf("allreduce of %zu floats (%.1f MiB) over %d ranks: median %.3f ms\n", count,
                        double(count) * 4 / 1048576.0, n, t[3 + 15] * 1e3);
        if (argc > 3) {
            std::vector<float> g(std::stoul(argv[3]), 1.f);
            w->allreduce_sum(std::span<float>(g));  // warm-up: connections made
            w->barrier();
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 100; ++i) w->allreduce_sum(std::span<float>(g));
            const double each = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100;
            if (r == 0)
                std::printf("allreduce of %zu floats, 100 back to back over %d ranks: mean %.3f ms\n", g.size(), n,
                            each * 1e3);
        }
        return 0;
    }
    if (mode == "train") {
        if (argc < 7) return fail(r, "train DIR STEPS RESUME OVERLAP DROPOUT");
        auto c = test::tiny_corpus();
        manual_seed(11);
        models::Transformer m(test::tiny_config(c, std::stod(argv[6])));
        train::TrainOptions o;
        o.max_steps = std::stoll(argv[3]);
        o.epochs = std::max<int64_t>(100, o.max_steps);
        o.batch_size = 5;  // 8 pairs: batches of 5 and 3, so shares differ in size
        o.val_batch_size = 3;  // validation batches of 3, 3 and 2: rank 0 of 2 gets two, rank 1 one
        o.shard_optimizer = argc > 7 && std::string(argv[7]) == "1";
        train::TrainRuntime rt;
        rt.out_dir = argv[2];
        rt.resume = std::string(argv[4]) == "1";
        rt.progress = false;
        rt.log = nullptr;
        rt.log_every = 1;
        rt.comm = w;
        // SIGTERM as qkv train takes it (a flag): mpirun's SIGTERM to the rank left when another
        // dies must not end it before its watchdog has said which rank was lost.
        util::InterruptGuard guard;
        rt.interrupt = guard.flag();
        rt.reduce.overlap = std::string(argv[5]) == "1";
        rt.reduce.first_bucket_bytes = 4096;
        rt.reduce.bucket_bytes = 16384;
        train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
        const train::TrainResult res = t.fit();
        if (r == 0) {
            for (size_t i = 0; i < res.step_losses.size(); ++i)
                std::printf("loss %lld %.9g\n", (long long)(res.first_step + int64_t(i) + 1), res.step_losses[i]);
            for (const auto& e : res.epochs) std::printf("val %lld %.12g\n", (long long)e.step, e.val_loss);
        }
        std::fflush(stdout);
        w->barrier();  // rank 0's lines first
        std::fprintf(stderr, "rank %d evaluated %lld validation batches\n", r, (long long)t.eval_batches());
        int64_t whole = 0;  // Adam's moments, unsharded: 2 fp32 per parameter element
        for (const Tensor& p : m.parameters()) whole += 2 * p.numel() * int64_t(sizeof(float));
        std::fprintf(stderr, "rank %d optimizer state %lld of %lld bytes\n", r, (long long)res.optimizer_state_bytes,
                     (long long)whole);
        return 0;
    }
    if (mode == "hang") {
        if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
        std::vector<float> f(10, 1.f);
        w->allreduce_sum(std::span<float>(f));
        return fail(r, "the allreduce completed although rank 1 was asleep");
    }
    return fail(r, "unknown mode " + mode);
}
