// The training loop: batches -> loss -> backward -> clip -> Adam, with validation, checkpoints,
// metrics.jsonl, the loss plot and the progress bar around it.
#include "qkv/train/trainer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/data/batcher.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/interrupt.h"
#include "qkv/util/plot.h"
#include "qkv/util/progress.h"
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

double Trainer::evaluate_loss(const data::NmtArrays& d) {
    if (d.n == 0) return std::numeric_limits<double>::quiet_NaN();
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
    double sum = 0;
    int64_t count = 0;
    data::Batch b;
    while (batcher.next(b)) {
        BatchTensors t = to_tensors(b);
        Seq2SeqLoss l = seq2seq_loss(model_, t.src, t.src_valid_len, t.dec_input, t.label, lo);
        sum += l.loss.item() * double(l.positions);
        count += l.positions;
    }
    model_.train(was_training);
    return count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN();
}

namespace {

std::string json_number(double v) {
    return std::isfinite(v) ? nlohmann::json(v).dump() : std::string("null");
}

struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

/// A metrics.jsonl record, keys in the order written.
using Record = nlohmann::ordered_json;

Record number(double v) { return std::isfinite(v) ? Record(v) : Record(nullptr); }

/// One "val" record (a validation point) with "val_loss" null, to be filled in.
Record val_record(int64_t step, double epoch_pos, double train_seconds) {
    return Record{{"kind", "val"}, {"step", step}, {"epoch_pos", number(epoch_pos)},
                  {"val_loss", nullptr}, {"train_seconds", number(train_seconds)}};
}

/// Appends records, one line each, in one write. Throws qkv::Error naming `path` when the write
/// fails (a full disk), instead of losing the records without a word.
void append_records(std::FILE* f, const std::vector<Record>& records, const std::string& path) {
    std::string text;
    for (const auto& r : records) text += r.dump() + '\n';
    errno = 0;
    const bool ok = std::fputs(text.c_str(), f) >= 0 && std::fflush(f) == 0;
    QKV_CHECK(ok, "cannot write '", path, "': appending ", records.size(), " record(s) failed: ",
              std::strerror(errno ? errno : EIO));
}

/// Whether `r` is the epoch record of a run stopped inside that epoch.
template <class Json>
bool is_partial_epoch(const Json& r) {
    return r.value("kind", "") == "epoch" && r.value("partial", false);
}

/// Keeps the metrics.jsonl records a run resumed from the checkpoint of `step` does not write
/// again: those of steps <= step (what the checkpoint covers) except the partial epoch records (a
/// stop's: the resumed run writes that epoch's record, whole, or at its own stop). Rewritten
/// atomically (temp file + rename). So the file ends as an uninterrupted run's. Lines that are not
/// JSON records (a torn last line from a crash, an edit) are dropped; returns how many, and the
/// number of the first in `first_bad` (1-based).
int64_t truncate_metrics(const std::string& path, int64_t step, int64_t& first_bad) {
    first_bad = 0;
    if (!fs::exists(path)) return 0;
    std::ifstream in(path);
    std::ostringstream kept;
    std::string line;
    int64_t n = 0, bad = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        try {
            auto j = nlohmann::json::parse(line);
            if (!j.is_object()) throw std::runtime_error("not an object");
            if (j.value("step", int64_t(0)) > step || is_partial_epoch(j)) continue;
        } catch (const std::exception&) {
            if (bad++ == 0) first_bad = n;
            continue;
        }
        kept << line << '\n';
    }
    util::write_file_atomic(path, kept.str());
    return bad;
}

/// The records of p.pending_records that the metrics.jsonl at `path` lacks (no record of their
/// kind at p.step). Throws qkv::Error naming `ckpt` when pending_records is not a JSON array.
std::vector<Record> missing_records(const std::string& path, const TrainingProgress& p, const std::string& ckpt) {
    std::vector<Record> missing;
    if (p.pending_records.empty()) return missing;
    const Record pending = parse_metadata_json<Record>(ckpt, "qkv.pending_records", p.pending_records);
    QKV_CHECK(pending.is_array(), "checkpoint '", ckpt, "': metadata 'qkv.pending_records' is not a JSON array");
    std::set<std::string> have;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        try {
            auto j = nlohmann::json::parse(line);
            if (j.value("step", int64_t(-1)) == p.step) have.insert(j.value("kind", ""));
        } catch (const std::exception&) {
            // a torn line: not a record
        }
    }
    for (auto& r : pending)
        if (r.is_object() && !have.count(r.value("kind", ""))) missing.push_back(r);
    return missing;
}

/// missing_records without the partial epoch record: a resumed run writes that epoch's record
/// itself (whole, or the partial one again when it stops before its first step).
std::vector<Record> missing_records_to_write(const std::string& path, const TrainingProgress& p,
                                             const std::string& ckpt) {
    std::vector<Record> out = missing_records(path, p, ckpt);
    std::erase_if(out, [](const Record& r) { return is_partial_epoch(r); });
    return out;
}

/// Training/validation loss curves from metrics.jsonl (epoch records), as D2L plots them.
void plot_losses(const std::string& metrics, const std::string& png) {
    std::ifstream in(metrics);
    util::Series tr, va, st;
    tr.label = "train loss (epoch mean)";
    va.label = "validation loss";
    st.label = "train loss (window)";
    st.line_width = 1.0;
    std::string line;
    while (std::getline(in, line)) {
        try {
            auto j = nlohmann::json::parse(line);
            const std::string kind = j.value("kind", "");
            if (kind == "epoch") {
                const double x = j.value("epoch_pos", 0.0);
                if (j["train_loss"].is_number()) {
                    tr.x.push_back(x);
                    tr.y.push_back(j["train_loss"].get<double>());
                }
                if (j["val_loss"].is_number()) {
                    va.x.push_back(x);
                    va.y.push_back(j["val_loss"].get<double>());
                }
            } else if (kind == "step" && j["loss"].is_number()) {
                st.x.push_back(j.value("epoch_pos", 0.0));
                st.y.push_back(j["loss"].get<double>());
            }
        } catch (const std::exception&) {
        }
    }
    if (tr.x.empty() && st.x.empty()) return;
    util::LinePlot p;
    p.title  = "qkv train";
    p.xlabel = "epoch";
    p.ylabel = "cross-entropy";
    if (!st.x.empty()) p.add(st);
    tr.marker = util::Marker::circle;
    p.add(tr);
    if (!va.x.empty()) {
        va.marker = util::Marker::square;
        p.add(va);
    }
    p.save(png);
}

}  // namespace

TrainResult Trainer::fit() {
    const bool files = !rt_.out_dir.empty();
    const std::string ckpt_path    = files ? (fs::path(rt_.out_dir) / "checkpoint.safetensors").string() : "";
    const std::string model_path   = files ? (fs::path(rt_.out_dir) / "model.safetensors").string() : "";
    const std::string metrics_path = files ? (fs::path(rt_.out_dir) / "metrics.jsonl").string() : "";
    const std::string plot_path    = files ? (fs::path(rt_.out_dir) / "loss.png").string() : "";
    if (files) fs::create_directories(rt_.out_dir);

    optim::AdamOptions ao;
    ao.beta1 = opt_.adam_beta1;
    ao.beta2 = opt_.adam_beta2;
    ao.eps   = opt_.adam_eps;
    optim::Adam adam(model_.parameters(), opt_.lr, ao);
    const std::vector<Tensor> params = model_.parameters();

    data::BatcherOptions bo;
    bo.batch_size = opt_.batch_size;
    bo.shuffle    = true;
    bo.seed       = opt_.seed;
    bo.bucket_pool = opt_.bucket_pool;
    bo.trim       = opt_.trim_batches && !opt_.loss_on_padding;
    data::Batcher batcher(train_, bo);
    const int64_t nb = batcher.num_batches();

    // The temporary files of writes cut short by a kill (a second Ctrl-C during the write): the
    // files they were for are intact, and the next write would only replace them.
    bool ckpt_write_cut = false;
    if (files) {
        for (const auto& p : {ckpt_path, model_path, metrics_path, plot_path}) {
            for (const auto& t : util::remove_stale_temp_files(p)) {
                ckpt_write_cut = ckpt_write_cut || p == ckpt_path;
                if (rt_.log) std::fprintf(rt_.log, "removed %s (left by a write that was cut short)\n", t.c_str());
            }
        }
    }
    TrainingProgress prog;
    if (rt_.resume) {
        prog = load_checkpoint(ckpt_path, model_, &adam);
        QKV_CHECK(prog.batch <= nb, "checkpoint '", ckpt_path, "': batch ", prog.batch,
                  " is past the ", nb, " batches per epoch of this data (different data or batch size?)");
        default_generator().manual_seed(prog.rng_seed);
        default_generator().set_offset(prog.rng_offset);
        int64_t       first_bad = 0;
        const int64_t bad       = truncate_metrics(metrics_path, prog.step, first_bad);
        if (rt_.log && bad > 0)
            std::fprintf(rt_.log,
                         "note: %s: %lld line%s not a JSON record, dropped (line %lld first: a write cut "
                         "short, or an edit)\n",
                         metrics_path.c_str(), (long long)bad, bad == 1 ? " is" : "s are", (long long)first_bad);
        if (rt_.log) {
            std::fprintf(rt_.log, "resuming from %s: epoch %lld, batch %lld, step %lld%s\n", ckpt_path.c_str(),
                         (long long)prog.epoch + 1, (long long)prog.batch, (long long)prog.step,
                         ckpt_write_cut ? " (the write of a later checkpoint was cut short: its steps are "
                                          "trained again)"
                                        : "");
            if (!prog.has_running_sums && prog.step > 0)
                std::fprintf(rt_.log,
                             "note: %s has no running sums (written by an older qkv): epoch %lld's train loss "
                             "and the first metrics.jsonl step record cover the resumed steps only\n",
                             ckpt_path.c_str(), (long long)prog.epoch + 1);
        }
    } else if (files) {
        // A fresh run: an earlier run's files in this folder go now, not at the first checkpoint
        // (until then its model.safetensors would pair old weights with the new config.json, and
        // --resume would continue the wrong run).
        for (const auto& p : {metrics_path, ckpt_path, model_path}) fs::remove(p);
    }
    const std::unique_ptr<std::FILE, CloseFile> metrics(files ? std::fopen(metrics_path.c_str(), "a") : nullptr);
    QKV_CHECK(!files || metrics, "cannot open '", metrics_path, "' for writing");

    TrainResult res;
    res.first_step = prog.step;
    int64_t total_steps = opt_.epochs * nb;
    if (opt_.max_steps > 0) total_steps = std::min(total_steps, opt_.max_steps);
    util::ProgressOptions po;
    po.plain_interval_s = rt_.progress_plain_interval_s;
    std::unique_ptr<util::ProgressBar> bar;

    Seq2SeqLossOptions lo;
    lo.pad             = pad_;
    lo.on_padding      = opt_.loss_on_padding;
    lo.label_smoothing = opt_.label_smoothing;

    double train_seconds = prog.train_seconds;
    int64_t step = prog.step;
    // The validation loss of the model after `val_step` steps: a stop right after a mid-epoch
    // validation point (the signal came while it ran) reuses it instead of validating again.
    int64_t val_step = -1;
    double val_loss = std::numeric_limits<double>::quiet_NaN();
    auto validate = [&]() {
        if (val_step != step) {
            if (on_validation) on_validation(step);
            // A second Ctrl-C kills during the validation too (the first waits for it to end): say
            // what is saved. Every validation follows the checkpoint of its step (below).
            util::KillNote note(files ? detail::str("qkv: interrupted during the validation at step ", step, "; ",
                                                    ckpt_path, " holds step ", step,
                                                    " (--resume continues from it and validates again)")
                                      : detail::str("qkv: interrupted during the validation at step ", step,
                                                    " (no output folder: nothing saved)"),
                                "");
            val_loss = evaluate_loss(valid_);
            model_.train();
            val_step = step;
        }
        return val_loss;
    };
    // A checkpoint of the state after `batch` batches of `epoch` (batch == 0: at its start), with
    // the records the validation that follows it completes. Every checkpoint comes before that
    // validation (10-60 s on real data): a second Ctrl-C, which kills at once (saying so: the
    // KillNote in `validate`), then loses at most the validation, and the resumed run writes the
    // records it finds missing (below). A stop
    // right after a mid-epoch validation point would write the same state again (same step,
    // batch, RNG and train_seconds): one write per step is enough (and `validate` gives it that
    // point's loss at once, so its record follows without a wait).
    int64_t saved_step = rt_.resume ? prog.step : -1;  // a resumed run's checkpoint holds its state
    // The running sums of the metrics.jsonl "step" record (log_sums) and of the divergence window
    // (w_sums) in progress; `epoch_sums` is passed.
    RunningSums log_sums = prog.log_sums, w_sums = prog.window_sums;
    // The divergence check's reference (below); a fresh run's is step 1's loss.
    double div_ref = prog.divergence_reference;
    auto checkpoint = [&](int64_t epoch, int64_t batch, const std::vector<Record>& pending,
                          const RunningSums& epoch_sums) {
        if (!files || step == saved_step) return;
        const int64_t before = saved_step;
        saved_step = step;
        TrainingProgress p;
        p.epoch           = epoch;
        p.batch           = batch;
        p.step            = step;
        p.rng_seed        = default_generator().seed();
        p.rng_offset      = default_generator().offset();
        p.train_seconds   = train_seconds;
        p.pending_records = pending.empty() ? "" : Record(pending).dump();
        p.epoch_sums      = epoch_sums;
        p.log_sums        = log_sums;
        p.window_sums     = w_sums;
        p.divergence_reference = div_ref;
        // A kill (a second Ctrl-C) during a write leaves the earlier file whole: say which step it
        // holds, and remove the half-written temporary.
        {
            util::KillNote note(before < 0 ? detail::str("qkv: interrupted while writing the first checkpoint; ", ckpt_path,
                                                         " is not saved")
                                           : detail::str("qkv: interrupted while writing the checkpoint; ", ckpt_path,
                                                         " still holds step ", before, " (--resume continues from it)"),
                                util::atomic_temp_path(ckpt_path));
            save_checkpoint(ckpt_path, model_, adam, p, rt_.checkpoint_metadata);
        }
        {
            util::KillNote note(detail::str("qkv: interrupted while writing ", model_path, "; ", ckpt_path,
                                            " holds step ", step, " (--resume continues from it)"),
                                util::atomic_temp_path(model_path));
            save_model(model_path, model_, rt_.checkpoint_metadata);
        }
        if (on_checkpoint) on_checkpoint(p);
    };
    if (rt_.resume) {
        // The run that wrote the checkpoint was killed before the records of the validation after
        // it: the model is the checkpoint's, so validating now gives the loss it would have written.
        std::vector<Record> missing = missing_records_to_write(metrics_path, prog, ckpt_path);
        if (!missing.empty()) {
            const double vl = validate();
            for (auto& r : missing) r["val_loss"] = number(vl);
            append_records(metrics.get(), missing, metrics_path);
            plot_losses(metrics_path, plot_path);
            if (rt_.log)
                std::fprintf(rt_.log, "validation at step %lld (the stopped run did not finish it): val loss %.4f\n",
                             (long long)step, vl);
        }
    }
    // The reason to stop before the next step, or "".
    auto stop_reason = [&]() -> std::string {
        if (opt_.max_steps > 0 && step >= opt_.max_steps) return "max_steps";
        if (opt_.time_budget_s > 0 && train_seconds >= opt_.time_budget_s) return "time_budget";
        if (rt_.interrupt && *rt_.interrupt) return "interrupted";
        return "";
    };
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
    const double uniform_loss = std::log(double(model_.tgt_vocab_size()));
    auto judge_window = [&](bool bar_line_open) {
        const int64_t w_steps = w_sums.steps;
        const double mean = w_sums.loss / double(std::max<int64_t>(w_steps, 1));
        const int64_t first = step - w_steps + 1;
        const double margin = first <= kDivergenceWindow ? kDivergenceFirstMargin : kDivergenceMargin;
        const bool judged = w_steps >= kDivergenceMinSteps;
        const bool rose = !std::isfinite(div_ref) || mean > div_ref + kDivergenceRiseMargin;
        if (judged) div_ref = std::isfinite(div_ref) ? std::min(div_ref, mean) : mean;
        if (res.diverged_at_step == 0 && judged && rose && mean > uniform_loss + margin) {
            res.diverged_at_step = step;
            if (rt_.log) {
                if (bar_line_open && bar && bar->is_tty()) std::fputc('\n', rt_.log);
                std::fprintf(rt_.log,
                             "qkv: warning: training loss %.3f (mean of steps %lld-%lld) is above "
                             "ln(V)=%.3f, the loss of a uniform guess: the learning rate (--lr %g) "
                             "is probably too high\n",
                             mean, (long long)first, (long long)step, uniform_loss, opt_.lr);
                std::fflush(rt_.log);
            }
        }
        w_sums = {};
    };

    model_.train();
    int64_t run_tokens = 0;
    double run_seconds = 0;
    // the window of the progress fields
    double d_loss = 0, d_secs = 0;
    int64_t d_steps = 0, d_tokens = 0;
    double shown_loss = std::numeric_limits<double>::quiet_NaN(), shown_tps = 0;
    double next_val = opt_.val_every_s > 0
                          ? (std::floor(train_seconds / opt_.val_every_s) + 1) * opt_.val_every_s
                          : 0.0;

    for (int64_t epoch = prog.epoch; epoch < opt_.epochs; ++epoch) {
        batcher.start_epoch(epoch);
        const int64_t first_batch = epoch == prog.epoch ? prog.batch : 0;
        // the epoch's steps, those before a resumed run's checkpoint included
        RunningSums ep = epoch == prog.epoch ? prog.epoch_sums : RunningSums{};
        std::string stop;
        // A validation point at the epoch's last step, or where the run stops: the epoch end's
        // validation serves it.
        bool val_point_at_end = false;
        int64_t b = first_batch;
        if (rt_.progress) {
            bar = std::make_unique<util::ProgressBar>(
                nb, detail::str("epoch ", epoch + 1, "/", opt_.epochs), po);
            if (first_batch > 0) bar->update(first_batch);
        }
        for (; b < nb; ++b) {
            if (stop = stop_reason(); !stop.empty()) break;
            util::Timer timer;
            BatchTensors t = to_tensors(batcher.batch(b));
            adam.set_lr(optim::scheduled_lr(opt_.schedule, opt_.lr, step + 1, opt_.warmup_steps, total_steps));
            Seq2SeqLoss l = seq2seq_loss(model_, t.src, t.src_valid_len, t.dec_input, t.label, lo);
            adam.zero_grad();
            l.loss.backward();
            // Clipping folded into the update: one pass over the gradients fewer (≈1 % of an
            // anchor step), the same parameters bit for bit.
            adam.step(opt_.clip_norm > 0 ? optim::grad_clip_factor(params, opt_.clip_norm).scale : 1.0);
            const double loss = l.loss.item();
            QKV_CHECK(std::isfinite(loss), "train: the loss is ", loss, " at step ", step + 1,
                      " (lower the learning rate)");
            ++step;
            if (step == 1) div_ref = loss;
            const double secs = timer.seconds();
            train_seconds += secs;
            run_seconds += secs;
            run_tokens += l.tokens;
            res.step_losses.push_back(loss);
            for (RunningSums* s : {&ep, &log_sums, &w_sums}) {
                s->loss += loss;
                s->seconds += secs;
                ++s->steps;
                s->tokens += l.tokens;
            }
            // metrics.jsonl: the mean over the steps since the last record, at global step
            // multiples of log_every (a resumed run writes its records at the same steps).
            if (metrics && rt_.log_every > 0 && step % rt_.log_every == 0) {
                std::fprintf(metrics.get(),
                             "{\"kind\":\"step\",\"step\":%lld,\"epoch_pos\":%s,\"loss\":%s,"
                             "\"lr\":%s,\"tokens_per_s\":%s,\"train_seconds\":%s}\n",
                             (long long)step, json_number(double(epoch) + double(b + 1) / double(nb)).c_str(),
                             json_number(log_sums.loss / double(log_sums.steps)).c_str(),
                             json_number(adam.lr()).c_str(),
                             json_number(double(log_sums.tokens) / std::max(log_sums.seconds, 1e-9)).c_str(),
                             json_number(train_seconds).c_str());
                std::fflush(metrics.get());
                log_sums = {};
            }
            // progress bar: loss and target tokens/s over about the last second
            d_loss += loss;
            d_secs += secs;
            ++d_steps;
            d_tokens += l.tokens;
            if (d_secs >= 1.0 || !std::isfinite(shown_loss)) {
                shown_loss = d_loss / double(d_steps);
                shown_tps  = double(d_tokens) / std::max(d_secs, 1e-9);
                d_loss = d_secs = 0;
                d_steps = d_tokens = 0;
            }
            if (bar)
                bar->update(1, {{"loss", shown_loss}, {"tok/s", shown_tps}});
            if (step % kDivergenceWindow == 0) judge_window(true);
            if (opt_.val_every_s > 0 && train_seconds >= next_val) {
                next_val = (std::floor(train_seconds / opt_.val_every_s) + 1) * opt_.val_every_s;
                if (b + 1 == nb || !stop_reason().empty()) {
                    val_point_at_end = true;
                } else {
                    // Inside the epoch: checkpoint (the batch position, as a stop inside an epoch
                    // writes), validate, "val" record.
                    std::vector<Record> recs{
                        val_record(step, double(epoch) + double(b + 1) / double(nb), train_seconds)};
                    checkpoint(epoch, b + 1, recs, ep);
                    recs[0]["val_loss"] = number(validate());
                    if (metrics) append_records(metrics.get(), recs, metrics_path);
                    if (rt_.log && !bar) {
                        std::fprintf(rt_.log, "validation at step %lld (%s of training): val loss %.4f%s\n",
                                     (long long)step, util::format_duration(train_seconds).c_str(), val_loss,
                                     files ? ", checkpoint saved" : "");
                        std::fflush(rt_.log);
                    }
                }
            }
        }
        // End of the epoch, or the run stopped inside it.
        const bool partial = b < nb;
        if (bar) bar->finish();
        // A stop before the first step of a resumed epoch writes its partial record again (the
        // resume removed it), with the checkpoint's sums; one at its start writes none.
        if (ep.steps > 0 || !partial) {
            EpochRecord rec;
            rec.epoch         = epoch + 1;
            rec.step          = step;
            rec.train_loss    = ep.steps > 0 ? ep.loss / double(ep.steps) : std::numeric_limits<double>::quiet_NaN();
            rec.train_seconds = train_seconds;
            rec.tokens_per_s  = ep.seconds > 0 ? double(ep.tokens) / ep.seconds : 0;
            rec.partial       = partial;
            const double pos  = double(epoch) + double(b) / double(nb);
            // The checkpoint first, then the one validation, then the records: a "val" record
            // when a validation point fell here (the --val-every series stays whole), and the
            // epoch record.
            std::vector<Record> recs;
            if (val_point_at_end) recs.push_back(val_record(step, pos, train_seconds));
            recs.push_back(Record{{"kind", "epoch"},
                                  {"epoch", rec.epoch},
                                  {"epoch_pos", number(pos)},
                                  {"step", step},
                                  {"train_loss", number(rec.train_loss)},
                                  {"val_loss", nullptr},
                                  {"train_seconds", number(train_seconds)},
                                  {"tokens_per_s", number(rec.tokens_per_s)},
                                  {"partial", partial}});
            checkpoint(partial ? epoch : epoch + 1, partial ? b : 0, recs, partial ? ep : RunningSums{});
            rec.val_loss = validate();
            if (metrics) {
                for (auto& r : recs) r["val_loss"] = number(rec.val_loss);
                append_records(metrics.get(), recs, metrics_path);
                plot_losses(metrics_path, plot_path);
            }
            if (rt_.log) {
                // Remaining time: the smaller of the steps left at this epoch's speed and the budget.
                double eta = ep.steps > 0 ? double(total_steps - step) * ep.seconds / double(ep.steps) : 0;
                if (opt_.time_budget_s > 0) eta = std::min(eta, std::max(0.0, opt_.time_budget_s - train_seconds));
                std::fprintf(rt_.log,
                             "epoch %lld/%lld%s: step %lld, train loss %.4f, val loss %.4f, "
                             "%.0f target tokens/s, %s elapsed, ETA %s\n",
                             (long long)rec.epoch, (long long)opt_.epochs, partial ? " (partial)" : "",
                             (long long)step, rec.train_loss, rec.val_loss, rec.tokens_per_s,
                             util::format_duration(train_seconds).c_str(),
                             util::format_duration(partial ? 0.0 : eta).c_str());
                std::fflush(rt_.log);
            }
            res.epochs.push_back(rec);
            if (on_epoch_end) on_epoch_end(rec);
        }
        if (partial) {
            res.stop_reason = stop;
            break;
        }
    }
    if (w_sums.steps > 0) judge_window(false);  // the run's last window, when partial
    if (res.stop_reason.empty()) res.stop_reason = "epochs";
    res.steps         = step;
    res.train_seconds = train_seconds;
    res.tokens_per_s  = run_seconds > 0 ? double(run_tokens) / run_seconds : 0;
    model_.eval();
    return res;
}

bool has_missing_records(const std::string& out_dir, const TrainingProgress& p) {
    const fs::path dir(out_dir);
    return !missing_records((dir / "metrics.jsonl").string(), p, (dir / "checkpoint.safetensors").string()).empty();
}

}  // namespace qkv::train
