// The divergence warning (training loss above a uniform guess) and the rate-limited epoch lines
// of the Trainer's log.
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

}  // namespace
}  // namespace qkv::test
