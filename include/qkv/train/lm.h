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
};

/// The presets of `qkv train --model lm --preset NAME`: "lm" (C 128, 2 blocks, 4 heads, RoPE,
/// T 64, batch 32, Adam 1e-3 with 100 warmup steps, 3-minute budget) and "lm-tiny" (C 32, 1
/// block, T 16: seconds, for tests). Throws qkv::Error naming the known presets otherwise.
LmConfig lm_preset(const std::string& name);

/// D2L's preprocessing (9.2.1): letters lower-cased, every run of other characters one space.
std::string preprocess_lm_text(const std::string& text);

/// Character sequences for training: the text's tokens split at (1 − valid_fraction), each part
/// cut into windows of T + 1 tokens every T tokens (dec_input = window[:-1], label = window[1:];
/// the source is a dummy the model ignores).
struct LmData {
    data::Vocab vocab;           // <unk> <pad> ' ' then the letters seen, in order
    data::NmtArrays train, valid;
    int64_t train_tokens = 0, valid_tokens = 0;
    std::string summary;         // "timemachine.txt: 173,428 characters, vocabulary 28, ..."
};
/// Reads and prepares `cfg.path` (QKV_LM_DATA, then the default, when empty). `given`: a trained
/// model's vocabulary (resume). Throws qkv::Error naming the file when it is missing or too short
/// for one training and one validation sequence, or when it holds characters outside `given`.
LmData load_lm_data(const LmConfig& cfg, const data::Vocab* given = nullptr);

/// config.json of an LM folder ({"model_kind": "lm", ...}) and back; the reader names the key.
std::string lm_config_json(const LmConfig& cfg);
LmConfig lm_config_from_json(const std::string& text, const std::string& origin);

/// Trains into opt.out_dir (config.json, vocab.txt, model.safetensors, checkpoint.safetensors,
/// metrics.jsonl; --resume continues, --overwrite replaces). Prints the data, the model, the
/// epochs and "validation perplexity P" (exp of the validation loss, label smoothing off).
/// Throws qkv::Error or ConfigError as train::run does.
RunResult run_lm(const LmConfig& cfg, const RunOptions& opt);

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
/// Continues `prompt` (preprocessed as the training text; empty allowed) token by token with the
/// KV cache, calling on_token with each new character as it comes. Returns the new text. Throws
/// qkv::Error when the prompt holds characters the vocabulary lacks (after preprocessing it
/// cannot: letters unseen in training are refused, naming them) or an option is out of range.
std::string generate_text(LmDir& m, const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(const std::string&)>& on_token = {});

}  // namespace qkv::train
