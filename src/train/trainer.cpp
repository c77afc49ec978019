// The step loop: batches -> loss -> backward -> gradient sync -> clip + optimizer step, with the
// stopping rules, validation points and the divergence check; the run's files are the recorder's
// (run_recorder.cpp), the progress bar and the plot are hooks (hooks.cpp).
#include "qkv/train/trainer.h"

#include "qkv/ops/precision.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <span>
#include <memory>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/data/batcher.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss.h"
#include "qkv/util/interrupt.h"
#include "qkv/util/timer.h"

namespace qkv::train {

namespace fs = std::filesystem;

BatchTensors to_tensors(const data::Batch& b) {
    BatchTensors t;
    t.src           = from_vector(b.src, {b.size, b.src_steps > 0 ? b.src_steps : b.num_steps});
    t.src_valid_len = from_vector(b.src_valid_len, {b.size});
    t.dec_input     = from_vector(b.dec_input, {b.size, b.num_steps});
    t.label         = from_vector(b.label, {b.size, b.num_steps});
    return t;
}

Trainer::Trainer(models::EncoderDecoder& model, const data::NmtArrays& train_data,
                 const data::NmtArrays& valid_data, int64_t pad, TrainOptions opt, TrainRuntime rt)
    : model_(model), train_(train_data), valid_(valid_data), pad_(pad), opt_(opt), rt_(std::move(rt)) {
    QKV_CHECK(train_.n > 0, "Trainer: the training set is empty");
    QKV_CHECK(opt_.epochs >= 1, "Trainer: epochs must be >= 1, got ", opt_.epochs);
    QKV_CHECK(opt_.batch_size >= 1 && opt_.val_batch_size >= 1, "Trainer: batch sizes must be >= 1");
    QKV_CHECK(opt_.lr > 0 && std::isfinite(opt_.lr), "Trainer: lr must be positive, got ", opt_.lr);
    QKV_CHECK(opt_.clip_norm >= 0, "Trainer: clip_norm must be >= 0, got ", opt_.clip_norm);
    QKV_CHECK(opt_.max_steps >= 0 && opt_.time_budget_s >= 0,
              "Trainer: max_steps and time_budget must be >= 0");
    QKV_CHECK(opt_.label_smoothing >= 0 && opt_.label_smoothing < 1,
              "Trainer: label_smoothing must be in [0, 1), got ", opt_.label_smoothing);
    QKV_CHECK(opt_.schedule == optim::LrSchedule::constant || opt_.warmup_steps >= 1,
              "Trainer: a warmup schedule needs warmup_steps >= 1");
    QKV_CHECK(pad_ >= 0, "Trainer: pad id must be >= 0");
    QKV_CHECK(!rt_.resume || !rt_.out_dir.empty(), "Trainer: resume needs an output folder");
}

double Trainer::evaluate_loss(const data::NmtArrays& d, bool sharded) {
    if (d.n == 0) return std::numeric_limits<double>::quiet_NaN();
    const bool shards = sharded && rt_.comm && rt_.comm->size() > 1;
    const int64_t ranks = shards ? rt_.comm->size() : 1, rank = shards ? rt_.comm->rank() : 0;
    MatmulPrecisionGuard precision(opt_.precision);
    const bool was_training = model_.is_training();
    model_.eval();
    NoGradGuard ng;
    data::BatcherOptions bo;
    bo.batch_size = opt_.val_batch_size;
    bo.shuffle    = false;
    bo.trim       = opt_.trim_batches && !opt_.loss_on_padding;
    data::Batcher batcher(d, bo);
    batcher.start_epoch(0);
    Seq2SeqLossOptions lo;
    lo.pad        = pad_;
    lo.on_padding = opt_.loss_on_padding;
    // sums[0]: the loss summed over positions, sums[1]: the positions (exact in a double)
    double sums[2] = {0, 0};
    for (int64_t i = rank; i < batcher.num_batches(); i += ranks) {
        BatchTensors t = to_tensors(batcher.batch(i));
        Seq2SeqLoss l = seq2seq_loss(model_, t.src, t.src_valid_len, t.dec_input, t.label, lo);
        sums[0] += l.loss.item() * double(l.positions);
        sums[1] += double(l.positions);
        ++eval_batches_;
    }
    model_.train(was_training);
    if (shards) rt_.comm->allreduce_sum(std::span<double>(sums, 2));
    return sums[1] > 0 ? sums[0] / sums[1] : std::numeric_limits<double>::quiet_NaN();
}

std::unique_ptr<optim::Adam> make_adam(const std::vector<Tensor>& params, const TrainOptions& opt) {
    optim::AdamOptions ao;
    ao.beta1 = opt.adam_beta1;
    ao.beta2 = opt.adam_beta2;
    ao.eps   = opt.adam_eps;
    return std::make_unique<optim::Adam>(params, opt.lr, ao);
}

namespace {

/// Philox counters each data-parallel step may draw, as a power of two (data_parallel_step):
/// 2^38 (~2.7e11 numbers, far above a step's dropout masks) leaves 2^26 (~67 million) steps.
constexpr int kStepCounterBits = 38;

/// Trainer's std::function callbacks as the first hook.
class CallbackHook : public TrainHook {
public:
    explicit CallbackHook(const Trainer& t) : t_(t) {}
    void on_validation(int64_t step) override {
        if (t_.on_validation) t_.on_validation(step);
    }
    void on_checkpoint(const TrainingProgress& p) override {
        if (t_.on_checkpoint) t_.on_checkpoint(p);
    }
    void on_epoch_end(const EpochRecord& r) override {
        if (t_.on_epoch_end) t_.on_epoch_end(r);
    }

private:
    const Trainer& t_;
};

}  // namespace

// Divergence check (kDivergenceWindow, kDivergenceMargin, kDivergenceFirstMargin,
// kDivergenceRiseMargin, kDivergenceMinSteps). ln(V) is what a uniform guess scores; a fresh
// model starts above it (its random logits add about half their variance), a tied one further
// (measured below). Means over the first window measured on tests/cli's six-pair
// corpus (demo preset with test_train_interrupt.sh's small model, ln(V) = 3.00, seeds 0-4,
// steps 1-50): 2.85-3.24 at the default lr, 2.96-3.33 at --lr 1e-5 (too small to move the
// loss), 8.51-10.95 at --lr 10 (diverging: Adam moves every weight by about lr per step, and
// the warmup reaches lr 2.5 by step 50); the same with --shared-vocab --tie-weights (ln(V) =
// 3.43, seeds 0-2): 3.89-4.34, 4.09-4.58, 7.79-8.64. --preset full on the real data (tied,
// ln(V) = 8.99, seed 0): 11.39 at step 1, 10.88 over steps 1-10, 8.67 over steps 1-50. So a
// window holding any of the first kDivergenceWindow steps is judged against ln(V) + 3 nats
// (kDivergenceFirstMargin: above every healthy or too slow start measured, +1.9 at most,
// below every diverging first window, +5.5 at least); later windows against ln(V) + 0.5
// (kDivergenceMargin): a healthy run is far below ln(V) by then (default lr: 2.33-2.71 over
// steps 51-100; d2l preset: ln(V) = 5.37, 0.91 at steps 51-60, 0.50 at 91-100), a diverging
// one far above it (--lr 10: 77.4-102.0 over steps 51-100), and one too slow stays where it
// started (--lr 1e-5: 2.95-3.33).
// A tied model of the demo preset's width (C 128, --shared-vocab --tie-weights, six pairs,
// ln(V) = 3.43) starts much further up: 7.70 / 7.93 at step 1 (seeds 0 / 1), and at --lr 1e-5
// (too small to move it) stays there: 7.67 / 7.87 over steps 1-50, 7.28 / 7.47 over 51-100,
// above both margins, where the rule above warned "the learning rate is probably too high".
// So a window must also be above the run's own reference by kDivergenceRiseMargin (0.5 nats):
// the lowest of step 1's loss (the model as initialised: no step has moved it) and the means
// of the windows judged before it, i.e. the loss went up. Measured: the too slow tied runs
// stay 0.03-0.06 below step 1 (first window), the diverging ones rise far above it (--lr 10:
// 122.6 / 138.2 over steps 1-50), a healthy one falls (default lr: 3.73 over steps 1-50); an
// untied model starts within 0.3 of ln(V), so for it the first window's rule is unchanged and
// later windows need at most +0.8 over ln(V) instead of +0.5. A run resumed from a checkpoint
// without the reference (an older qkv) judges by ln(V) alone until its first window.
// A window is judged at each global multiple of kDivergenceWindow and, at the end of the run,
// the last one if it is partial (a short run, a stop), when it holds at least
// kDivergenceMinSteps steps: the first steps' losses are the noisiest and the farthest above
// ln(V) (--preset full: +2.4 at step 1), and a stop right after a window's end leaves a tail
// too short to say anything.
class StepLoop {
public:
    explicit StepLoop(Trainer& t);
    TrainResult run();

private:
    template <class F>
    void each_hook(F&& f) {
        for (auto& h : hooks_) f(*h);
    }
    void start();
    void complete_missing_records();
    bool run_epoch(int64_t epoch);
    double train_step(int64_t epoch, int64_t b, RunningSums& ep);
    void validation_point(int64_t epoch, int64_t b, const RunningSums& ep);
    void finish_epoch(int64_t epoch, int64_t b, const RunningSums& ep, bool partial, bool val_point_at_end);
    double validate();
    void checkpoint(int64_t epoch, int64_t batch, const std::vector<MetricsRecord>& pending,
                    const RunningSums& epoch_sums);
    std::string stop_reason() const;
    void judge_window(bool bar_line_open);

    Trainer& t_;
    models::EncoderDecoder& model_;
    const TrainOptions& opt_;
    const TrainRuntime& rt_;
    RunRecorder rec_;
    std::shared_ptr<optim::Optimizer> optimizer_;
    const std::vector<Tensor> params_;
    data::Batcher batcher_;
    const int64_t nb_;
    std::vector<std::shared_ptr<TrainHook>> hooks_;
    ProgressHook* progress_ = nullptr;  // in hooks_ when rt_.progress
    Seq2SeqLossOptions lo_;

    TrainingProgress prog_;  // where the run starts (a resumed run: the checkpoint's)
    TrainResult res_;
    int64_t total_steps_ = 0;
    double train_seconds_ = 0;
    int64_t step_ = 0;
    // The validation loss of the model after `val_step_` steps: a stop right after a mid-epoch
    // validation point (the signal came while it ran) reuses it instead of validating again.
    int64_t val_step_ = -1;
    double val_loss_ = std::numeric_limits<double>::quiet_NaN();
    // The running sums of the metrics.jsonl "step" record (log_sums_) and of the divergence window
    // (w_sums_) in progress; an epoch's are run_epoch's.
    RunningSums log_sums_, w_sums_;
    double div_ref_ = std::numeric_limits<double>::quiet_NaN();  // the divergence reference
    double uniform_loss_ = 0;                                     // ln(V)
    int64_t run_tokens_ = 0;
    double run_seconds_ = 0;
    double next_val_ = 0;  // training time of the next validation point (val_every_s)
    // Epoch lines: at most one per progress_plain_interval_s of training time (epochs of a tiny
    // corpus take milliseconds), the first and the last always.
    double epoch_line_s_ = -1;
    int64_t epochs_unlogged_ = 0;
    // Data parallelism (TrainRuntime::comm with size > 1): this process's rank, the world size,
    // the gradient reducer, and the stop the ranks agreed on after the last step.
    int rank_ = 0, world_ = 1;
    std::unique_ptr<GradientReducer> reducer_;
    bool agreed_interrupt_ = false;
    int64_t consolidated_step_ = -1;  // the last step a sharded Adam's state was gathered for a checkpoint
    double data_parallel_step(const data::Batch& global, Seq2SeqLoss& l);
    int64_t optimizer_state_bytes() const;
    void check_ranks_agree();
};

namespace {
data::BatcherOptions train_batcher_options(const TrainOptions& o) {
    data::BatcherOptions bo;
    bo.batch_size  = o.batch_size;
    bo.shuffle     = true;
    bo.seed        = o.seed;
    bo.bucket_pool = o.bucket_pool;
    bo.batch_tokens = o.batch_tokens;
    bo.trim        = o.trim_batches && !o.loss_on_padding;
    return bo;
}
}  // namespace

namespace {
/// The caller's optimizer, else Adam: sharded over the ranks (ZeroRedundancyAdam) with
/// shard_optimizer in a data-parallel run.
std::shared_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, const TrainRuntime& rt,
                                                 const std::vector<Tensor>& params,
                                                 const std::shared_ptr<optim::Optimizer>& given) {
    if (given) {
        QKV_CHECK(!o.shard_optimizer, "Trainer: shard_optimizer shards the default Adam; a caller's optimizer "
                                      "(set_optimizer) is not sharded");
        return given;
    }
    if (o.shard_optimizer && rt.comm && rt.comm->size() > 1) {
        optim::AdamOptions ao;
        ao.beta1 = o.adam_beta1;
        ao.beta2 = o.adam_beta2;
        ao.eps   = o.adam_eps;
        return std::make_shared<ZeroRedundancyAdam>(params, rt.comm, o.lr, ao);
    }
    if (o.shard_optimizer && rt.log)  // the setting stays recorded: a resume under mpirun shards
        std::fprintf(rt.log, "note: shard_optimizer has nothing to shard in one process: Adam keeps its whole "
                             "state (it shards when run under mpirun with 2+ ranks)\n");
    return make_adam(params, o);
}
}  // namespace

StepLoop::StepLoop(Trainer& t)
    : t_(t),
      model_(t.model_),
      opt_(t.opt_),
      rt_(t.rt_),
      rec_(t.rt_.out_dir, t.rt_.log, t.rt_.checkpoint_metadata, !t.rt_.comm || t.rt_.comm->rank() == 0,
           t.rt_.keep_checkpoints),
      optimizer_(make_optimizer(t.opt_, t.rt_, t.model_.parameters(), t.optimizer_)),
      params_(t.model_.parameters()),
      batcher_(t.train_, train_batcher_options(t.opt_)),
      nb_(batcher_.num_batches()) {
    hooks_.push_back(std::make_shared<CallbackHook>(t));
    if (rt_.progress) {
        util::ProgressOptions po;
        po.plain_interval_s = rt_.progress_plain_interval_s;
        auto bar = std::make_shared<ProgressHook>(po);
        progress_ = bar.get();
        hooks_.push_back(std::move(bar));
    }
    hooks_.insert(hooks_.end(), t.hooks_.begin(), t.hooks_.end());
    lo_.pad             = t.pad_;
    lo_.on_padding      = opt_.loss_on_padding;
    lo_.label_smoothing = opt_.label_smoothing;
    if (rt_.comm && rt_.comm->size() > 1) {
        rank_  = rt_.comm->rank();
        world_ = rt_.comm->size();
    }
}

void StepLoop::start() {
    if (world_ > 1) check_ranks_agree();
    rec_.start(rt_.resume);
    if (rt_.resume) prog_ = rec_.resume(model_, *optimizer_, nb_);
    res_.first_step = prog_.step;
    total_steps_ = opt_.epochs * nb_;
    if (opt_.max_steps > 0) total_steps_ = std::min(total_steps_, opt_.max_steps);
    train_seconds_ = prog_.train_seconds;
    step_          = prog_.step;
    log_sums_      = prog_.log_sums;
    w_sums_        = prog_.window_sums;
    div_ref_       = prog_.divergence_reference;  // a fresh run's is step 1's loss
    uniform_loss_  = std::log(double(model_.tgt_vocab_size()));
    if (auto* zero = dynamic_cast<ZeroRedundancyAdam*>(optimizer_.get()); zero && rt_.log && rank_ == 0) {
        std::fprintf(rt_.log, "optimizer state: %.2f MiB per rank (sharded over %d; %.2f MiB unsharded)\n",
                     double(zero->state_bytes()) / 1048576.0, world_, double(zero->total_state_bytes()) / 1048576.0);
        std::fflush(rt_.log);
    }
    consolidated_step_ = rt_.resume ? prog_.step : -1;
    if (world_ > 1) {
        // Every rank starts from rank 0's parameters (the same seed gives the same ones; the
        // broadcast makes it so whatever happened before) and draws its own dropout masks.
        // What the job says when a rank is lost: the checkpoint to resume from; and mpirun's SIGTERM
        // (it stops the others when a rank dies) while this rank waits in a collective.
        rt_.comm->watch_interrupt(rt_.interrupt);
        if (rt_.resume && !rt_.out_dir.empty())
            rt_.comm->note_checkpoint(rec_.checkpoint_path(), prog_.step,
                                      /*written=*/true);
        reducer_ = std::make_unique<GradientReducer>(rt_.comm, params_, rt_.reduce);
        if (auto* zero = dynamic_cast<ZeroRedundancyAdam*>(optimizer_.get())) reducer_->set_shards(zero->bounds());
        reducer_->broadcast_parameters();
        Generator& g = default_generator();
        const uint64_t offset = g.offset();
        g.manual_seed(rank_seed(g.seed(), rank_));
        g.set_offset(offset);
    }
}

TrainResult StepLoop::run() {
    start();
    if (rt_.resume) complete_missing_records();
    model_.train();
    next_val_ = opt_.val_every_s > 0 ? (std::floor(train_seconds_ / opt_.val_every_s) + 1) * opt_.val_every_s : 0.0;
    for (int64_t epoch = prog_.epoch; epoch < opt_.epochs; ++epoch)
        if (run_epoch(epoch)) break;
    if (w_sums_.steps > 0) judge_window(false);  // the run's last window, when partial
    if (res_.stop_reason.empty()) res_.stop_reason = "epochs";
    res_.steps         = step_;
    res_.train_seconds = train_seconds_;
    res_.tokens_per_s  = run_seconds_ > 0 ? double(run_tokens_) / run_seconds_ : 0;
    res_.comm_seconds  = reducer_ ? reducer_->comm_seconds() : 0.0;
    res_.optimizer_state_bytes = optimizer_state_bytes();
    model_.eval();
    return res_;
}

int64_t StepLoop::optimizer_state_bytes() const {
    if (auto* zero = dynamic_cast<const ZeroRedundancyAdam*>(optimizer_.get())) return zero->state_bytes();
    int64_t n = 0;
    for (const auto& [name, t] : optimizer_->state_dict())
        if (name != "step") n += t.numel() * int64_t(dtype_size(t.dtype()));
    return n;
}

// Ranks that would train different things are refused before anything is written or trained:
// the training rows, the options and the model's parameter names and shapes must agree.
void StepLoop::check_ranks_agree() {
    auto hex = [](uint64_t h) { return detail::str(std::hex, h); };
    uint64_t data_fp = dist::fingerprint("");
    for (const auto* v : {&t_.train_.src, &t_.train_.src_valid_len, &t_.train_.label, &t_.train_.tgt_valid_len})
        data_fp = dist::fingerprint(std::string_view(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(int64_t)), data_fp);
    dist::check_same_on_all_ranks(*rt_.comm, "the training data",
                                  detail::str(t_.train_.n, " pairs, fingerprint ", hex(data_fp)));
    dist::check_same_on_all_ranks(
        *rt_.comm, "the training options",
        detail::str("epochs ", opt_.epochs, ", max_steps ", opt_.max_steps, ", batch_size ", opt_.batch_size,
                    ", lr ", opt_.lr, ", clip ", opt_.clip_norm, ", label_smoothing ", opt_.label_smoothing,
                    ", loss_on_padding ", opt_.loss_on_padding, ", schedule ", int(opt_.schedule), ", warmup ",
                    opt_.warmup_steps, ", seed ", opt_.seed, ", time_budget_s ", opt_.time_budget_s,
                    ", val_every_s ", opt_.val_every_s, ", trim ", opt_.trim_batches, ", bucket_pool ",
                    opt_.bucket_pool, ", resume ", rt_.resume, ", shard_optimizer ", opt_.shard_optimizer));
    std::string shapes;
    for (const auto& [name, p] : model_.named_parameters()) shapes += detail::str(name, p.shape(), ";");
    dist::check_same_on_all_ranks(*rt_.comm, "the model",
                                  detail::str(params_.size(), " parameter tensors, fingerprint ",
                                              hex(dist::fingerprint(shapes))));
}

// The run that wrote the checkpoint was killed before the records of the validation after it: the
// model is the checkpoint's, so validating now gives the loss it would have written.
void StepLoop::complete_missing_records() {
    std::vector<MetricsRecord> missing = rec_.missing_records_to_write(prog_);
    if (world_ > 1) {  // only rank 0 reads the records; the validation is sharded over every rank
        int64_t any = missing.empty() ? 0 : 1;
        rt_.comm->allreduce_sum(std::span<int64_t>(&any, 1));
        if (any == 0) return;
    } else if (missing.empty()) {
        return;
    }
    const double vl = validate();
    for (auto& r : missing) r["val_loss"] = json_number(vl);
    rec_.append(missing);
    each_hook([&](TrainHook& h) { h.on_epoch_records(rec_.metrics_path()); });
    if (rt_.log)
        std::fprintf(rt_.log, "validation at step %lld (the stopped run did not finish it): val loss %.4f\n",
                     (long long)step_, vl);
}

// The reason to stop before the next step, or "".
std::string StepLoop::stop_reason() const {
    if (opt_.max_steps > 0 && step_ >= opt_.max_steps) return "max_steps";
    if (opt_.time_budget_s > 0 && train_seconds_ >= opt_.time_budget_s) return "time_budget";
    // Data-parallel ranks stop on the interrupt they agreed on after the last step (a signal
    // reaches the ranks at different moments; acting on it alone would leave the others waiting).
    if (world_ > 1 ? agreed_interrupt_ : rt_.interrupt && *rt_.interrupt) return "interrupted";
    return "";
}

/// Trains the epoch from its first (resumed: next) batch; true when the run stopped inside it.
bool StepLoop::run_epoch(int64_t epoch) {
    batcher_.start_epoch(epoch);
    const int64_t first_batch = epoch == prog_.epoch ? prog_.batch : 0;
    // the epoch's steps, those before a resumed run's checkpoint included
    RunningSums ep = epoch == prog_.epoch ? prog_.epoch_sums : RunningSums{};
    std::string stop;
    // A validation point at the epoch's last step, or where the run stops: the epoch end's
    // validation serves it.
    bool val_point_at_end = false;
    int64_t b = first_batch;
    each_hook([&](TrainHook& h) { h.on_epoch_start(epoch, opt_.epochs, first_batch, nb_); });
    for (; b < nb_; ++b) {
        if (stop = stop_reason(); !stop.empty()) break;
        train_step(epoch, b, ep);
        if (step_ % kDivergenceWindow == 0) judge_window(true);
        if (opt_.val_every_s > 0 && train_seconds_ >= next_val_) {
            next_val_ = (std::floor(train_seconds_ / opt_.val_every_s) + 1) * opt_.val_every_s;
            if (b + 1 == nb_ || !stop_reason().empty()) val_point_at_end = true;
            else validation_point(epoch, b, ep);
        }
    }
    // End of the epoch, or the run stopped inside it.
    const bool partial = b < nb_;
    each_hook([&](TrainHook& h) { h.on_epoch_steps_done(epoch); });
    // A stop before the first step of a resumed epoch writes its partial record again (the resume
    // removed it), with the checkpoint's sums; one at its start writes none.
    if (ep.steps > 0 || !partial) finish_epoch(epoch, b, ep, partial, val_point_at_end);
    if (partial) res_.stop_reason = stop;
    return partial;
}

// The forward and backward of a data-parallel step: this rank's share of the global batch, the
// gradients reduced over the ranks (weighted by each share's loss positions over the global
// batch's). Returns the global batch's loss; l.tokens becomes the global batch's tokens.
double StepLoop::data_parallel_step(const data::Batch& global, Seq2SeqLoss& l) {
    // The global batch's loss positions, counted as seq2seq_loss counts them.
    int64_t global_positions = 0;
    if (opt_.loss_on_padding) global_positions = global.size * global.num_steps;
    else
        for (int64_t y : global.label) global_positions += y != lo_.pad;
    const data::Batch share = shard_batch(global, rank_, world_, opt_.loss_on_padding);
    // Each rank's dropout stream (its own seed, rank_seed) is positioned by the step alone, a fixed
    // span of Philox counters per step, not by the draws of its earlier shares (which differ
    // between ranks): the step a checkpoint records then resumes every rank exactly, though the
    // checkpoint holds one offset.
    Generator& gen = default_generator();
    QKV_CHECK(step_ < (int64_t(1) << (64 - kStepCounterBits)) - 1, "train: data-parallel runs are limited to ",
              (int64_t(1) << (64 - kStepCounterBits)) - 1, " steps");
    const uint64_t first_counter = uint64_t(step_ + 1) << kStepCounterBits;
    gen.set_offset(first_counter);
    optimizer_->zero_grad();
    if (share.size > 0) {
        BatchTensors t = to_tensors(share);
        l = seq2seq_loss(model_, t.src, t.src_valid_len, t.dec_input, t.label, lo_);
    }
    const double w = share.size > 0 ? double(l.positions) : 0.0, total = double(std::max<int64_t>(global_positions, 1));
    std::vector<double> sums{share.size > 0 ? l.loss.item() * w / total : 0.0, double(l.tokens), w};
    reducer_->backward_and_sync([&] { if (share.size > 0) l.loss.backward(); }, w, total, sums);
    QKV_CHECK(sums[2] == double(global_positions), "train: the ranks' shares cover ", sums[2], " of the batch's ",
              global_positions, " loss positions (ranks disagree on the batch: different data?)");
    l.tokens = static_cast<int64_t>(sums[1]);
    QKV_CHECK(gen.offset() - first_counter <= (uint64_t(1) << kStepCounterBits),
              "train: one data-parallel step drew ", gen.offset() - first_counter,
              " random numbers, more than the 2^", kStepCounterBits, " it has");
    return sums[0];
}

/// One optimizer step on batch b; returns its loss.
double StepLoop::train_step(int64_t epoch, int64_t b, RunningSums& ep) {
    util::Timer timer;
    optim::Optimizer& opt = *optimizer_;
    opt.set_lr(optim::scheduled_lr(opt_.schedule, opt_.lr, step_ + 1, opt_.warmup_steps, total_steps_));
    Seq2SeqLoss l;
    double loss = 0;
    if (world_ == 1) {
        BatchTensors t = to_tensors(batcher_.batch(b));
        l = seq2seq_loss(model_, t.src, t.src_valid_len, t.dec_input, t.label, lo_);
        opt.zero_grad();
        l.loss.backward();
    } else {
        loss = data_parallel_step(batcher_.batch(b), l);
    }
    if (t_.sync_) t_.sync_->on_gradients_ready(params_);
    // Clipping folded into the update: one pass over the gradients fewer (≈1 % of an anchor
    // step), the same parameters bit for bit.
    opt.step(opt_.clip_norm > 0 ? opt.clip_factor(opt_.clip_norm).scale : 1.0);
    if (world_ == 1) loss = l.loss.item();
    QKV_CHECK(std::isfinite(loss), "train: the loss is ", loss, " at step ", step_ + 1, " (lower the learning rate)");
    ++step_;
    if (step_ == 1) div_ref_ = loss;
    double secs = timer.seconds();
    if (world_ > 1) {
        // The ranks agree on the step's time (their mean: the time budget and validation points
        // fall on the same step everywhere) and on a stop (any rank interrupted).
        std::vector<double> agree{secs, rt_.interrupt && *rt_.interrupt ? 1.0 : 0.0};
        rt_.comm->allreduce_sum(std::span<double>(agree));
        secs = agree[0] / world_;
        agreed_interrupt_ = agree[1] > 0;
    }
    train_seconds_ += secs;
    run_seconds_ += secs;
    run_tokens_ += l.tokens;
    res_.step_losses.push_back(loss);
    for (RunningSums* s : {&ep, &log_sums_, &w_sums_}) {
        s->loss += loss;
        s->seconds += secs;
        ++s->steps;
        s->tokens += l.tokens;
    }
    const StepInfo info{step_, epoch, b, nb_, loss, opt.lr(), l.tokens, secs, train_seconds_};
    each_hook([&](TrainHook& h) { h.on_step(info); });
    // metrics.jsonl: the mean over the steps since the last record, at global step multiples of
    // log_every (a resumed run writes its records at the same steps).
    if (rt_.log_every > 0 && step_ % rt_.log_every == 0) {
        const LoggedStep ls{step_,
                            double(epoch) + double(b + 1) / double(nb_),
                            log_sums_.loss / double(log_sums_.steps),
                            opt.lr(),
                            double(log_sums_.tokens) / std::max(log_sums_.seconds, 1e-9),
                            train_seconds_};
        rec_.write_step(ls);
        each_hook([&](TrainHook& h) { h.on_logged_step(ls); });
        log_sums_ = {};
    }
    return loss;
}

// A validation point inside the epoch: checkpoint (the batch position, as a stop inside an epoch
// writes), validate, "val" record.
void StepLoop::validation_point(int64_t epoch, int64_t b, const RunningSums& ep) {
    std::vector<MetricsRecord> recs{val_record(step_, double(epoch) + double(b + 1) / double(nb_), train_seconds_)};
    checkpoint(epoch, b + 1, recs, ep);
    recs[0]["val_loss"] = json_number(validate());
    rec_.append(recs);
    if (rt_.log && !progress_) {
        std::fprintf(rt_.log, "validation at step %lld (%s of training): val loss %.4f%s\n", (long long)step_,
                     util::format_duration(train_seconds_).c_str(), val_loss_,
                     rec_.active() ? ", checkpoint saved" : "");
        std::fflush(rt_.log);
    }
}

// The epoch's record: the checkpoint first, then the one validation, then the records (a "val"
// record when a validation point fell here, so the --val-every series stays whole, and the epoch
// record), the summary line and the epoch-end hooks.
void StepLoop::finish_epoch(int64_t epoch, int64_t b, const RunningSums& ep, bool partial, bool val_point_at_end) {
    EpochRecord rec;
    rec.epoch         = epoch + 1;
    rec.step          = step_;
    rec.train_loss    = ep.steps > 0 ? ep.loss / double(ep.steps) : std::numeric_limits<double>::quiet_NaN();
    rec.train_seconds = train_seconds_;
    rec.tokens_per_s  = ep.seconds > 0 ? double(ep.tokens) / ep.seconds : 0;
    rec.partial       = partial;
    const double pos  = double(epoch) + double(b) / double(nb_);
    std::vector<MetricsRecord> recs;
    if (val_point_at_end) recs.push_back(val_record(step_, pos, train_seconds_));
    recs.push_back(epoch_record(rec, pos));
    checkpoint(partial ? epoch : epoch + 1, partial ? b : 0, recs, partial ? ep : RunningSums{});
    rec.val_loss = validate();
    if (rec_.active()) {
        for (auto& r : recs) r["val_loss"] = json_number(rec.val_loss);
        rec_.append(recs);
        each_hook([&](TrainHook& h) { h.on_epoch_records(rec_.metrics_path()); });
    }
    const bool last = partial || rec.epoch >= opt_.epochs || !stop_reason().empty() ||
                      (opt_.max_steps > 0 && step_ >= opt_.max_steps);
    const bool due  = epoch_line_s_ < 0 || last || rt_.progress_plain_interval_s <= 0 ||
                     train_seconds_ - epoch_line_s_ >= rt_.progress_plain_interval_s;
    if (rt_.log && !due) ++epochs_unlogged_;
    if (rt_.log && due) {
        if (epochs_unlogged_ > 0)
            std::fprintf(rt_.log, "(%lld epoch line%s skipped: one per %g s of training)\n", (long long)epochs_unlogged_,
                         epochs_unlogged_ == 1 ? "" : "s", rt_.progress_plain_interval_s);
        epochs_unlogged_ = 0;
        epoch_line_s_    = train_seconds_;
        // Remaining time: the smaller of the steps left at this epoch's speed and the budget.
        double eta = ep.steps > 0 ? double(total_steps_ - step_) * ep.seconds / double(ep.steps) : 0;
        if (opt_.time_budget_s > 0) eta = std::min(eta, std::max(0.0, opt_.time_budget_s - train_seconds_));
        std::fprintf(rt_.log,
                     "epoch %lld/%lld%s: step %lld, train loss %.4f, val loss %.4f, "
                     "%.0f target tokens/s, %s elapsed, ETA %s\n",
                     (long long)rec.epoch, (long long)opt_.epochs, partial ? " (partial)" : "", (long long)step_,
                     rec.train_loss, rec.val_loss, rec.tokens_per_s, util::format_duration(train_seconds_).c_str(),
                     util::format_duration(partial ? 0.0 : eta).c_str());
        std::fflush(rt_.log);
    }
    res_.epochs.push_back(rec);
    each_hook([&](TrainHook& h) { h.on_epoch_end(rec); });
}

double StepLoop::validate() {
    if (val_step_ == step_) return val_loss_;
    each_hook([&](TrainHook& h) { h.on_validation(step_); });
    {
        // A second Ctrl-C kills during the validation too (the first waits for it to end): say
        // what is saved. Every validation follows the checkpoint of its step.
        util::KillNote note(rec_.validation_kill_note(step_), "");
        val_loss_ = t_.evaluate_loss(t_.valid_, /*sharded=*/world_ > 1);  // every rank validates
        model_.train();
        val_step_ = step_;
    }
    each_hook([&](TrainHook& h) { h.on_validated(step_, val_loss_); });
    return val_loss_;
}

// A checkpoint of the state after `batch` batches of `epoch` (batch == 0: at its start), with the
// records the validation that follows it completes. Every checkpoint comes before that validation
// (10-60 s on real data): a second Ctrl-C, which kills at once (saying so: the KillNote in
// validate()), then loses at most the validation, and the resumed run writes the records it finds
// missing (complete_missing_records). A stop right after a mid-epoch validation point would write
// the same state again (same step, batch, RNG and train_seconds): one write per step is enough
// (RunRecorder::save), and validate() gives it that point's loss at once.
void StepLoop::checkpoint(int64_t epoch, int64_t batch, const std::vector<MetricsRecord>& pending,
                          const RunningSums& epoch_sums) {
    // The other ranks know rank 0 is writing this step (the communicator's line for a lost rank).
    if (world_ > 1 && !rt_.out_dir.empty() && !rec_.active())
        rt_.comm->note_checkpoint(rec_.checkpoint_path(), step_, /*written=*/false);
    // A sharded Adam's state is gathered onto rank 0, which writes it whole (every rank takes
    // part; the same steps as RunRecorder::save writes: one per step, none of the resumed step).
    if (auto* zero = dynamic_cast<ZeroRedundancyAdam*>(optimizer_.get());
        zero && !rt_.out_dir.empty() && step_ != consolidated_step_) {
        zero->consolidate_state_dict(0);
        consolidated_step_ = step_;
    }
    if (!rec_.active()) return;
    TrainingProgress p;
    p.epoch                = epoch;
    p.batch                = batch;
    p.step                 = step_;
    p.rng_seed             = default_generator().seed();
    p.rng_offset           = default_generator().offset();
    p.train_seconds        = train_seconds_;
    p.pending_records      = pending.empty() ? "" : MetricsRecord(pending).dump();
    p.epoch_sums           = epoch_sums;
    p.log_sums             = log_sums_;
    p.window_sums          = w_sums_;
    p.divergence_reference = div_ref_;
    // With several ranks, none is written once a lost rank was reported: the report named the
    // checkpoint in the folder (dist::Communicator::begin_checkpoint_write).
    if (world_ == 1 || rt_.comm->begin_checkpoint_write(rec_.checkpoint_path(), step_)) {
        bool saved = false;
        try {
            saved = rec_.save(p, model_, *optimizer_);
        } catch (...) {
            if (world_ > 1) rt_.comm->end_checkpoint_write(false);
            throw;
        }
        if (world_ > 1) rt_.comm->end_checkpoint_write(true);
        if (saved) each_hook([&](TrainHook& h) { h.on_checkpoint(p); });
    }
    if (auto* zero = dynamic_cast<ZeroRedundancyAdam*>(optimizer_.get())) zero->release_state_dict();
}

// Judges the divergence window ending at this step (see above) and starts the next.
void StepLoop::judge_window(bool bar_line_open) {
    const int64_t w_steps = w_sums_.steps;
    const double mean     = w_sums_.loss / double(std::max<int64_t>(w_steps, 1));
    const int64_t first   = step_ - w_steps + 1;
    const double margin   = first <= kDivergenceWindow ? kDivergenceFirstMargin : kDivergenceMargin;
    const bool judged     = w_steps >= kDivergenceMinSteps;
    const bool rose       = !std::isfinite(div_ref_) || mean > div_ref_ + kDivergenceRiseMargin;
    if (judged) div_ref_ = std::isfinite(div_ref_) ? std::min(div_ref_, mean) : mean;
    if (res_.diverged_at_step == 0 && judged && rose && mean > uniform_loss_ + margin) {
        res_.diverged_at_step = step_;
        if (rt_.log) {
            if (bar_line_open && progress_ && progress_->is_tty()) std::fputc('\n', rt_.log);
            std::fprintf(rt_.log,
                         "qkv: warning: training loss %.3f (mean of steps %lld-%lld) is above "
                         "ln(V)=%.3f, the loss of a uniform guess: the learning rate (--lr %g) "
                         "is probably too high\n",
                         mean, (long long)first, (long long)step_, uniform_loss_, opt_.lr);
            std::fflush(rt_.log);
        }
    }
    w_sums_ = {};
}

TrainResult Trainer::fit() {
    MatmulPrecisionGuard precision(opt_.precision);  // forward, backward and validation
    StepLoop loop(*this);
    return loop.run();
}

}  // namespace qkv::train
