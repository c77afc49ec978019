// One training step of D2L's Transformer (256 hiddens, 2 blocks, 4 heads, FFN 64, dropout 0.2,
// batch 128 × 9 tokens, Adam lr 0.0015, clip 1, masked loss) on random token ids, the same work
// as /work/shared/bench/d2l_transformer_bench.py (PyTorch). Cases: vocabularies 194/214 and
// 10000/10000. Counters: ms/step and target positions/s (B·T per step, the PyTorch script's
// "tokens/s") and real target tokens/s (non-pad labels).
// Run: build/bench/bench_train_step [--threads N] [--denormals flush|keep] [--full-model] [--profile]
//   [google-benchmark flags]. --denormals: flush (default, as the qkv program) or keep subnormals.
//   --full-model: blocks on all B·T positions (forward_hidden + seq2seq_loss on its output);
//   default: seq2seq_loss from the inputs, whose forward_hidden_rows skips <pad> positions.
//   --profile: instead of benchmarks, time the phases of 40 steps (forward, loss, backward,
//   clip, Adam) with wall-clock timers and print a table.
// Results: bench/RESULTS_train.md (side by side with PyTorch: bench/train_step_side_by_side.sh).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/ops/precision.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/models/transformer.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/loss.h"
#include "qkv/util/timer.h"
#include "isa_cap.h"

namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;
constexpr int64_t kBatch = 128, kSteps = 9;
/// --full-model: run every block on all B·T positions (forward_hidden), as before the pad-free
/// path; default: seq2seq_loss from the inputs (forward_hidden_rows skips <pad> positions).
bool full_model = false;

struct Batch {
    qkv::Tensor src, src_valid_len, dec_input, label;
    int64_t tokens = 0;
};

/// The PyTorch script's layout: lengths in [3, T] including <eos>, random ids >= 3, then pads;
/// decoder input = <bos> + label[:-1].
Batch random_batch(int64_t src_vocab, int64_t tgt_vocab, qkv::Generator& g) {
    auto seq = [&](int64_t vocab, std::vector<int64_t>& ids, std::vector<int64_t>& lens) {
        ids.assign(size_t(kBatch * kSteps), kPad);
        lens.resize(size_t(kBatch));
        for (int64_t b = 0; b < kBatch; ++b) {
            const int64_t len = 3 + int64_t(g.randint(uint64_t(kSteps - 2)));
            lens[size_t(b)] = len;
            for (int64_t t = 0; t < len - 1; ++t) ids[size_t(b * kSteps + t)] = 3 + int64_t(g.randint(uint64_t(vocab - 3)));
            ids[size_t(b * kSteps + len - 1)] = kEos;
        }
    };
    std::vector<int64_t> src, slen, tgt, tlen;
    seq(src_vocab, src, slen);
    seq(tgt_vocab, tgt, tlen);
    std::vector<int64_t> dec(tgt.size());
    for (int64_t b = 0; b < kBatch; ++b) {
        dec[size_t(b * kSteps)] = kBos;
        for (int64_t t = 1; t < kSteps; ++t) dec[size_t(b * kSteps + t)] = tgt[size_t(b * kSteps + t - 1)];
    }
    Batch out;
    out.src = qkv::from_vector(src, {kBatch, kSteps});
    out.src_valid_len = qkv::from_vector(slen, {kBatch});
    out.dec_input = qkv::from_vector(dec, {kBatch, kSteps});
    out.label = qkv::from_vector(tgt, {kBatch, kSteps});
    for (int64_t l : tlen) out.tokens += l;
    return out;
}

struct Setup {
    std::unique_ptr<qkv::models::Transformer> model;
    std::unique_ptr<qkv::optim::Adam> adam;
    std::vector<qkv::Tensor> params;
    std::vector<Batch> batches;
    qkv::train::Seq2SeqLossOptions lo;
    Setup(int64_t sv, int64_t tv) {
        qkv::manual_seed(0);
        qkv::models::TransformerConfig c;
        c.src_vocab_size = sv, c.tgt_vocab_size = tv;
        c.num_hiddens = 256, c.num_blks = 2, c.num_heads = 4, c.ffn_num_hiddens = 64, c.dropout = 0.2;
        model = std::make_unique<qkv::models::Transformer>(c);
        model->train();
        params = model->parameters();
        adam = std::make_unique<qkv::optim::Adam>(params, 0.0015);
        qkv::Generator g(0);
        for (int i = 0; i < 4; ++i) batches.push_back(random_batch(sv, tv, g));
        lo.pad = kPad;
    }
    double step(const Batch& b) {
        auto l = full_model ? qkv::train::seq2seq_loss(*model, model->forward_hidden(b.src, b.src_valid_len, b.dec_input),
                                                       b.label, lo)
                            : qkv::train::seq2seq_loss(*model, b.src, b.src_valid_len, b.dec_input, b.label, lo);
        adam->zero_grad();
        l.loss.backward();
        qkv::optim::clip_grad_norm(params, 1.0);
        adam->step();
        return l.loss.item();
    }
};

void BM_train_step(benchmark::State& st) {
    Setup s(st.range(0), st.range(1));
    for (int i = 0; i < 10; ++i) s.step(s.batches[size_t(i % 4)]);  // warm-up (allocator, JIT)
    int64_t i = 0, tokens = 0;
    for (auto _ : st) {
        const Batch& b = s.batches[size_t(i++ % 4)];
        benchmark::DoNotOptimize(s.step(b));
        tokens += b.tokens;
    }
    st.counters["ms/step"] = benchmark::Counter(1e3 * double(st.iterations()),
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    st.counters["positions/s"] = benchmark::Counter(double(kBatch * kSteps), benchmark::Counter::kIsIterationInvariantRate);
    st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_train_step)->Args({194, 214})->Args({10000, 10000})->Unit(benchmark::kMillisecond)->UseRealTime()
    ->Apply(bench_default_min_time<5000>);

/// Phase timers over 40 steps (after 10 warm-up steps).
void profile(int64_t sv, int64_t tv) {
    Setup s(sv, tv);
    for (int i = 0; i < 10; ++i) s.step(s.batches[size_t(i % 4)]);
    double t_fwd = 0, t_loss = 0, t_bwd = 0, t_clip = 0, t_adam = 0;
    const int n = 40;
    qkv::util::Timer total;
    for (int i = 0; i < n; ++i) {
        const Batch& b = s.batches[size_t(i % 4)];
        qkv::util::Timer t;
        qkv::train::Seq2SeqLoss l;
        if (full_model) {
            qkv::Tensor h = s.model->forward_hidden(b.src, b.src_valid_len, b.dec_input);
            t_fwd += t.restart();
            l = qkv::train::seq2seq_loss(*s.model, h, b.label, s.lo);
        } else {  // forward_hidden_rows runs inside the loss: both count as "loss"
            l = qkv::train::seq2seq_loss(*s.model, b.src, b.src_valid_len, b.dec_input, b.label, s.lo);
        }
        t_loss += t.restart();
        s.adam->zero_grad();
        l.loss.backward();
        t_bwd += t.restart();
        qkv::optim::clip_grad_norm(s.params, 1.0);
        t_clip += t.restart();
        s.adam->step();
        t_adam += t.restart();
    }
    const double all = total.seconds();
    std::printf("vocab %lld/%lld, %d threads, %d steps: %.2f ms/step\n", (long long)sv, (long long)tv,
                qkv::get_num_threads(), n, 1e3 * all / n);
    const std::pair<const char*, double> rows[] = {{"forward (encoder+decoder)", t_fwd},
                                                   {full_model ? "loss (gather + output layer + CE)" : "forward_hidden_rows + output + CE", t_loss},
                                                   {"backward", t_bwd},
                                                   {"clip_grad_norm", t_clip},
                                                   {"Adam step", t_adam}};
    for (auto& [name, t] : rows) std::printf("  %-36s %8.2f ms  %5.1f %%\n", name, 1e3 * t / n, 100 * t / all);
}

}  // namespace

int main(int argc, char** argv) {
    if (const int rc = bench_isa_cap_status(argv[0])) return rc;
    bool prof = false;
    std::string denormals = "flush";  // what the qkv program does unless given --denormals keep
    const int threads = bench_take_threads(argc, argv, 0);  // 0: not given, qkv's default
    if (threads < 0) return 2;
    if (threads > 0) qkv::set_num_threads(threads);
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        if (std::strcmp(argv[i], "--denormals") == 0 && i + 1 < argc) {
            denormals = argv[++i];
        } else if (std::strcmp(argv[i], "--full-model") == 0) {
            full_model = true;
        } else if (std::strcmp(argv[i], "--profile") == 0) {
            prof = true;
        } else if (std::strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
            // mixed precision as qkv train --precision (the benchmark runs on this thread)
            qkv::set_matmul_precision(qkv::parse_precision(argv[++i], "--precision"));
        } else {
            rest.push_back(argv[i]);
        }
    }
    if (denormals != "flush" && denormals != "keep") {
        std::fprintf(stderr, "bench_train_step: --denormals must be flush or keep, got '%s'\n", denormals.c_str());
        return 2;
    }
    qkv::set_flush_denormal(denormals == "flush");
    std::printf("denormals: %s; matrix products: %s%s\n", denormals.c_str(), qkv::precision_name(qkv::matmul_precision()),
                qkv::matmul_precision() == qkv::MatmulPrecision::bf16 ? (" (" + qkv::bf16_matmul_path() + ")").c_str() : "");
    if (prof) {
        profile(194, 214);
        profile(10000, 10000);
        return 0;
    }
    return bench_run(int(rest.size()), rest.data());
}
