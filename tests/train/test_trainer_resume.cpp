// Resuming from a checkpoint (a stop, an epoch end, a mid-epoch validation point, an interrupt, a
// kill while validating) gives the same losses (and metrics.jsonl records) as an uninterrupted run;
// one validation per validation point. Each test's folders live in a TempDir, removed when the
// test ends, whether its assertions held or not.
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
#include "train/trainer_test_util.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

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

TEST(Trainer, ResumeAtAnEpochBoundaryEqualsUninterruptedRun) { check_resume(6); }

}  // namespace
}  // namespace qkv::test
