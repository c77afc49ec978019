#pragma once
// The decoder-only language model's data and sampling (models/lm.h) on a text such as The Time
// Machine (D2L 9.2): what `qkv train --model lm` reads and `qkv generate` does. The language model
// is one more model kind of the run configuration (runtime::ModelKind::lm: its rows of the field
// table, its presets "lm" and "lm-tiny") and of the model folder (runtime::ModelDir); train::run
// trains it. Characters are the tokens, after D2L's preprocessing (lower case, every run of
// non-letters one space). The text's last part is held out for validation perplexity. The run uses
// the translation models' Trainer, so its folder has the same checkpoint, metrics.jsonl, --resume
// and kill behaviour.
// Dim legend: N sequences, T num_steps, V vocabulary.
#include <cstdint>
#include <functional>
#include <string>

#include "qkv/data/nmt_data.h"
#include "qkv/data/vocab.h"
#include "qkv/decode/options.h"
#include "qkv/models/lm.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/run_config.h"
#include "qkv/runtime/generate.h"

namespace qkv::train {

/// Where locate_lm_text looks when neither a path nor QKV_LM_DATA is given.
constexpr const char* kLmTextDefaultPath = "../shared/data/timemachine.txt";

/// The text of a language-model --data file: plain UTF-8 or gzip-compressed (detected by its
/// magic bytes, data::read_corpus_file). Throws qkv::Error naming the file when it is missing, a
/// folder, a zip archive ("unpack it first"), binary (a NUL byte; its line), not UTF-8 (the line
/// and byte offset of the first ill-formed sequence), or a truncated/corrupt gzip stream.
std::string read_lm_text(const std::string& path);

/// "6.763" for a perplexity exp(loss); "1.2e+70" past 1e6; "inf (exp of the loss overflows: the
/// run diverged)" past double's range; "nan (...)" when the loss itself is NaN or inf.
std::string perplexity_text(double loss);

/// Character sequences for training: the text's tokens split at (1 − valid_fraction), each part
/// cut into windows of T + 1 tokens every T tokens (dec_input = window[:-1], label = window[1:];
/// the source is a dummy the model ignores).
struct LmData {
    data::Vocab vocab;           // <unk> <pad> ' ' then the letters seen, in order
    data::NmtArrays train, valid;
    int64_t train_tokens = 0, valid_tokens = 0;
    int64_t fingerprint_chars = 0;       // characters after preprocessing
    uint64_t fingerprint_fnv1a64 = 0;    // FNV-1a 64 of the preprocessed text
    std::string summary;         // "timemachine.txt: 173,428 characters, vocabulary 28, ..."
};
/// Reads (read_lm_text) and prepares `cfg.data.path` (QKV_LM_DATA, then the default, when empty)
/// into sequences of cfg.data.num_steps, the last cfg.data.valid_fraction held out. `given`: a
/// trained model's vocabulary (resume). Throws qkv::Error naming the file when it cannot be read as
/// text, is too short for one training and one validation sequence, holds characters outside
/// `given`, or (with `given` and a recorded cfg.data.fingerprint.characters) differs from the text
/// the model was trained on.
LmData load_lm_data(const runtime::RunConfig& cfg, const data::Vocab* given = nullptr);

/// The path of the language model's text: `path`, else QKV_LM_DATA, else kLmTextDefaultPath.
/// Throws qkv::Error when it is a folder or missing (naming where the path came from).
std::string locate_lm_text(const std::string& path);

}  // namespace qkv::train
