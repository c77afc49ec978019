// Training loop: a tiny Transformer memorises eight pairs; the same seed gives the same losses;
// trimmed batches give the same masked loss; output files; the time budget; periodic validation;
// option checks. Resuming is test_trainer_resume.cpp, the divergence warning
// test_trainer_divergence.cpp. Each test's folders live in a TempDir, removed when the test ends.
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
