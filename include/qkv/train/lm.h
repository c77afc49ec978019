#pragma once
// Training and sampling the decoder-only language model (models/lm.h) on a text such as The Time
// Machine (D2L 9.2): `qkv train --model lm` and `qkv generate`. Characters are the tokens, after
// D2L's preprocessing (lower case, every run of non-letters one space). The text's last part is
// held out for validation perplexity. The run uses the translation models' Trainer, so a model
// folder here has the same checkpoint, metrics.jsonl, --resume and kill behaviour.
// Dim legend: N sequences, T num_steps, V vocabulary.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qkv/data/nmt_data.h"
#include "qkv/data/vocab.h"
#include "qkv/decode/options.h"
#include "qkv/models/lm.h"
#include "qkv/train/run.h"

namespace qkv::train {

/// Where locate_lm_text looks when neither a path nor QKV_LM_DATA is given.
constexpr const char* kLmTextDefaultPath = "../shared/data/timemachine.txt";

struct LmConfig {
    std::string path;              // the text ("" = QKV_LM_DATA, then kLmTextDefaultPath)
    int64_t num_steps = 64;        // T: tokens per training sequence
    double valid_fraction = 0.1;   // the text's last part, held out (0 < f < 0.5)
    models::TransformerLMConfig model;
    TrainOptions train;
    int64_t log_every = 50;
    /// The preprocessed text the model was trained on (config.json data.fingerprint; 0 / 0 =
    /// unknown, a folder from before it was recorded): a resume on another text is refused.
    int64_t fingerprint_chars = 0;
    uint64_t fingerprint_fnv1a64 = 0;
};

/// The presets of `qkv train --model lm --preset NAME`: "lm" (C 128, 2 blocks, 4 heads, RoPE,
/// T 64, batch 32, Adam 1e-3 with 100 warmup steps, 3-minute budget) and "lm-tiny" (C 32, 1
/// block, T 16: seconds, for tests). Throws qkv::Error naming the known presets otherwise.
LmConfig lm_preset(const std::string& name);

/// D2L's preprocessing (9.2.1): letters lower-cased, every run of other characters one space.
std::string preprocess_lm_text(const std::string& text);

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
/// Reads (read_lm_text) and prepares `cfg.path` (QKV_LM_DATA, then the default, when empty).
/// `given`: a trained model's vocabulary (resume). Throws qkv::Error naming the file when it
/// cannot be read as text, is too short for one training and one validation sequence, holds
/// characters outside `given`, or (with `given` and a recorded cfg.fingerprint_*) differs from the
/// text the model was trained on.
LmData load_lm_data(const LmConfig& cfg, const data::Vocab* given = nullptr);

/// Checks every value against its range and the model's rules, naming the key as config.json
/// spells it, the value and the range ("key 'model.window' is 0, expected -1 (all positions) or
/// >= 1"): widths, heads dividing the width, key/value heads dividing the heads, an even head
/// width for RoPE, dropout in [0, 1), window, max_len >= 1, num_steps, valid_fraction, the
/// training numbers. Throws qkv::Error.
void check_lm_config(const LmConfig& cfg);

/// config.json of an LM folder ({"model_kind": "lm", ...}) and back; the reader names the key
/// and the file, and checks the values (check_lm_config).
std::string lm_config_json(const LmConfig& cfg);
LmConfig lm_config_from_json(const std::string& text, const std::string& origin);

/// Trains into opt.out_dir (config.json, vocab.txt, model.safetensors, checkpoint.safetensors,
/// metrics.jsonl; --resume continues, --overwrite replaces). Prints the data, the model, the
/// epochs and "validation perplexity P" (exp of the validation loss, label smoothing off).
/// A fresh run stopped (signal, RunOptions::interrupt) before its first checkpoint removes what it
/// wrote (and the folder when it created it) and returns trained = false; one replacing a model
/// (--overwrite) puts the earlier files back instead (restored_earlier).
/// A resume whose checkpoint already met a stopping rule (epochs, max_steps, time budget) and
/// whose metrics.jsonl is complete returns RunResult::nothing_to_do and touches nothing (`given`
/// names which rules came from flags, as train::run). Throws qkv::Error or ConfigError as
/// train::run does.
RunResult run_lm(const LmConfig& cfg, const RunOptions& opt, const RunOverrides& given = {});

/// A trained LM folder.
struct LmDir {
    LmConfig config;
    data::Vocab vocab;
    std::shared_ptr<models::TransformerLM> model;
};
/// Loads config.json, vocab.txt and model.safetensors (checked). Throws qkv::Error naming the
/// folder or file.
LmDir load_lm_dir(const std::string& dir);
/// Whether `dir`/config.json says "model_kind": "lm" (false when missing or unreadable).
bool is_lm_dir(const std::string& dir);

struct GenerateOptions {
    int64_t max_new_tokens = 100;
    /// 0: greedy; > 0: sampling with this temperature (and top_k / top_p).
    double temperature = 0.0;
    int64_t top_k = 0;
    double top_p = 1.0;
    uint64_t seed = 0;
    bool use_cache = true;  // false: recompute the whole prefix every token (for the benchmark)
};
/// Continues `prompt` (preprocessed as the training text; "" starts at a word boundary) token by
/// token through decode::generate (greedy, or sampling from Generator(seed); <unk> and <pad> never
/// emitted) with the KV cache (use_cache false: TransformerLM::set_recompute_prefix), calling
/// on_token with each new character as it comes. Returns the
/// new text. Throws qkv::Error, before any token is generated, when the prompt holds letters the
/// vocabulary lacks (naming them), when a non-empty prompt has no letter (it would preprocess to
/// nothing), when prompt + max_new_tokens exceeds a sinusoidal model's max_len positions (naming
/// --prompt and --max-new-tokens), or when an option is out of range.
std::string generate_text(LmDir& m, const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(const std::string&)>& on_token = {});

}  // namespace qkv::train
