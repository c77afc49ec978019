#pragma once
// What Trainer::fit (train/trainer.h) tells the code around it, and the one place where that code
// may act inside a step:
//   TrainHook     events of a run (epoch start, each step, each logged step, validation,
//                 checkpoint, epoch end, metrics.jsonl records appended). Observers only: a hook
//                 must not change the model, the optimizer or the default generator, so a run with
//                 hooks trains bit for bit as one without. The progress bar (ProgressHook) and the
//                 loss plot (LossPlotHook, installed by `qkv train`) are hooks.
//   GradientSync  called between backward and the optimizer step with the parameters whose .grad
//                 is complete: data-parallel training averages the gradients across processes there
//                 (an all-reduce), before the clipping norm is taken, so every process clips and
//                 steps alike. The single-process default is none (no call at all).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/train/checkpoint.h"
#include "qkv/util/progress.h"

namespace qkv::train {

struct EpochRecord;

/// One optimizer step, as the step loop saw it.
struct StepInfo {
    int64_t step = 0;           // optimizer steps done in total (1-based: this step's number)
    int64_t epoch = 0;          // 0-based epoch
    int64_t batch = 0;          // 0-based batch within the epoch
    int64_t batches = 0;        // batches per epoch
    double loss = 0;            // this step's training loss (before the step)
    double lr = 0;              // the learning rate the step used
    int64_t tokens = 0;         // non-pad target tokens in the batch
    double seconds = 0;         // the step's time (batch to tensors, forward, backward, update)
    double train_seconds = 0;   // cumulative training time after this step
};

/// A metrics.jsonl "step" record (every TrainRuntime::log_every steps): means over the steps since
/// the previous one. Reported also without an output folder.
struct LoggedStep {
    int64_t step = 0;
    double epoch_pos = 0;       // epoch + (batch + 1) / batches
    double loss = 0;            // mean training loss of the steps since the last logged step
    double lr = 0;
    double tokens_per_s = 0;    // over those steps
    double train_seconds = 0;
};

/// Observer of a training run; every method does nothing by default. Called on the training thread,
/// in the order listed per step. An exception from a hook ends the run as any error does.
class TrainHook {
public:
    virtual ~TrainHook() = default;
    /// An epoch begins (resumed: at batch first_batch); `epochs` is the run's epoch count.
    virtual void on_epoch_start(int64_t /*epoch*/, int64_t /*epochs*/, int64_t /*first_batch*/,
                                int64_t /*batches*/) {}
    /// After every optimizer step.
    virtual void on_step(const StepInfo&) {}
    /// After each metrics.jsonl "step" record (written first when there is an output folder).
    virtual void on_logged_step(const LoggedStep&) {}
    /// Just before a validation of the held-out data (after the checkpoint of that state).
    virtual void on_validation(int64_t /*step*/) {}
    /// After it, with its loss (NaN without validation data).
    virtual void on_validated(int64_t /*step*/, double /*val_loss*/) {}
    /// After each checkpoint write, with the progress it saved (only with an output folder).
    virtual void on_checkpoint(const TrainingProgress&) {}
    /// The epoch's steps are done (or the run stops inside it), before its records and checkpoint.
    virtual void on_epoch_steps_done(int64_t /*epoch*/) {}
    /// After an epoch's records (and a resumed run's completion of a killed validation's records)
    /// are appended to `metrics_path` (only with an output folder).
    virtual void on_epoch_records(const std::string& /*metrics_path*/) {}
    /// After an epoch ends (or is cut short), its record written and its summary line logged.
    virtual void on_epoch_end(const EpochRecord&) {}
};

/// Gradient synchronisation between backward and the optimizer step (see the file comment).
/// `params` are the optimizer's parameters (Optimizer::params), .grad set where backward reached;
/// implementations may change the .grad tensors in place (e.g. average them across processes).
/// Throwing ends the run. Not called for a step that throws earlier (a NaN loss).
class GradientSync {
public:
    virtual ~GradientSync() = default;
    virtual void on_gradients_ready(const std::vector<Tensor>& params) = 0;
};

/// The progress bar (util/progress.h): one bar per epoch labelled "epoch e/E", with the training
/// loss and target tokens/s of the steps since the fields were last refreshed: after a second of
/// step time (StepInfo::seconds) and at every epoch's end, so an epoch's last line shows that
/// epoch's loss however short its epochs are. On a terminal the bar is redrawn in place; otherwise
/// (a log, CI) a plain line is printed at most once per opt.plain_interval_s seconds of the clock
/// (opt.clock: tests inject one; steady_clock when empty), counted over the whole run, so short
/// epochs do not print a line each (their epoch lines say the rest; <= 0: no plain lines).
/// Trainer::fit installs it when TrainRuntime::progress is set.
class ProgressHook : public TrainHook {
public:
    explicit ProgressHook(util::ProgressOptions opt = {});
    void on_epoch_start(int64_t epoch, int64_t epochs, int64_t first_batch, int64_t batches) override;
    void on_step(const StepInfo& s) override;
    void on_epoch_steps_done(int64_t epoch) override;
    /// Whether the bar is drawn in place on a terminal (a log line must start on a new line).
    bool is_tty() const { return bar_ && bar_->is_tty(); }

private:
    double now() const;
    /// The shown fields from the window (d_*), which then starts again.
    void refresh_fields();

    util::ProgressOptions opt_;
    std::unique_ptr<util::ProgressBar> bar_;
    double d_loss_ = 0, d_secs_ = 0;  // the window of the shown fields
    int64_t d_steps_ = 0, d_tokens_ = 0;
    double shown_loss_ = 0, shown_tps_ = 0;
    bool shown_ = false;
    double last_line_ = 0;  // plain lines: the clock at the last one (at the start: construction)
};

/// Training/validation loss curves from metrics.jsonl (epoch and step records) into `png_path`,
/// as D2L plots them; writes nothing while the file holds no training loss. Lines that are not
/// JSON records are skipped. Throws qkv::Error when the PNG cannot be written.
void plot_losses(const std::string& metrics_path, const std::string& png_path);

/// Redraws OUT/loss.png (plot_losses) whenever epoch records are appended: `qkv train` installs it.
class LossPlotHook : public TrainHook {
public:
    explicit LossPlotHook(std::string png_path) : png_(std::move(png_path)) {}
    void on_epoch_records(const std::string& metrics_path) override { plot_losses(metrics_path, png_); }

private:
    std::string png_;
};

}  // namespace qkv::train
