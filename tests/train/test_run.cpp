// The trainer's parts seen from a library user: RunConfig::validate naming the bad key,
// configure_run's preset rules, a caller's optimizer and gradient sync inside the step, hooks at
// every step / logged step / validation, the metrics.jsonl reader on resume, and train::run end to
// end on a tiny data file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/train/hooks.h"
#include "qkv/train/run.h"
#include "qkv/train/run_recorder.h"
#include "qkv/train/trainer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

std::string error_text(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

train::TrainRuntime silent() {
    train::TrainRuntime rt;
    rt.progress  = false;
    rt.log       = nullptr;
    rt.log_every = 2;
    return rt;
}

train::TrainOptions five_steps() {
    train::TrainOptions o;
    o.epochs     = 5;
    o.batch_size = 8;  // the tiny corpus is one batch: one step per epoch
    o.lr         = 0.01;
    return o;
}

TEST(RunConfig, ValidateNamesTheBadKey) {
    train::RunConfig c = train::preset_config("d2l");
    EXPECT_NO_THROW(c.validate());  // vocabulary sizes 0: still to come from the data
    c.train.lr = 0;
    std::string msg = error_text([&] { c.validate(); });
    EXPECT_NE(msg.find("invalid training configuration: key 'train.lr' is 0"), std::string::npos) << msg;
    c = train::preset_config("d2l");
    c.model.num_heads = 3;
    msg = error_text([&] { c.validate(); });
    EXPECT_NE(msg.find("key 'model.num_heads' is 3"), std::string::npos) << msg;
    c = train::preset_config("d2l");
    c.data.num_steps = 1;
    EXPECT_THROW(c.validate(), train::ConfigError);
    c = train::preset_config("d2l");
    c.model.src_vocab_size = 100, c.model.tgt_vocab_size = 2;  // known sizes are checked
    msg = error_text([&] { c.validate(); });
    EXPECT_NE(msg.find("model.tgt_vocab_size"), std::string::npos) << msg;
}

TEST(RunConfig, ConfigureRunAppliesThePresetRules) {
    const train::RunConfig demo = train::preset_config("demo");
    train::RunOverrides o;
    o.set("data.subword", "bpe");
    train::RunConfig c = train::configure_run("demo", train::ModelKind::transformer, o);
    // pieces without --num-steps: the length comes from the train split's pieces (pieces_num_steps)
    EXPECT_TRUE(c.data.num_steps_from_data);
    EXPECT_EQ(c.data.num_steps, demo.data.num_steps);  // the cap's base: 4 x the preset's
    o.set("data.num_steps", 10);  // given: kept
    EXPECT_EQ(train::configure_run("demo", train::ModelKind::transformer, o).data.num_steps, 10);
    EXPECT_FALSE(train::configure_run("demo", train::ModelKind::transformer, o).data.num_steps_from_data);
    EXPECT_FALSE(train::configure_run("demo", train::ModelKind::transformer, {}).data.num_steps_from_data);  // words

    train::RunOverrides w;
    w.set("train.schedule", "warmup_linear_decay");
    EXPECT_EQ(train::configure_run("d2l", train::ModelKind::transformer, w).train.warmup_steps, 400);

    train::RunOverrides bad;
    bad.set("data.subword_vocab_size", 100);
    EXPECT_NE(error_text([&] { train::configure_run("demo", train::ModelKind::transformer, bad); })
                  .find("--vocab-size applies to subword vocabularies"),
              std::string::npos);
    train::RunOverrides arch;
    arch.set("model.num_blks", 2);
    EXPECT_THROW(train::configure_run("demo", train::ModelKind::bahdanau, arch), train::ConfigError);
    train::RunOverrides heads;
    heads.set("model.num_hiddens", 32).set("model.num_heads", 3);
    EXPECT_NE(error_text([&] { train::configure_run("demo", train::ModelKind::transformer, heads); })
                  .find("must divide the model width (--num-hiddens, 32)"),
              std::string::npos);
}

/// SGD that counts its steps and remembers the learning rate of each.
class CountingSGD : public optim::SGD {
public:
    using optim::SGD::SGD;
    void step(double grad_scale) override {
        lrs.push_back(lr());
        optim::SGD::step(grad_scale);
    }
    std::vector<double> lrs;
};

TEST(Trainer, UsesTheOptimizerItIsGiven) {
    const TinyCorpus c = tiny_corpus();
    train::TrainOptions o = five_steps();
    o.schedule     = optim::LrSchedule::warmup_inv_sqrt;
    o.warmup_steps = 2;
    manual_seed(0);
    models::Transformer adam_model(tiny_config(c));
    train::Trainer ta(adam_model, c.arrays, c.arrays, c.tgt_vocab.pad(), o, silent());
    const train::TrainResult with_adam = ta.fit();

    manual_seed(0);
    models::Transformer m(tiny_config(c));
    auto sgd = std::make_shared<CountingSGD>(m.parameters(), o.lr);
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, silent());
    t.set_optimizer(sgd);
    const train::TrainResult r = t.fit();
    ASSERT_EQ(sgd->lrs.size(), 5u);
    for (int64_t s = 1; s <= 5; ++s)  // the schedule drives the caller's optimizer too
        EXPECT_DOUBLE_EQ(sgd->lrs[size_t(s - 1)], optim::scheduled_lr(o.schedule, o.lr, s, 2, 5)) << s;
    ASSERT_EQ(r.step_losses.size(), 5u);
    EXPECT_EQ(r.step_losses[0], with_adam.step_losses[0]);  // same model, same first batch
    EXPECT_NE(r.step_losses[1], with_adam.step_losses[1]);  // then another update rule
}

/// Zeroes every gradient: with plain SGD the step then changes nothing.
class ZeroingSync : public train::GradientSync {
public:
    explicit ZeroingSync(const optim::Optimizer* opt) : opt_(opt) {}
    void on_gradients_ready(const std::vector<Tensor>& params) override {
        steps_before.push_back(opt_->steps());  // the optimizer has not stepped yet
        for (const Tensor& p : params) {
            ASSERT_TRUE(p.grad().defined());  // backward has run
            Tensor g = p.grad();
            float* d = static_cast<float*>(g.raw_data());
            for (int64_t i = 0; i < g.numel(); ++i) d[i] = 0.0f;
        }
    }
    std::vector<int64_t> steps_before;

private:
    const optim::Optimizer* opt_;
};

TEST(Trainer, GradientSyncRunsBetweenBackwardAndTheStep) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    const std::vector<float> before = m.parameters()[0].to_vector<float>();
    auto sgd = std::make_shared<optim::SGD>(m.parameters(), 0.1);
    auto sync = std::make_shared<ZeroingSync>(sgd.get());
    train::TrainOptions o = five_steps();
    o.clip_norm = 0;  // a zero gradient has no norm to clip by
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, silent());
    t.set_optimizer(sgd);
    t.set_gradient_sync(sync);
    const train::TrainResult r = t.fit();
    EXPECT_EQ(sync->steps_before, (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(m.parameters()[0].to_vector<float>(), before);  // the zeroed gradients were used
    EXPECT_EQ(r.step_losses.front(), r.step_losses.back());   // so the loss stays (eval-free: no dropout)
}

class RecordingHook : public train::TrainHook {
public:
    void on_step(const train::StepInfo& s) override { steps.push_back(s.step); }
    void on_logged_step(const train::LoggedStep& s) override {
        logged.push_back(s.step);
        logged_loss.push_back(s.loss);
    }
    void on_validated(int64_t step, double loss) override {
        validated.push_back(step);
        EXPECT_TRUE(std::isfinite(loss));
    }
    void on_epoch_end(const train::EpochRecord& r) override { epochs.push_back(r.epoch); }
    std::vector<int64_t> steps, logged, validated, epochs;
    std::vector<double> logged_loss;
};

TEST(Trainer, HooksSeeEveryStepLoggedStepAndValidation) {
    const TinyCorpus c = tiny_corpus();
    manual_seed(0);
    models::Transformer m(tiny_config(c));
    train::Trainer t(m, c.arrays, c.arrays, c.tgt_vocab.pad(), five_steps(), silent());  // log_every 2
    auto h = std::make_shared<RecordingHook>();
    t.add_hook(h);
    const train::TrainResult r = t.fit();
    EXPECT_EQ(h->steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(h->logged, (std::vector<int64_t>{2, 4}));
    ASSERT_EQ(h->logged_loss.size(), 2u);
    EXPECT_DOUBLE_EQ(h->logged_loss[0], (r.step_losses[0] + r.step_losses[1]) / 2);  // the mean since the last
    EXPECT_EQ(h->validated, (std::vector<int64_t>{1, 2, 3, 4, 5}));  // each epoch end
    EXPECT_EQ(h->epochs, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(RunRecorder, TruncateMetricsKeepsWhatTheCheckpointCovers) {
    const std::string text =
        "{\"kind\":\"step\",\"step\":2,\"loss\":1.0}\n"
        "\n"
        "{\"kind\":\"epoch\",\"step\":3,\"partial\":true}\n"
        "{\"kind\":\"epoch\",\"step\":3,\"partial\":false}\n"
        "[1, 2]\n"
        "{\"kind\":\"step\",\"step\":4,\"loss\":0.5}\n"
        "{\"kind\":\"st";  // torn
    const train::MetricsTruncation t = train::truncate_metrics_text(text, 3);
    EXPECT_EQ(t.kept,
              "{\"kind\":\"step\",\"step\":2,\"loss\":1.0}\n"
              "{\"kind\":\"epoch\",\"step\":3,\"partial\":false}\n");
    EXPECT_EQ(t.bad_lines, 2);
    EXPECT_EQ(t.first_bad, 5);
}

// Found by tests/fuzz/fuzz_metrics's 10-minute run: a "step" of 4.9e63 was converted to int64_t
// (undefined behaviour; in practice INT64_MIN, so the line was kept). A step that is not an integer
// makes the line "not a record".
TEST(RunRecorder, NonIntegerStepIsNotARecord) {
    const std::string text =
        "{\"kind\":\"step\",\"step\":4888888888888888888888888888888888888888888888888888888888888888}\n"
        "{\"kind\":\"step\",\"step\":2,\"loss\":1.0}\n";
    const train::MetricsTruncation t = train::truncate_metrics_text(text, 3);
    EXPECT_EQ(t.kept, "{\"kind\":\"step\",\"step\":2,\"loss\":1.0}\n");
    EXPECT_EQ(t.bad_lines, 1);
    EXPECT_EQ(t.first_bad, 1);
}

// A metrics.jsonl append that fails (a full disk: /dev/full answers every write with ENOSPC)
// stops the run naming the file, instead of losing the records without a word.
TEST(RunRecorder, FailedMetricsAppendThrowsNamingTheFile) {
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
    TempDir dir("full");
    fs::create_symlink("/dev/full", dir / "metrics.jsonl");
    train::RunRecorder rec(dir.path().string(), nullptr, {});
    const std::vector<train::MetricsRecord> records{train::MetricsRecord{{"kind", "step"}, {"step", 1}}};
    const std::string msg = error_of([&] { rec.append(records); });
    EXPECT_NE(msg.find("cannot write '" + (dir / "metrics.jsonl") + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 record(s)"), std::string::npos) << msg;
}

// A loss.png write killed in an earlier run leaves loss.png.tmp.<pid>; the next plot removes it.
TEST(LossPlot, RemovesTheTemporaryOfAKilledWrite) {
    TempDir dir("plot");
    std::ofstream(dir / "metrics.jsonl") << "{\"kind\":\"epoch\",\"epoch_pos\":1,\"train_loss\":2.5,\"val_loss\":null}\n";
    // The pid of a process that has ended: a child that exited and was reaped.
    const pid_t dead = ::fork();
    if (dead == 0) ::_exit(0);
    ::waitpid(dead, nullptr, 0);
    const std::string tmp = "loss.png.tmp." + std::to_string(dead);
    std::ofstream(dir / tmp) << "half a png";
    train::plot_losses(dir / "metrics.jsonl", dir / "loss.png");
    EXPECT_FALSE(fs::exists(dir / tmp));
    EXPECT_TRUE(fs::exists(dir / "loss.png"));
}

TEST(Run, TrainsAModelFolderAsQkvTrainDoes) {
    const fs::path dir = fs::temp_directory_path() / ("qkv_test_run_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    {
        std::ofstream f(dir / "fra.txt");
        const char* pairs[] = {"Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.",
                               "I'm home.\tJe suis chez moi.", "We won.\tNous avons gagné.", "Thank you.\tMerci."};
        for (int i = 0; i < 60; ++i) f << pairs[i % 6] << "\n";
    }
    train::RunOverrides o;
    o.set("data.path", (dir / "fra.txt").string());
    o.set("model.num_hiddens", 16).set("model.num_heads", 2).set("model.num_blks", 1).set("model.ffn_num_hiddens", 16);
    o.set("train.batch_size", 8).set("data.num_steps", 6).set("train.max_steps", 3).set("train.time_budget_s", 0);
    o.set("train.log_every", 1);
    const train::RunConfig cfg = train::configure_run("demo", train::ModelKind::transformer, o);
    train::RunOptions ro;
    ro.out_dir  = (dir / "run").string();
    ro.progress = false;
    ro.log      = nullptr;
    std::vector<int64_t> logged;
    ro.on_logged_step = [&](const train::LoggedStep& s) { logged.push_back(s.step); };
    ro.make_optimizer = [](models::EncoderDecoder& m) { return std::make_shared<optim::SGD>(m.parameters(), 0.1); };
    const train::RunResult r = train::run(cfg, ro);
    EXPECT_TRUE(r.trained);
    EXPECT_EQ(r.train.steps, 3);
    EXPECT_EQ(logged, (std::vector<int64_t>{1, 2, 3}));
    EXPECT_GT(r.config.model.tgt_vocab_size, 4);  // filled from the data
    for (const char* f : {"config.json", "model.safetensors", "checkpoint.safetensors", "metrics.jsonl"})
        EXPECT_TRUE(fs::exists(dir / "run" / f)) << f;
    EXPECT_FALSE(fs::exists(dir / "run" / "loss.png"));  // the plot is a hook qkv train installs

    // A second fresh run into the folder is refused; a resume past max_steps has nothing to do.
    EXPECT_THROW(train::run(cfg, ro), train::ConfigError);
    train::RunOptions again = ro;
    again.resume = true;
    const train::RunResult done = train::run(train::resume_config(ro.out_dir, {}), again);
    EXPECT_FALSE(done.trained);
    EXPECT_NE(done.nothing_to_do.find("already trained 3 steps (config.json's max_steps 3)"), std::string::npos)
        << done.nothing_to_do;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::test
