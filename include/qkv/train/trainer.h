#pragma once
// The training loop for encoder–decoder models (D2L EN Trainer.fit, spec §1.13): shuffled
// minibatches, teacher-forced forward, seq2seq loss, backward, clipping by global norm, an optimizer
// step (Adam unless the caller passes another), validation loss each epoch (and every val_every_s
// of training), checkpoints at every epoch end, validation point and stop (exact resume; each
// written before its validation), metrics.jsonl. Stops at the epoch count, a step count, a
// training-time budget or an interrupt (Ctrl-C: util/interrupt.h). Warns once when the training
// loss stays above a uniform guess's (a diverging run).
// Three parts: the step loop (trainer.cpp: steps, stopping rules, validation points, the
// divergence check), the run recorder (train/run_recorder.h: the output folder's files, resume,
// kill notes) and hooks (train/hooks.h: progress bar, loss plot, callbacks, gradient
// synchronisation for data-parallel training).
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/ops/precision.h"
#include "qkv/data/batcher.h"
#include "qkv/data/nmt_data.h"
#include "qkv/models/encoder_decoder.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/hooks.h"
#include "qkv/train/run_recorder.h"  // has_missing_records
#include "qkv/train/run_config.h"  // TrainOptions (runtime/run_config.h)

namespace qkv::train {

// TrainOptions (the hyper-parameters saved in config.json) is in runtime/run_config.h.


/// Where and how a run reports (not saved in config.json).
struct TrainRuntime {
    std::string out_dir;  // "": nothing written. Else checkpoint.safetensors and model.safetensors
                          // are (re)written there at each epoch end, mid-epoch validation point
                          // and stop, metrics.jsonl records as they come (loss.png only with a
                          // LossPlotHook, train/hooks.h); a
                          // fresh run (not resume) first removes an earlier run's metrics.jsonl,
                          // checkpoint.safetensors and model.safetensors there. Any run first
                          // removes the temporary files of their writes that were cut short
                          // (util::remove_stale_temp_files, said on `log`), and arms a
                          // util::KillNote around each checkpoint and model write.
    bool resume = false;  // continue from out_dir/checkpoint.safetensors
    std::map<std::string, std::string> checkpoint_metadata;  // added to every checkpoint/model file
    bool progress = true;            // progress bar (plain lines when stderr is not a TTY)
    double progress_plain_interval_s = 10.0;
    std::FILE* log = stderr;         // one summary line per epoch; nullptr: silent
    int64_t log_every = 50;          // metrics.jsonl "step" record every N steps (0: none)
    /// With out_dir: each checkpoint's model is also written to out_dir/checkpoints/ (average.h
    /// kept_checkpoint_path), keeping the newest K; a fresh run first removes earlier ones. 0: none.
    int64_t keep_checkpoints = 0;
    /// When non-null, read at the top of every batch: nonzero (e.g. the signal number an
    /// util::InterruptGuard stored) stops the run there as max_steps does (checkpoint, epoch
    /// record), with stop_reason "interrupted". Must stay valid during fit().
    const volatile std::sig_atomic_t* interrupt = nullptr;
    /// Data-parallel training (train/data_parallel.h): with a communicator of size > 1 this
    /// process is one rank of the run. Every rank builds the same global batches, trains on its
    /// share, and the gradients are reduced before the optimizer step; rank 0's parameters are
    /// broadcast at the start; ranks > 0 read out_dir (to resume) but write nothing, and their
    /// dropout draws come from rank_seed(seed, rank). The interrupt flag, the step time (their
    /// mean) and so the time budget and validation points are agreed by all ranks after every
    /// step, so every rank stops at the same step. nullptr or size 1: a single process.
    std::shared_ptr<dist::Communicator> comm;
    GradientReducerOptions reduce;  // overlap or after-backward; bucket sizes
};

struct EpochRecord {
    int64_t epoch = 0;              // 1-based: epochs completed
    int64_t step = 0;               // optimizer steps done in total
    double train_loss = 0;          // mean of this epoch's batch losses (resumed: all of them)
    double val_loss = 0;            // NaN when there is no validation data
    double train_seconds = 0;       // cumulative training time
    double tokens_per_s = 0;        // non-pad target tokens per second in this epoch
    bool partial = false;           // the run stopped inside this epoch
};

struct TrainResult {
    std::vector<EpochRecord> epochs;     // epochs finished or cut short in this call
    std::vector<double> step_losses;     // every step's loss in this call, in order
    int64_t first_step = 0;              // global index of step_losses[0]
    int64_t steps = 0;                   // optimizer steps done in total
    double train_seconds = 0;            // cumulative training time
    double tokens_per_s = 0;             // over this call's steps
    std::string stop_reason;             // "epochs", "max_steps", "time_budget" or "interrupted"
    int64_t diverged_at_step = 0;        // step of the divergence warning (kDivergenceWindow); 0: none
    /// Data-parallel: seconds this rank's training thread waited for the gradient reduction (with
    /// overlap, what backward did not hide), in this call; 0 for one process.
    double comm_seconds = 0;
    /// Bytes of optimizer state (moments, momentum buffers) this process holds at the end: Adam's
    /// 8 per parameter element, a sharded Adam's (TrainOptions::shard_optimizer) its shard's.
    int64_t optimizer_state_bytes = 0;
};

/// Steps in a divergence-check window. Trainer::fit warns once per call (on TrainRuntime::log, a
/// line starting "qkv: warning:") when the mean training loss over a window is above ln(V) plus a
/// margin, V the target vocabulary size, and has gone up (kDivergenceRiseMargin): ln(V) is the
/// loss of a uniform guess (with or without label smoothing, on real tokens or on all positions),
/// so a model that does worse after some training, and worse than it started, is diverging
/// (typically the learning rate is too high). The windows end at the
/// global step multiples of this, and at the run's last step (a partial window: a short run, a
/// stop); one with fewer than kDivergenceMinSteps steps is not judged.
constexpr int64_t kDivergenceWindow = 50;
/// Nats above ln(V) before the warning fires, for windows after step kDivergenceWindow.
constexpr double kDivergenceMargin = 0.5;
/// The margin for a window holding any of steps 1..kDivergenceWindow, where a fresh model's loss
/// is still about where it started, above ln(V) (why these sizes: trainer.cpp).
constexpr double kDivergenceFirstMargin = 3.0;
/// Nats a window's mean must also be above the run's reference to warn: the lowest of step 1's
/// loss (the model as initialised) and the means of the earlier judged windows. A tied model
/// starts far above ln(V), and at a learning rate too small to move its loss stays there: no
/// warning (why this size: trainer.cpp).
constexpr double kDivergenceRiseMargin = 0.5;
/// The fewest steps in a window that is judged.
constexpr int64_t kDivergenceMinSteps = 10;

class Trainer {
public:
    /// pad: the target <pad> id. The model must outlive the trainer; so must the arrays.
    /// Throws qkv::Error when the training data is empty or an option is out of range.
    Trainer(models::EncoderDecoder& model, const data::NmtArrays& train_data,
            const data::NmtArrays& valid_data, int64_t pad, TrainOptions opt, TrainRuntime rt = {});

    /// Trains (resuming when asked); returns what happened. Leaves the model in eval mode (as
    /// D2L's Trainer does). Throws qkv::Error on a NaN/inf loss or I/O failure. A resumed run
    /// continues exactly (same losses and weights as an uninterrupted run) from any checkpoint:
    /// an epoch end, a mid-epoch validation point or a stop; when the run that wrote it was
    /// killed while validating after it, the resumed run first validates and appends the
    /// metrics.jsonl records that run did not write (TrainingProgress::pending_records).
    /// metrics.jsonl then ends as an uninterrupted run's, timings aside: the resume drops the
    /// records after the checkpoint's step and the partial epoch records (the resumed run writes
    /// that epoch's record, whole, or partial again when it stops before its first step), and
    /// the checkpoint's running sums make its records cover the steps before the stop too.
    TrainResult fit();

    /// Teacher-forced loss over `data` in eval mode, without history: token-weighted mean
    /// (position-weighted with loss_on_padding), batches of val_batch_size. NaN when empty.
    /// `sharded` (data-parallel runs: every rank of TrainRuntime::comm must call it): rank r of N
    /// evaluates batches r, r + N, ... and the ranks all-reduce their sums of losses and counts,
    /// so each does about 1/N of the work and all return the same loss, the single process's up
    /// to the order of a double sum (the batches, and so each batch's float loss, are the same).
    double evaluate_loss(const data::NmtArrays& data, bool sharded = false);
    /// Validation batches this process has evaluated so far (all of them, or its shards').
    int64_t eval_batches() const { return eval_batches_; }

    /// The optimizer to train with (e.g. optim::SGD, or Adam with weight decay), over
    /// model.parameters(); must outlive fit(). Each step sets its learning rate
    /// (TrainOptions::lr and schedule), computes the loss, zero_grad(), backward, the gradient sync
    /// (if any), then step(clip factor) (Optimizer::step folds the clipping into the update).
    /// Checkpoints hold its state_dict; a resumed run must pass the same kind. Default (nullptr):
    /// make_adam(model.parameters(), opt) as D2L does; nullptr restores it.
    void set_optimizer(std::shared_ptr<optim::Optimizer> optimizer) { optimizer_ = std::move(optimizer); }
    /// Called between backward and the optimizer step of every step (train/hooks.h GradientSync);
    /// nullptr (the default): none, a single-process run.
    void set_gradient_sync(std::shared_ptr<GradientSync> sync) { sync_ = std::move(sync); }
    /// Adds an observer of the run (train/hooks.h), called after the callbacks below and the
    /// progress bar, in the order added. nullptr is ignored.
    void add_hook(std::shared_ptr<TrainHook> hook) {
        if (hook) hooks_.push_back(std::move(hook));
    }

    /// Called after each epoch's checkpoint, validation and summary line.
    std::function<void(const EpochRecord&)> on_epoch_end;
    /// Called after each checkpoint is written (epoch ends, mid-epoch validation points, stops),
    /// with the progress it saved. Not called without an out_dir.
    std::function<void(const TrainingProgress&)> on_checkpoint;
    /// Called just before each validation of the held-out data (epoch ends, validation points,
    /// stops, and a resumed run's completing the records of a run killed while validating), with
    /// the number of steps done; with an out_dir, after the checkpoint of that state.
    std::function<void(int64_t step)> on_validation;

private:
    friend class StepLoop;
    models::EncoderDecoder& model_;
    const data::NmtArrays& train_;
    const data::NmtArrays& valid_;
    int64_t pad_;
    TrainOptions opt_;
    TrainRuntime rt_;
    std::shared_ptr<optim::Optimizer> optimizer_;
    std::shared_ptr<GradientSync> sync_;
    std::vector<std::shared_ptr<TrainHook>> hooks_;
    int64_t eval_batches_ = 0;
};

/// The default optimizer of a run: Adam(params, opt.lr, {adam_beta1, adam_beta2, adam_eps}).
/// Throws as optim::Adam does.
std::unique_ptr<optim::Adam> make_adam(const std::vector<Tensor>& params, const TrainOptions& opt);

/// Tensors of one batch (src (B, T), src_valid_len (B), dec_input (B, T), label (B, T); i64).
struct BatchTensors {
    Tensor src, src_valid_len, dec_input, label;
};
BatchTensors to_tensors(const data::Batch& b);

}  // namespace qkv::train
