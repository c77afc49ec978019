// Training loop: a tiny Transformer memorises eight pairs; resuming from a checkpoint (a stop, an
// epoch end, a mid-epoch validation point, an interrupt, a kill while validating) gives the same
// losses (and metrics.jsonl records) as an uninterrupted run; one validation per validation
// point; the divergence warning; output files; option checks. Each test's folders live in a
// TempDir, removed when the test ends, whether its assertions held or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/decode/greedy.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

/// The resume and validation tests' run: 4 epochs of batches of 3, lr 0.003, label smoothing 0.1.
train::TrainOptions four_epochs() {
    train::TrainOptions o;
    o.epochs = 4;
    o.batch_size = 3;
    o.lr = 0.003;
    o.label_smoothing = 0.1;
    return o;
}

train::TrainRuntime quiet(const std::string& dir = "", bool resume = false) {
    train::TrainRuntime rt;
    rt.out_dir   = dir;
    rt.resume    = resume;
    rt.progress  = false;
    rt.log       = nullptr;
    rt.log_every = 1;
    return rt;
}

std::vector<std::vector<int64_t>> translate_all(models::Transformer& m, const TinyCorpus& c) {
    decode::GreedyOptions g;
    g.bos = c.tgt_vocab.bos();
    g.eos = c.tgt_vocab.eos();
    g.max_len = 10;
    return decode::greedy_decode(m, from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps}),
                                 from_vector(c.arrays.src_valid_len, {c.arrays.n}), g);
}

TEST(Trainer, TinyModelMemorisesEightPairs) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 120;
    o.batch_size = 8;
    o.lr = 0.005;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet());
    const train::TrainResult r = t.fit();
    EXPECT_EQ(r.steps, 120);
    EXPECT_EQ(r.stop_reason, "epochs");
    EXPECT_EQ(r.diverged_at_step, 0);  // a healthy run: no divergence warning
    EXPECT_FALSE(m.is_training());  // left in eval mode, as D2L's Trainer
    EXPECT_LT(r.epochs.back().val_loss, 0.05);
    const auto out = translate_all(m, c);
    for (size_t i = 0; i < c.tgt.size(); ++i)
        EXPECT_EQ(c.tgt_vocab.decode(out[i]), c.tgt[i]) << "pair " << i;
}

TEST(Trainer, SameSeedSameLosses) {
    const TinyCorpus c = tiny_corpus();
    std::vector<double> runs[2];
    for (auto& losses : runs) {
        manual_seed(4);
        models::Transformer m(tiny_config(c, 0.1));
        train::TrainOptions o;
        o.epochs = 3;
        o.batch_size = 3;
        train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet());
        losses = t.fit().step_losses;
    }
    ASSERT_EQ(runs[0].size(), 9u);  // 8 pairs, batch 3: 3 batches per epoch (3 + 3 + 2)
    EXPECT_EQ(runs[0], runs[1]);
}

int64_t count_records(const std::string& dir, const std::string& kind) {
    std::ifstream in(fs::path(dir) / "metrics.jsonl");
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) n += line.find("\"kind\":\"" + kind + "\"") != std::string::npos;
    return n;
}

/// The records of metrics.jsonl, in order.
std::vector<nlohmann::json> records(const std::string& dir) {
    std::ifstream in(fs::path(dir) / "metrics.jsonl");
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

/// metrics.jsonl's records without their timing fields (train_seconds, tokens_per_s): what two
/// runs of the same steps must agree on.
std::vector<nlohmann::json> untimed_records(const std::string& dir) {
    std::vector<nlohmann::json> out = records(dir);
    for (auto& r : out) r.erase("train_seconds"), r.erase("tokens_per_s");
    return out;
}

/// Trains with dropout (so the generator state matters) for `epochs`, stopping after `stop_at`
/// steps, then resumes in a fresh model from the checkpoint; compares with one uninterrupted run:
/// step losses, weights, the epoch records (train loss over the whole epoch, also the one the
/// stop cut) and metrics.jsonl ("step" records every 2 steps: a window can straddle the stop).
void check_resume(int64_t stop_at, bool bucketed = false) {
    const TinyCorpus c = tiny_corpus();
    train::TrainOptions o = four_epochs();
    if (bucketed) o.bucket_pool = 2, o.trim_batches = true;
    const std::string tag = std::to_string(stop_at) + (bucketed ? "b" : "");
    const TempDir tmp;
    const std::string ref_dir = tmp / ("resumeref" + tag), dir = tmp / ("resume" + tag);
    auto runtime = [](const std::string& d, bool resume) {
        train::TrainRuntime rt = quiet(d, resume);
        rt.log_every = 2;
        return rt;
    };
    manual_seed(11);
    models::Transformer ref(tiny_config(c, 0.2));
    train::Trainer tr(ref, c.arrays, c.arrays, c.tgt_vocab.pad(), o, runtime(ref_dir, false));
    const train::TrainResult full = tr.fit();
    ASSERT_EQ(full.step_losses.size(), 12u);
    ASSERT_EQ(full.epochs.size(), 4u);

    manual_seed(11);
    models::Transformer a(tiny_config(c, 0.2));
    train::TrainOptions first = o;
    first.max_steps = stop_at;
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), first, runtime(dir, false));
    const train::TrainResult ra = ta.fit();
    EXPECT_EQ(ra.stop_reason, "max_steps");
    ASSERT_EQ(int64_t(ra.step_losses.size()), stop_at);

    manual_seed(999);  // the resumed run must not depend on the generator's state before loading
    models::Transformer b(tiny_config(c, 0.2));
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, runtime(dir, true));
    const train::TrainResult rb = tb.fit();
    EXPECT_EQ(rb.first_step, stop_at);
    std::vector<double> joined = ra.step_losses;
    joined.insert(joined.end(), rb.step_losses.begin(), rb.step_losses.end());
    EXPECT_EQ(joined, full.step_losses);  // bit for bit
    auto pr = ref.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pr.size(); ++i) EXPECT_EQ(pr[i].to_vector<float>(), pb[i].to_vector<float>());
    // The resumed run's epoch records: the uninterrupted run's last ones, train loss included
    // (the mean over every step of the epoch, those before the stop too).
    ASSERT_LE(rb.epochs.size(), full.epochs.size());
    const size_t skip = full.epochs.size() - rb.epochs.size();
    EXPECT_EQ(skip, size_t(stop_at / 3));  // 3 batches per epoch
    for (size_t i = 0; i < rb.epochs.size(); ++i) {
        EXPECT_EQ(rb.epochs[i].epoch, full.epochs[skip + i].epoch);
        EXPECT_EQ(rb.epochs[i].train_loss, full.epochs[skip + i].train_loss) << "epoch " << rb.epochs[i].epoch;
        EXPECT_EQ(rb.epochs[i].val_loss, full.epochs[skip + i].val_loss) << "epoch " << rb.epochs[i].epoch;
    }
    // metrics.jsonl: the uninterrupted run's records, timings aside: the same "step" records (none
    // lost, none repeated, the same means), one record per epoch (the stop's partial one gone).
    EXPECT_EQ(count_records(ref_dir, "step"), 6);
    EXPECT_EQ(untimed_records(dir), untimed_records(ref_dir));
}

TEST(Trainer, ResumeInsideAnEpochEqualsUninterruptedRun) { check_resume(5); }

/// check_resume's run (4 epochs of 3 batches, dropout) validating after every step: a period
/// shorter than any step, so the validation points are deterministic.
train::TrainOptions every_step_validation() {
    train::TrainOptions o = four_epochs();
    o.val_every_s = 1e-9;
    return o;
}

TEST(Trainer, ResumeFromAMidEpochValidationCheckpointEqualsUninterruptedRun) {
    // Every validation point inside an epoch writes a checkpoint. The one of step 4 (epoch 2,
    // batch 1) is kept aside while the run goes on to the end, then put back: as if the run had
    // been killed after step 4 with later metrics.jsonl records on disk. Resuming from it gives
    // the uninterrupted run's later losses and weights, and metrics.jsonl no record twice.
    const TinyCorpus c = tiny_corpus();
    const train::TrainOptions o = every_step_validation();
    const TempDir tmp;
    const std::string dir = tmp / "midval";
    const fs::path ckpt = fs::path(dir) / "checkpoint.safetensors", kept = dir + ".step4";
    manual_seed(11);
    models::Transformer ref(tiny_config(c, 0.2));
    train::Trainer tr(ref, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    std::vector<train::TrainingProgress> saved;
    tr.on_checkpoint = [&](const train::TrainingProgress& p) {
        saved.push_back(p);
        if (p.step == 4) fs::copy_file(ckpt, kept, fs::copy_options::overwrite_existing);
    };
    const train::TrainResult full = tr.fit();
    ASSERT_EQ(full.step_losses.size(), 12u);
    ASSERT_EQ(saved.size(), 12u);  // one per step: 8 validation points inside epochs, 4 epoch ends
    EXPECT_EQ(saved[3].epoch, 1);
    EXPECT_EQ(saved[3].batch, 1);
    EXPECT_EQ(saved[3].step, 4);
    EXPECT_GT(saved[3].train_seconds, 0);
    EXPECT_EQ(saved[2].epoch, 1);  // the epoch end: the next epoch's start
    EXPECT_EQ(saved[2].batch, 0);
    ASSERT_EQ(count_records(dir, "val"), 12);
    fs::copy_file(kept, ckpt, fs::copy_options::overwrite_existing);

    manual_seed(999);  // the resumed run must not depend on the generator's state before loading
    models::Transformer b(tiny_config(c, 0.2));
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir, true));
    const train::TrainResult rb = tb.fit();
    EXPECT_EQ(rb.first_step, 4);
    EXPECT_EQ(rb.step_losses, std::vector<double>(full.step_losses.begin() + 4, full.step_losses.end()));
    auto pr = ref.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pr.size(); ++i) EXPECT_EQ(pr[i].to_vector<float>(), pb[i].to_vector<float>());
    EXPECT_EQ(count_records(dir, "step"), 12);
    EXPECT_EQ(count_records(dir, "val"), 12);
    EXPECT_EQ(count_records(dir, "epoch"), 4);
}

TEST(Trainer, InterruptStopsAtTheNextBatchWithACheckpoint) {
    // The flag (set here when step 4's checkpoint is written, as a signal handler would set it
    // at any time) stops the run at the next batch top: a checkpoint of the state after step 4,
    // stop reason "interrupted"; resuming continues as the uninterrupted run.
    const TinyCorpus c = tiny_corpus();
    const train::TrainOptions o = every_step_validation();
    const TempDir tmp;
    const std::string ref_dir = tmp / "interruptref";
    manual_seed(11);
    models::Transformer ref(tiny_config(c, 0.2));
    train::Trainer tr(ref, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(ref_dir));
    const train::TrainResult full = tr.fit();

    const std::string dir = tmp / "interrupt";
    volatile std::sig_atomic_t flag = 0;
    train::TrainRuntime rt = quiet(dir);
    rt.interrupt = &flag;
    manual_seed(11);
    models::Transformer a(tiny_config(c, 0.2));
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
    ta.on_checkpoint = [&](const train::TrainingProgress& p) {
        if (p.step == 4) flag = SIGINT;
    };
    const train::TrainResult ra = ta.fit();
    EXPECT_EQ(ra.stop_reason, "interrupted");
    EXPECT_EQ(ra.steps, 4);
    ASSERT_FALSE(ra.epochs.empty());
    EXPECT_TRUE(ra.epochs.back().partial);
    const auto p = train::read_checkpoint_progress((fs::path(dir) / "checkpoint.safetensors").string());
    EXPECT_EQ(p.step, 4);
    EXPECT_EQ(p.epoch, 1);
    EXPECT_EQ(p.batch, 1);

    manual_seed(999);
    models::Transformer b(tiny_config(c, 0.2));
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir, true));
    const train::TrainResult rb = tb.fit();
    EXPECT_EQ(rb.stop_reason, "epochs");
    std::vector<double> joined = ra.step_losses;
    joined.insert(joined.end(), rb.step_losses.begin(), rb.step_losses.end());
    EXPECT_EQ(joined, full.step_losses);
    // metrics.jsonl as the uninterrupted run's (timings aside): epoch 2's partial record is gone.
    EXPECT_EQ(untimed_records(dir), untimed_records(ref_dir));
}

TEST(Trainer, WarnsOnceWhenTheLossStaysAboveAUniformGuess) {
    // lr 10: Adam moves every weight by about 10 per step; the loss climbs far above ln(V). The
    // warning comes at the end of the first window (judged with kDivergenceFirstMargin), once.
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 3 * train::kDivergenceWindow;  // one batch per epoch
    o.batch_size = 8;
    o.lr = 10;
    train::TrainRuntime rt = quiet();
    std::FILE* log = std::tmpfile();
    ASSERT_NE(log, nullptr);
    rt.log = log;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
    const train::TrainResult r = t.fit();
    EXPECT_EQ(r.diverged_at_step, train::kDivergenceWindow);
    std::rewind(log);
    std::string text;
    for (int ch; (ch = std::fgetc(log)) != EOF;) text += char(ch);
    std::fclose(log);
    const std::string want = "qkv: warning: training loss ";
    const auto at = text.find(want);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(text.find(want, at + 1), std::string::npos) << "warned twice:\n" << text;
    EXPECT_NE(text.find("the learning rate (--lr 10) is probably too high"), std::string::npos) << text;
}
/// What a run printed on TrainRuntime::log.
struct LogFile {
    std::FILE* f = std::tmpfile();
    ~LogFile() {
        if (f) std::fclose(f);
    }
    std::string text() const {
        std::rewind(f);
        std::string t;
        for (int ch; (ch = std::fgetc(f)) != EOF;) t += char(ch);
        return t;
    }
};

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

TEST(Trainer, AResumeFromACheckpointWithoutRunningSumsSaysSo) {
    // A checkpoint of an older qkv (no "qkv.running_sums") resumes, with a note that the epoch's
    // train loss covers the resumed steps only (here: steps 6, the rest of epoch 2).
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "oldsums";
    const std::string ckpt = (fs::path(dir) / "checkpoint.safetensors").string();
    train::TrainOptions o = four_epochs();
    o.max_steps = 5;
    manual_seed(11);
    models::Transformer a(tiny_config(c, 0.2));
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    const train::TrainResult ra = ta.fit();
    {
        io::SafeTensorsFile f(ckpt);
        std::map<std::string, std::string> meta = f.metadata();
        ASSERT_EQ(meta.erase("qkv.running_sums"), 1u);
        std::vector<io::SafeTensorView> views;
        for (const auto& e : f.entries()) {
            const auto b = f.bytes(e.name);
            views.push_back({e.name, e.dtype, e.shape, b.data(), b.size()});
        }
        const std::string old = ckpt + ".old";
        io::write_safetensors(old, views, meta);
        fs::rename(old, ckpt);
    }
    o.max_steps = 6;
    models::Transformer b(tiny_config(c, 0.2));
    LogFile log;
    train::TrainRuntime rt = quiet(dir, true);
    rt.log = log.f;
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
    const train::TrainResult rb = tb.fit();
    ASSERT_EQ(rb.step_losses.size(), 1u);
    EXPECT_NE(log.text().find("note: " + ckpt + " has no running sums (written by an older qkv): epoch 2's train "
                              "loss and the first metrics.jsonl step record cover the resumed steps only"),
              std::string::npos)
        << log.text();
    ASSERT_EQ(rb.epochs.size(), 1u);
    EXPECT_EQ(rb.epochs[0].train_loss, rb.step_losses[0]);
}

/// `steps` steps of `m` on `arrays` (one batch of the eight pairs per epoch) at a constant `lr`;
/// the log must give the divergence warning exactly as often as the result reports one.
train::TrainResult run_constant_lr(models::Transformer& m, const data::NmtArrays& arrays, int64_t pad,
                                   double lr, int64_t steps) {
    train::TrainOptions o;
    o.epochs = steps;
    o.batch_size = 8;
    o.lr = lr;
    LogFile log;
    train::TrainRuntime rt = quiet();
    rt.log = log.f;
    train::Trainer t(m, arrays, arrays, pad, o, rt);
    train::TrainResult r = t.fit();
    EXPECT_EQ(count_of(log.text(), "qkv: warning: training loss "), r.diverged_at_step > 0 ? 1u : 0u) << log.text();
    return r;
}

// Epoch lines: with an interval longer than the run, only the first and the last epoch get one,
// and the last says how many were skipped; with interval 0, every epoch has its line.
TEST(Trainer, EpochLinesAreRateLimited) {
    const TinyCorpus c = tiny_corpus();
    for (double interval : {1e9, 0.0}) {
        manual_seed(0);
        models::Transformer m(tiny_config(c));
        train::TrainOptions o;
        o.epochs = 6;
        o.batch_size = 8;
        LogFile log;
        train::TrainRuntime rt = quiet();
        rt.log = log.f;
        rt.progress_plain_interval_s = interval;
        train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
        t.fit();
        const std::string text = log.text();
        if (interval > 0) {
            EXPECT_EQ(count_of(text, "epoch 1/6: step"), 1u) << text;
            EXPECT_EQ(count_of(text, "epoch 6/6: step"), 1u) << text;
            EXPECT_EQ(count_of(text, "/6: step"), 2u) << text;
            EXPECT_EQ(count_of(text, "(4 epoch lines skipped: one per 1e+09 s of training)"), 1u) << text;
        } else {
            EXPECT_EQ(count_of(text, "/6: step"), 6u) << text;
            EXPECT_EQ(count_of(text, "skipped"), 0u) << text;
        }
    }
}

/// The step of the divergence warning (0: none) of `steps` steps of the tiny model at `lr`.
int64_t diverged_at(double lr, int64_t steps) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    return run_constant_lr(m, c.arrays, c.tgt_vocab.pad(), lr, steps).diverged_at_step;
}

TEST(Trainer, JudgesTheLastPartialWindowOfAShortRun) {
    // 40 steps: no window ends at a multiple of 50; the run's last (partial, first) window is
    // judged at its end. Diverging: warned; healthy or too slow to move the loss: not.
    EXPECT_EQ(diverged_at(10, 40), 40);
    EXPECT_EQ(diverged_at(0.005, 40), 0);
    EXPECT_EQ(diverged_at(1e-5, 40), 0);
    // A window shorter than kDivergenceMinSteps is not judged.
    EXPECT_EQ(diverged_at(10, train::kDivergenceMinSteps - 1), 0);
    // 80 steps: the healthy and the too slow run stay quiet over both windows (1-50, 51-80).
    EXPECT_EQ(diverged_at(0.005, 80), 0);
    EXPECT_EQ(diverged_at(1e-5, 80), 0);
}

/// The tiny corpus with one vocabulary for both languages (as --shared-vocab).
struct SharedVocabCorpus {
    TinyCorpus c = tiny_corpus();
    data::Vocab vocab;
    data::NmtArrays arrays;
    SharedVocabCorpus() {
        data::Sentences both = c.src;
        both.insert(both.end(), c.tgt.begin(), c.tgt.end());
        data::VocabOptions vo;
        vo.min_freq = 1;
        vocab  = data::Vocab::build(both, vo);
        arrays = data::build_nmt_arrays(c.src, c.tgt, vocab, vocab, 8);
    }
};

/// The divergence step (0: none) and the step losses of `steps` steps of a tied model at a constant
/// `lr`: SharedVocabCorpus, width 128 (the demo preset's), embeddings and output layer tied; one
/// batch of the eight pairs per epoch.
std::pair<int64_t, std::vector<double>> tied_run(double lr, int64_t steps) {
    const SharedVocabCorpus sc;
    const data::Vocab& v = sc.vocab;
    const data::NmtArrays& arrays = sc.arrays;
    models::TransformerConfig cfg = tiny_config(sc.c);
    cfg.src_vocab_size = cfg.tgt_vocab_size = v.size();
    cfg.num_hiddens = 128;
    cfg.tie_weights = true;
    manual_seed(0);
    models::Transformer m(cfg);
    const train::TrainResult r = run_constant_lr(m, arrays, v.pad(), lr, steps);
    return {r.diverged_at_step, r.step_losses};
}

TEST(Trainer, DoesNotWarnATiedModelTooSlowToMoveItsLoss) {
    // A tied model starts far above ln(V): at lr 1e-5 its loss stays there, above both margins,
    // but it does not go up (kDivergenceRiseMargin): no warning. At lr 10 it does, at step 50; at a
    // healthy lr it falls.
    const auto [slow_at, slow] = tied_run(1e-5, 80);
    ASSERT_EQ(slow.size(), 80u);
    double first = 0, second = 0;
    for (int i = 0; i < 50; ++i) first += slow[size_t(i)] / 50;
    for (int i = 50; i < 80; ++i) second += slow[size_t(i)] / 30;
    const double ln_v = std::log(double(SharedVocabCorpus().vocab.size()));
    // the case the ln(V) rule alone warned: both windows above their margins
    ASSERT_GT(first, ln_v + train::kDivergenceFirstMargin) << "ln(V) " << ln_v;
    ASSERT_GT(second, ln_v + train::kDivergenceMargin) << "ln(V) " << ln_v;
    EXPECT_LT(first, slow[0] + train::kDivergenceRiseMargin);
    EXPECT_EQ(slow_at, 0);
    EXPECT_EQ(tied_run(10, 80).first, train::kDivergenceWindow);
    EXPECT_EQ(tied_run(0.005, 80).first, 0);
}

TEST(Trainer, JudgesTheTrailingWindowAfterTheFirst) {
    // 50 healthy steps, then a resumed run at lr 10 to step 80: the window of steps 51-80 is
    // partial, judged at the run's end against kDivergenceMargin.
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "trailing";
    train::TrainOptions o;
    o.epochs = 80;
    o.batch_size = 8;
    o.lr = 0.005;
    o.max_steps = train::kDivergenceWindow;
    manual_seed(0);
    models::Transformer a(tiny_config(c));
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    EXPECT_EQ(ta.fit().diverged_at_step, 0);
    o.max_steps = 80;
    o.lr = 10;
    models::Transformer b(tiny_config(c));
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir, true));
    const train::TrainResult rb = tb.fit();
    EXPECT_EQ(rb.first_step, train::kDivergenceWindow);
    EXPECT_EQ(rb.diverged_at_step, 80);
}

/// (kind, step, train loss, val loss) of each "val" and "epoch" record: what two runs of the same
/// steps must agree on (their timings differ).
std::vector<std::string> val_and_epoch_records(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& r : records(dir))
        if (r["kind"] != "step")
            out.push_back(nlohmann::json{r["kind"], r["step"], r.value("train_loss", nlohmann::json()),
                                         r["val_loss"], r.value("partial", false)}
                              .dump());
    return out;
}

TEST(Trainer, AStopWritesItsCheckpointBeforeItValidates) {
    // The run stops inside an epoch (max_steps 5: epoch 2, batch 2) and is killed while it
    // validates (the hook throws, as a second Ctrl-C kills): the checkpoint of step 5 is already
    // on disk, with the partial epoch record still to write. Resuming with nothing left to train
    // writes that record (the validation loss of the model after step 5); resuming with more
    // continues as the uninterrupted run, whose metrics.jsonl it ends with (the partial epoch
    // record gone: the whole epoch's replaces it).
    const TinyCorpus c = tiny_corpus();
    train::TrainOptions o = four_epochs();
    const TempDir tmp;
    const std::string ref_dir = tmp / "killstopref";
    manual_seed(11);
    models::Transformer ref(tiny_config(c, 0.2));
    train::Trainer tr(ref, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(ref_dir));
    const train::TrainResult full = tr.fit();

    const std::string dir = tmp / "killstop";
    train::TrainOptions first = o;
    first.max_steps = 5;
    manual_seed(11);
    models::Transformer a(tiny_config(c, 0.2));
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), first, quiet(dir));
    double val5 = 0;
    ta.on_validation = [&](int64_t step) {
        if (step < 5) return;
        val5 = ta.evaluate_loss(c.arrays);
        throw std::runtime_error("killed while validating");
    };
    EXPECT_THROW(ta.fit(), std::runtime_error);
    const auto p = train::read_checkpoint_progress((fs::path(dir) / "checkpoint.safetensors").string());
    EXPECT_EQ(p.step, 5);
    EXPECT_EQ(p.epoch, 1);
    EXPECT_EQ(p.batch, 2);
    EXPECT_NE(p.pending_records.find("\"partial\":true"), std::string::npos) << p.pending_records;
    EXPECT_EQ(count_records(dir, "epoch"), 1);  // epoch 1's; the stop's is missing
    EXPECT_TRUE(train::has_missing_records(dir, p));

    // A resume of `dir` with `opts` (another init, overwritten by the checkpoint): its result and
    // the steps it validated at.
    auto resume = [&](const train::TrainOptions& opts) {
        manual_seed(999);
        models::Transformer b(tiny_config(c, 0.2));
        train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), opts, quiet(dir, true));
        std::vector<int64_t> validated;
        tb.on_validation = [&](int64_t step) { validated.push_back(step); };
        const train::TrainResult rb = tb.fit();
        return std::make_pair(rb, validated);
    };
    {
        const auto [rb, validated] = resume(first);
        EXPECT_TRUE(rb.step_losses.empty());
        EXPECT_EQ(validated, (std::vector<int64_t>{5}));
        const auto recs = records(dir);
        ASSERT_EQ(recs.size(), 7u);  // steps 1-3, epoch 1's record, steps 4-5, then the stop's record
        EXPECT_EQ(recs[6]["kind"], "epoch");
        EXPECT_EQ(recs[6]["step"], 5);
        EXPECT_EQ(recs[6]["partial"], true);
        EXPECT_EQ(recs[6]["val_loss"].get<double>(), val5);
        // the mean of steps 4-5, as the killed run would have written it
        EXPECT_EQ(recs[6]["train_loss"].get<double>(), (full.step_losses[3] + full.step_losses[4]) / 2);
        EXPECT_FALSE(train::has_missing_records(dir, p));
    }

    const auto [rb, validated] = resume(o);
    EXPECT_EQ(validated, (std::vector<int64_t>{6, 9, 12}));
    EXPECT_EQ(rb.step_losses, std::vector<double>(full.step_losses.begin() + 5, full.step_losses.end()));
    EXPECT_EQ(untimed_records(dir), untimed_records(ref_dir));
    EXPECT_EQ(count_records(dir, "epoch"), 4);
    EXPECT_EQ(count_records(dir, "step"), 12);
}

TEST(Trainer, KilledWhileValidatingAtAnEpochEndResumesWithTheSameRecords) {
    // Killed while validating at the end of epoch 2 (step 6): the resumed run validates the
    // checkpoint's model, writes the epoch record the killed run did not, and goes on; its
    // metrics.jsonl has the uninterrupted run's records, same losses.
    const TinyCorpus c = tiny_corpus();
    train::TrainOptions o = four_epochs();
    const TempDir tmp;
    const std::string ref_dir = tmp / "killref", dir = tmp / "killend";
    manual_seed(11);
    models::Transformer ref(tiny_config(c, 0.2));
    train::Trainer tr(ref, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(ref_dir));
    const train::TrainResult full = tr.fit();

    manual_seed(11);
    models::Transformer a(tiny_config(c, 0.2));
    train::Trainer ta(a, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    ta.on_validation = [&](int64_t step) {
        if (step == 6) throw std::runtime_error("killed while validating");
    };
    EXPECT_THROW(ta.fit(), std::runtime_error);
    const std::string ckpt = (fs::path(dir) / "checkpoint.safetensors").string();
    const train::TrainingProgress p = train::read_checkpoint_progress(ckpt);
    EXPECT_EQ(p.step, 6);
    EXPECT_EQ(count_records(dir, "epoch"), 1);
    EXPECT_TRUE(train::has_missing_records(dir, p));
    train::TrainingProgress bad = p;
    bad.pending_records = "{";
    try {
        train::has_missing_records(dir, bad);
        ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("checkpoint.safetensors': metadata 'qkv.pending_records' is not valid "
                                             "JSON (parse error at line 1"),
                  std::string::npos)
            << e.what();
    }

    manual_seed(999);
    models::Transformer b(tiny_config(c, 0.2));
    train::Trainer tb(b, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir, true));
    const train::TrainResult rb = tb.fit();
    EXPECT_EQ(rb.step_losses, std::vector<double>(full.step_losses.begin() + 6, full.step_losses.end()));
    EXPECT_EQ(val_and_epoch_records(dir), val_and_epoch_records(ref_dir));
    EXPECT_EQ(count_records(dir, "step"), 12);
    EXPECT_FALSE(train::has_missing_records(dir, p));
    EXPECT_FALSE(train::has_missing_records(dir, train::read_checkpoint_progress(ckpt)));
}

TEST(Trainer, AValidationPointAtAnEpochEndOrAStopValidatesOnce) {
    // Validation after every step, 2 batches per epoch: the points at steps 2 and 4 are epoch
    // ends, the one at step 3 is where max_steps stops the run. Each step is validated once; the
    // epoch end writes the point's "val" record before its epoch record, both with that loss, and
    // prints the epoch line only (the "validation at step" line is for points inside an epoch).
    const TinyCorpus c = tiny_corpus();
    for (const int64_t max_steps : {int64_t(0), int64_t(3)}) {
        const TempDir tmp;
        const std::string dir = tmp / ("valonce" + std::to_string(max_steps));
        manual_seed(0);
        models::Transformer m(tiny_config(c, 0.1));
        train::TrainOptions o;
        o.epochs = 2;
        o.batch_size = 4;
        o.val_every_s = 1e-9;
        o.max_steps = max_steps;
        LogFile log;
        train::TrainRuntime rt = quiet(dir);
        rt.log = log.f;
        train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt);
        std::vector<int64_t> validated;
        t.on_validation = [&](int64_t step) { validated.push_back(step); };
        const train::TrainResult r = t.fit();
        const std::vector<int64_t> want =
            max_steps ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{1, 2, 3, 4};
        EXPECT_EQ(validated, want);
        std::vector<std::string> seq;
        for (const auto& rec : records(dir)) {
            if (rec["kind"] != "step")
                seq.push_back(rec["kind"].get<std::string>() + std::to_string(rec["step"].get<int>()));
        }
        const std::vector<std::string> want_seq =
            max_steps ? std::vector<std::string>{"val1", "val2", "epoch2", "val3", "epoch3"}
                      : std::vector<std::string>{"val1", "val2", "epoch2", "val3", "val4", "epoch4"};
        EXPECT_EQ(seq, want_seq);
        const auto recs = records(dir);
        for (size_t i = 0; i + 1 < recs.size(); ++i) {
            if (recs[i]["kind"] == "val" && recs[i + 1]["kind"] == "epoch") {
                EXPECT_EQ(recs[i]["val_loss"], recs[i + 1]["val_loss"]) << "step " << recs[i]["step"];
            }
        }
        const std::string text = log.text();
        EXPECT_EQ(count_of(text, "validation at step "), max_steps ? 1u : 2u) << text;  // steps 1 (and 3)
        EXPECT_EQ(count_of(text, "epoch "), r.epochs.size()) << text;
    }
}

TEST(Trainer, AStopRightAfterAValidationPointReusesItsLoss) {
    // The interrupt comes while step 4's validation point runs (inside epoch 2): the run stops at
    // the next batch top and its partial epoch record takes that validation's loss, not another.
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "reuse";
    manual_seed(11);
    models::Transformer m(tiny_config(c, 0.2));
    volatile std::sig_atomic_t flag = 0;
    train::TrainRuntime rt = quiet(dir);
    rt.interrupt = &flag;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), every_step_validation(), rt);
    std::vector<int64_t> validated;
    t.on_validation = [&](int64_t step) {
        validated.push_back(step);
        if (step == 4) flag = SIGINT;
    };
    const train::TrainResult r = t.fit();
    EXPECT_EQ(r.stop_reason, "interrupted");
    EXPECT_EQ(validated, (std::vector<int64_t>{1, 2, 3, 4}));
    const auto recs = records(dir);
    ASSERT_GE(recs.size(), 2u);
    EXPECT_EQ(recs[recs.size() - 2]["kind"], "val");
    EXPECT_EQ(recs.back()["kind"], "epoch");
    EXPECT_EQ(recs.back()["partial"], true);
    EXPECT_EQ(recs.back()["val_loss"], recs[recs.size() - 2]["val_loss"]);
}

TEST(Trainer, ResumeWithBucketedTrimmedBatchesEqualsUninterruptedRun) { check_resume(5, true); }

TEST(Trainer, TrimmedBatchesGiveTheSameMaskedLoss) {
    // Trimming drops padded columns only; with the masked loss and no dropout the validation
    // loss is the same function of the same numbers, evaluated with differently sized GEMMs.
    const TinyCorpus c = tiny_corpus();
    manual_seed(2);
    models::Transformer m(tiny_config(c));
    int64_t longest = 0;
    for (int64_t v : c.arrays.tgt_valid_len) longest = std::max(longest, v);
    ASSERT_LT(longest, c.arrays.num_steps);  // so trimming does remove columns
    double loss[2];
    for (int trim = 0; trim < 2; ++trim) {
        train::TrainOptions o;
        o.trim_batches = trim == 1;
        o.val_batch_size = 3;
        train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet());
        loss[trim] = t.evaluate_loss(c.arrays);
    }
    EXPECT_GT(loss[0], 1.0);  // an untrained model: a real loss, not 0
    EXPECT_NEAR(loss[1], loss[0], kTolElemRtol * loss[0]);
}
TEST(Trainer, ResumeAtAnEpochBoundaryEqualsUninterruptedRun) { check_resume(6); }

TEST(Trainer, WritesModelFolderFiles) {
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "files";
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 2;
    o.batch_size = 4;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    t.add_hook(std::make_shared<train::LossPlotHook>((fs::path(dir) / "loss.png").string()));  // as qkv train
    int calls = 0;
    t.on_epoch_end = [&](const train::EpochRecord& r) {
        ++calls;
        EXPECT_EQ(r.epoch, calls);
        EXPECT_TRUE(std::isfinite(r.val_loss));
    };
    t.fit();
    EXPECT_EQ(calls, 2);
    for (const char* f : {"checkpoint.safetensors", "model.safetensors", "metrics.jsonl", "loss.png"})
        EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
    const auto meta = train::read_checkpoint_metadata((fs::path(dir) / "checkpoint.safetensors").string());
    EXPECT_EQ(meta.at("qkv.epoch"), "2");
    EXPECT_EQ(meta.at("qkv.step"), "4");
}

TEST(Trainer, FreshRunRemovesAnEarlierRunsFilesFirst) {
    // A fresh run into a folder of an earlier run removes its model.safetensors,
    // checkpoint.safetensors and metrics.jsonl before the first step: a run that fails before its
    // first checkpoint (here: NaN weights, "the loss is nan" at step 1) leaves none of them.
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "fresh";
    fs::create_directories(dir);
    for (const char* f : {"checkpoint.safetensors", "model.safetensors", "metrics.jsonl"})
        std::ofstream(fs::path(dir) / f) << "an earlier run";
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    Tensor w = m.encoder->embedding->weight;
    float* p = static_cast<float*>(w.raw_data());
    for (int64_t i = 0; i < w.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
    train::TrainOptions o;
    o.epochs = 1;
    o.batch_size = 4;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    EXPECT_THROW(t.fit(), Error);
    for (const char* f : {"checkpoint.safetensors", "model.safetensors"})
        EXPECT_FALSE(fs::exists(fs::path(dir) / f)) << f << " of the earlier run is still there";
}

TEST(Trainer, TimeBudgetStopsAtAStepBoundary) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.epochs = 1'000'000'000;  // more than any machine trains in the budget: only the budget stops it
    o.batch_size = 4;
    o.time_budget_s = 0.2;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet());
    const auto r = t.fit();
    EXPECT_EQ(r.stop_reason, "time_budget");
    EXPECT_GE(r.train_seconds, 0.2);  // the rule (it stops once the budget is spent), not a speed
}

TEST(Trainer, ValidatesEveryValEverySecondsOfTraining) {
    // A period shorter than any step: one "val" record per step, each equal to the loss a
    // separate evaluation of the same model state gives (checked for the last one).
    const TinyCorpus c = tiny_corpus();
    const TempDir tmp;
    const std::string dir = tmp / "valevery";
    manual_seed(0);
    models::Transformer m(tiny_config(c, 0.1));
    train::TrainOptions o;
    o.epochs = 2;
    o.batch_size = 4;
    o.val_every_s = 1e-9;
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir));
    const auto r = t.fit();
    ASSERT_EQ(r.steps, 4);
    std::ifstream in(fs::path(dir) / "metrics.jsonl");
    std::string line;
    std::vector<double> val;
    while (std::getline(in, line)) {
        if (line.find("\"kind\":\"val\"") == std::string::npos) continue;
        const auto k = line.find("\"val_loss\":");
        ASSERT_NE(k, std::string::npos) << line;
        val.push_back(std::stod(line.substr(k + 11)));
    }
    ASSERT_EQ(val.size(), 4u);
    EXPECT_NEAR(val.back(), t.evaluate_loss(c.arrays), 1e-12);
}

TEST(Trainer, RejectsBadOptions) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::TrainOptions o;
    o.lr = 0;
    EXPECT_THROW(train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet()), Error);
    o = {};
    o.batch_size = 0;
    EXPECT_THROW(train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet()), Error);
    o = {};
    EXPECT_THROW(train::Trainer(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet("", true)), Error);
    data::NmtArrays empty;
    EXPECT_THROW(train::Trainer(m, empty, c.arrays, c.tgt_vocab.pad(), o, quiet()), Error);
    // Resuming from a folder without a checkpoint names the missing file.
    const TempDir tmp;
    const std::string dir = tmp / "nockpt";
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, quiet(dir, true));
    try {
        t.fit();
        ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("checkpoint.safetensors"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace qkv::test
