#pragma once
// Checkpoint averaging: the parameters of several model folders of one architecture and one
// vocabulary averaged into a new model folder (Vaswani et al. 2017, §6.1: "averaging the last 5
// checkpoints"; the same as fairseq's scripts/average_checkpoints.py and Marian's
// --exponential-smoothing's offline counterpart). `qkv average` is the command.
#include <cstdint>
#include <string>
#include <vector>

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
/// `out_dir` not one of the inputs and not an existing non-empty folder or a file; each input loads
/// as `qkv translate` loads it (load_model_dir: config.json, vocabularies, shapes, checksums); the
/// architecture (architecture_differences of config.json: model kind, sizes, heads, ...) and the
/// vocabulary files and SentencePiece models (byte for byte) equal the first folder's; the same
/// parameter names and shapes.
/// Throws qkv::Error.
AverageResult average_models(const std::vector<std::string>& model_dirs, const std::string& out_dir);

}  // namespace qkv::train
