#pragma once
// Checkpoints and model files, both safetensors (io/safetensors.h), both written atomically:
// - the model file (model.safetensors): parameters under their PyTorch state_dict names, F32,
//   loadable by safetensors.torch.load_file into D2L's PyTorch model;
// - the training checkpoint (checkpoint.safetensors): "model.<name>" parameters, "optim.<key>"
//   optimizer state, and in the metadata the format tag, version, progress (epoch, batch,
//   step), the default generator's seed/offset (dropout), the elapsed training time and the
//   running sums of the records in progress — enough to resume exactly — and the metrics records
//   still to be written after it (optional).
// Both carry a checksum of their data section, so a corrupted byte is caught, not trained on.
#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "qkv/nn/module.h"
#include "qkv/optim/optimizer.h"

namespace qkv::runtime {

/// Metadata value of "qkv.format" in a training checkpoint, and its version.
constexpr const char* kCheckpointFormat = "qkv-checkpoint";
constexpr int kCheckpointVersion = 1;

/// Sums over a run of steps (the epoch in progress, a metrics.jsonl "step" record's window, a
/// divergence-check window).
struct RunningSums {
    double loss = 0;     // sum of the step losses, in step order
    double seconds = 0;  // training time
    int64_t steps = 0;
    int64_t tokens = 0;  // non-pad target tokens
    bool operator==(const RunningSums&) const = default;
};

/// Where training stands; saved with every checkpoint.
struct TrainingProgress {
    int64_t epoch = 0;          // epoch in progress (0-based)
    int64_t batch = 0;          // batches of `epoch` already done (0: at its start)
    int64_t step  = 0;          // optimizer steps done in total
    uint64_t rng_seed = 0;      // default generator (core/generator.h): seed and offset
    uint64_t rng_offset = 0;
    double train_seconds = 0;   // training wall-clock so far (validation excluded)
    /// The metrics.jsonl records the validation that follows this checkpoint completes: a JSON
    /// array of objects with "val_loss" null (Trainer::fit checkpoints before it validates, and a
    /// resumed run that finds them missing validates and writes them); "": none.
    std::string pending_records;
    /// The sums of the records in progress at this point (metadata "qkv.running_sums"), so a
    /// resumed run's records cover the same steps as an uninterrupted run's: `epoch_sums` of the
    /// `batch` steps of `epoch` done (the epoch record's train loss and tokens/s), `log_sums` since
    /// the last metrics.jsonl "step" record, `window_sums` of the divergence window in progress.
    RunningSums epoch_sums, log_sums, window_sums;
    /// What the divergence check compares a window with (trainer.h kDivergenceRiseMargin): the
    /// lowest of step 1's loss and the means of the windows judged so far (metadata
    /// "qkv.divergence_reference"); NaN: unknown (before step 1, or an older checkpoint).
    double divergence_reference = std::numeric_limits<double>::quiet_NaN();
    /// False when the checkpoint has no "qkv.running_sums" (written by an older qkv): the sums
    /// above are zero, and a resumed run's first records cover its own steps only.
    bool has_running_sums = true;
};

/// Writes a training checkpoint atomically (readers see the old file or the new one). `extra`
/// goes into the metadata (e.g. "qkv.config" = the run's config.json text). Throws qkv::Error
/// naming the path on I/O errors.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const TrainingProgress& progress,
                     const std::map<std::string, std::string>& extra = {});

/// Loads a checkpoint into `model` (strict: every name and shape must match) and, when non-null,
/// `opt`. Returns the saved progress (the caller restores the generator). Throws qkv::Error
/// "checkpoint '<path>' not found" when the file does not exist, and "checkpoint '<path>': ..."
/// when it is unreadable, truncated or corrupt (safetensors validation, checksum mismatch), is
/// not a qkv checkpoint, has another version, or does not fit the model.
TrainingProgress load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt);

/// The progress saved in a checkpoint (epoch, batch, step, ...), without loading its tensors (the
/// file is validated and checksummed as load_checkpoint does). Throws qkv::Error like
/// load_checkpoint.
TrainingProgress read_checkpoint_progress(const std::string& path);

/// Metadata of a checkpoint or model file (validated and checksummed as load_checkpoint does).
/// `what` names the file in errors ("checkpoint '<path>': ...", or "model file" as load_model says).
std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path,
                                                            const std::string& what = "checkpoint");

/// The JSON text a metadata entry holds ("qkv.config", "qkv.pending_records"), parsed into Json
/// (nlohmann::json or nlohmann::ordered_json). The checksum covers the tensors, not the metadata,
/// so damage there shows up here: throws qkv::Error "<what> '<path>': metadata '<key>' is not
/// valid JSON (<the parser's message>)", or "...: duplicate key \"<dotted key>\" ..." when an
/// object repeats a key.
template <class Json>
Json parse_metadata_json(const std::string& path, const std::string& key, const std::string& text,
                         const std::string& what = "checkpoint");
extern template nlohmann::json parse_metadata_json<nlohmann::json>(const std::string&, const std::string&,
                                                                   const std::string&, const std::string&);
extern template nlohmann::ordered_json parse_metadata_json<nlohmann::ordered_json>(const std::string&,
                                                                                   const std::string&,
                                                                                   const std::string&,
                                                                                   const std::string&);

/// Writes the parameters (PyTorch names and order) atomically, with metadata
/// {"format": "pt", "qkv.checksum": ...} plus `metadata`, stored as `storage`: DType::f32 (F32,
/// the default) or DType::bf16 (BF16, each value rounded to nearest even: half the file; loaders
/// widen it back exactly). Throws qkv::Error on I/O errors and for another storage dtype.
void save_model(const std::string& path, const nn::Module& model,
                const std::map<std::string, std::string>& metadata = {}, DType storage = DType::f32);

/// Loads a model file written by save_model (or any safetensors file with the same names and
/// shapes; the checksum is checked when present). Strict. Throws qkv::Error "model file
/// '<path>': ..." like load_checkpoint.
void load_model(const std::string& path, nn::Module& model);

}  // namespace qkv::runtime
