#pragma once
// The files of a training run in its output folder, as Trainer::fit keeps them (spec §1.13):
// checkpoint.safetensors and model.safetensors (each write guarded by a util::KillNote saying what
// a kill during it leaves), metrics.jsonl (one JSON record per line: "step", "val", "epoch"), the
// resume (load, truncating metrics.jsonl to the checkpoint's step) and the records a run killed
// while validating did not write. The metrics.jsonl reader is a plain function on text
// (truncate_metrics_text) so that it can be tested and fuzzed without files.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "qkv/nn/module.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/hooks.h"

namespace qkv::train {

/// A metrics.jsonl record, keys in the order written.
using MetricsRecord = nlohmann::ordered_json;

/// What truncate_metrics_text keeps of a metrics.jsonl.
struct MetricsTruncation {
    std::string kept;         // the kept lines, each ending in '\n'
    int64_t bad_lines = 0;    // lines that are not JSON objects (dropped)
    int64_t first_bad = 0;    // 1-based number of the first of them (0: none)
};

/// The records of a metrics.jsonl (`text`) that a run resumed from the checkpoint of `step` does
/// not write again: those of steps <= step (what the checkpoint covers) except the partial epoch
/// records (a stop's: the resumed run writes that epoch's record, whole, or at its own stop).
/// Empty lines go; lines that are not JSON objects (a torn last line from a crash, an edit) are
/// dropped and counted. Never throws on any input text.
MetricsTruncation truncate_metrics_text(const std::string& text, int64_t step);

/// The records of p.pending_records (the checkpoint's list of what the validation after it writes)
/// that `metrics_text` lacks: no record of their kind at p.step. Lines that are not JSON are
/// skipped. Throws qkv::Error naming `ckpt_path` when pending_records is not a JSON array (of
/// objects: other elements are ignored).
std::vector<MetricsRecord> missing_records(const std::string& metrics_text, const TrainingProgress& p,
                                           const std::string& ckpt_path);

/// Whether out_dir/metrics.jsonl lacks records that the validation after the checkpoint `p`
/// (read from out_dir/checkpoint.safetensors) writes (TrainingProgress::pending_records): the run
/// was killed while it validated. Trainer::fit resuming from it writes them first, also when it
/// has no step left to train. Throws qkv::Error when p.pending_records is not a JSON array.
bool has_missing_records(const std::string& out_dir, const TrainingProgress& p);

/// A run's files in one output folder. With out_dir "" it records nothing (every call is a no-op
/// and missing records are none). Messages (removed temporaries, resume notes) go to `log`
/// (nullptr: silent).
class RunRecorder {
public:
    /// writes false (a data-parallel rank other than 0): the folder is only read (resume loads the
    /// checkpoint and the generator's state); nothing is created, removed, truncated or written.
    /// keep_checkpoints > 0: save() also writes the model to out_dir/checkpoints/ (average.h
    /// kept_checkpoint_path) and keeps the newest keep_checkpoints of them; a fresh start()
    /// removes the folder's earlier ones.
    RunRecorder(std::string out_dir, std::FILE* log, std::map<std::string, std::string> metadata,
                bool writes = true, int64_t keep_checkpoints = 0);
    ~RunRecorder();
    RunRecorder(const RunRecorder&) = delete;
    RunRecorder& operator=(const RunRecorder&) = delete;

    /// Writes files (an output folder, and not a reading-only data-parallel rank).
    bool active() const { return !dir_.empty() && writes_; }
    const std::string& checkpoint_path() const { return ckpt_; }
    const std::string& metrics_path() const { return metrics_; }

    /// Creates the folder and removes the temporary files of writes that were cut short (a kill
    /// during a write: the files they were for are intact), saying so on the log. Then a fresh run
    /// (resume false) removes an earlier run's metrics.jsonl, checkpoint and model (until its first
    /// checkpoint the old model.safetensors would pair old weights with a new config.json) and
    /// opens a new metrics.jsonl. Throws qkv::Error when it cannot be opened.
    void start(bool resume);
    /// Loads the checkpoint into `model` and `opt` and the default generator's state, checks its
    /// batch position against `batches` per epoch, truncates metrics.jsonl to its step
    /// (truncate_metrics_text, rewritten atomically), opens it for appending and says "resuming
    /// from ..." with notes on the log. Call after start(true). Throws qkv::Error from load_checkpoint or naming the batch.
    TrainingProgress resume(nn::Module& model, optim::Optimizer& opt, int64_t batches);

    /// Appends a "step" record (one line, flushed).
    void write_step(const LoggedStep& s);
    /// Appends records, one line each, in one write.
    void append(const std::vector<MetricsRecord>& records);
    /// missing_records of this folder's metrics.jsonl without the partial epoch record (a resumed
    /// run writes that epoch's record itself).
    std::vector<MetricsRecord> missing_records_to_write(const TrainingProgress& p) const;

    /// Writes the checkpoint (model, optimizer state, `p`) and then model.safetensors, each with a
    /// KillNote saying which step the folder still holds. Returns false without writing when the
    /// checkpoint already holds p.step (one write per step; a resumed run's holds its own step).
    bool save(const TrainingProgress& p, const nn::Module& model, const optim::Optimizer& opt);
    /// The KillNote message for a kill during the validation at `step`.
    std::string validation_kill_note(int64_t step) const;

private:
    void open_metrics();

    std::string dir_, ckpt_, model_, metrics_;
    bool writes_ = true;
    std::FILE* log_;
    std::map<std::string, std::string> metadata_;
    std::FILE* metrics_file_ = nullptr;
    bool ckpt_write_cut_ = false;  // start() removed a temporary of the checkpoint
    int64_t saved_step_ = -1;      // the step the checkpoint file holds (-1: none of this run)
    int64_t keep_ = 0;             // kept checkpoints (0: none)
};

/// A "val" record (a validation point) with "val_loss" null, to be filled in.
MetricsRecord val_record(int64_t step, double epoch_pos, double train_seconds);
/// An "epoch" record with "val_loss" null, to be filled in.
MetricsRecord epoch_record(const EpochRecord& r, double epoch_pos);
/// A JSON number, or null when v is not finite.
MetricsRecord json_number(double v);

}  // namespace qkv::train
