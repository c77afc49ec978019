#pragma once
// Checkpoint averaging: the parameters of several model folders of one architecture and one
// vocabulary averaged into a new model folder (Vaswani et al. 2017, §6.1: "averaging the last 5
// checkpoints"; the same as fairseq's scripts/average_checkpoints.py and Marian's
// --exponential-smoothing's offline counterpart). `qkv average` is the command.
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/dtype.h"

namespace qkv::train {

struct AverageResult {
    int64_t models = 0;      // model folders averaged
    int64_t tensors = 0;     // parameter tensors
    int64_t parameters = 0;  // scalar parameters
};

/// Averages model.safetensors of `model_dirs` (each a folder written by `qkv train` or by this
/// function) into the new model folder `out_dir`: every parameter is the mean of the inputs',
/// accumulated in float64 and rounded once to float32. config.json, the vocabularies and the
/// SentencePiece model(s) are copied from the first folder; model.safetensors records the inputs
/// in its metadata ("qkv.averaged_from", a JSON array of the folders as given). The folder is
/// written as `out_dir`.tmp.<pid> and renamed into place, so an interrupted run leaves no
/// half-written folder under the name.
/// Checks before anything is written, each error naming the folder or file: at least one input;
/// no folder given twice; `out_dir` not one of the inputs, not inside one, and not an existing
/// non-empty folder or a file; each input loads
/// as `qkv translate` loads it (load_model_dir: config.json, vocabularies, shapes, checksums); the
/// architecture (architecture_differences of config.json: model kind, sizes, heads, ...) and the
/// vocabulary files and SentencePiece models (byte for byte) equal the first folder's; the same
/// parameter names and shapes.
/// `storage` DType::bf16 writes the means as BF16 (rounded once from float64 to bf16: half the
/// file, what `qkv average --dtype bf16` does; one folder in is a conversion). Throws qkv::Error.
AverageResult average_models(const std::vector<std::string>& model_dirs, const std::string& out_dir,
                             DType storage = DType::f32);

/// Averages the last `last` checkpoints a run kept (`qkv train --keep-checkpoints K`:
/// kept_checkpoints(model_dir), by step) into the new model folder `out_dir`, as average_models
/// does, with model_dir's configuration and vocabularies (`qkv average --last K`). Each file is
/// loaded into model_dir's model (load_model: names, shapes, checksum). Throws qkv::Error when
/// last < 1 or the folder keeps fewer than `last` checkpoints (naming how many it keeps), and for
/// what average_models refuses about out_dir.
AverageResult average_last_checkpoints(const std::string& model_dir, int64_t last, const std::string& out_dir,
                                       DType storage = DType::f32);

/// model_dir/checkpoints/model-step-<step, 9 digits>.safetensors: the model file of a kept
/// checkpoint (RunRecorder writes it after model.safetensors when keep_checkpoints > 0).
std::string kept_checkpoint_path(const std::string& model_dir, int64_t step);
/// The kept checkpoints of a model folder, oldest step first (files not named as
/// kept_checkpoint_path names them are ignored; none when the folder has no checkpoints/).
std::vector<std::string> kept_checkpoints(const std::string& model_dir);

/// Whether `filename` (no folder) is a kept checkpoint's name as kept_checkpoint_path writes it:
/// model-step-<digits>.safetensors.
bool is_kept_checkpoint_name(const std::string& filename);
/// Removes all but the newest `keep` kept checkpoints.
void prune_kept_checkpoints(const std::string& model_dir, int64_t keep);

}  // namespace qkv::train
