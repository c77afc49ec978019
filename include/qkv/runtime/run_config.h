#pragma once
// A training run's whole configuration (data, model, optimisation, decoding) as one typed
// struct, the named presets of `qkv train --preset`, and its config.json form.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "qkv/models/bahdanau.h"
#include "qkv/models/lm.h"
#include "qkv/models/transformer.h"
#include "qkv/ops/precision.h"
#include "qkv/optim/optimizer.h"
#include "qkv/runtime/translation_data.h"

namespace qkv::runtime {

/// Hyper-parameters of a run (saved in config.json).
struct TrainOptions {
    int64_t epochs = 30;
    int64_t max_steps = 0;         // stop after this many optimizer steps in total (0: no limit)
    double time_budget_s = 0;      // stop at the first step boundary past this much training
                                   // time, validation excluded (0: none; the anchor's clock)
    int64_t batch_size = 128;
    double lr = 1e-3;
    double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
    double clip_norm = 1.0;        // D2L's θ = 1; 0: no clipping
    bool loss_on_padding = false;  // D2L EN's unmasked loss (train/loss.h)
    double label_smoothing = 0.0;
    optim::LrSchedule schedule = optim::LrSchedule::constant;
    int64_t warmup_steps = 0;      // for the warmup schedules
    uint64_t seed = 0;             // batch order (data/batcher.h); the caller seeds the default
                                   // generator (init, dropout) with it before building the model
    int64_t val_batch_size = 256;
    /// Cut each batch to its longest source/target (data::BatcherOptions::trim); ignored with
    /// loss_on_padding. Same loss, fewer padded positions computed.
    bool trim_batches = false;
    /// Length bucketing pool in batches (data::BatcherOptions::bucket_pool; 0: off).
    int64_t bucket_pool = 0;
    /// Batches by tokens (data::BatcherOptions::batch_tokens; 0: batch_size pairs per batch).
    int64_t batch_tokens = 0;
    /// Also validate at the first step boundary past every multiple of this much training time
    /// (0: only at epoch ends), as the anchor protocol does at 5, 10 and 15 minutes. Writes a
    /// "val" record to metrics.jsonl and, inside an epoch, a checkpoint first (the batch
    /// position, as a stop inside an epoch does), so a killed run loses at most this much
    /// training; uses no random numbers, so resuming stays exact. A point at an epoch's last step
    /// or where the run stops shares the epoch end's validation (one validation, the "val" record
    /// before the epoch record, both with its loss).
    double val_every_s = 0;
    /// Matrix products in fp32 or, mixed precision, with bf16-rounded operands and fp32
    /// accumulation (ops/precision.h) during fit() and evaluate_loss(); parameters, gradients,
    /// Adam state, softmax, layer norm and the loss stay fp32, checkpoints fp32.
    MatmulPrecision precision = MatmulPrecision::fp32;
    /// Data-parallel runs: Adam's moments sharded over the ranks (ZeRO stage 1,
    /// train::ZeroRedundancyAdam): each rank keeps 1/N of them; the same losses up to fp32
    /// reordering. Ignored by one process. Checkpoints hold the whole state either way.
    bool shard_optimizer = false;
};


struct DecodeConfig {
    int64_t max_len = 20;          // most output tokens per sentence (<eos> included)
    int64_t beam = 1;              // 1: greedy
    double length_penalty = 0.6;   // GNMT α for beam search
};

/// Which model a run trains (`qkv train --model`): the translation models (config.json
/// "model.architecture") and the decoder-only language model on a text (models/lm.h; config.json
/// "model_kind": "lm", D2L 9.2's character data: train/lm.h).
enum class ModelKind { transformer, bahdanau, lm };
/// "transformer" / "bahdanau" / "lm".
const char* model_kind_name(ModelKind k);
/// Inverse of model_kind_name; throws qkv::Error naming the accepted names.
ModelKind parse_model_kind(const std::string& s);

/// A configuration its caller got wrong (a value out of range, settings that do not go together);
/// `qkv train` reports it as a usage error (exit 2). Its message names the key or the flag.
class ConfigError : public Error {
public:
    using Error::Error;
};

struct RunConfig {
    std::string preset;            // the preset it started from ("" = none; not in an LM's config.json)
    /// A translation run's data; a language model's text is data.path ("" = QKV_LM_DATA, then
    /// train::kLmTextDefaultPath), data.num_steps (tokens per training sequence),
    /// data.valid_fraction and data.fingerprint's characters.
    DataConfig data;
    ModelKind architecture = ModelKind::transformer;
    models::TransformerConfig model;  // vocabulary sizes are filled from the data (also for
                                      // bahdanau: model.*_vocab_size is what files are checked by)
    models::BahdanauConfig bahdanau;  // architecture == bahdanau (vocabulary sizes as above)
    /// architecture == lm: the decoder-only model (vocab_size filled from the text). Its schedule is
    /// train.schedule warmup_inv_sqrt (not in config.json) and its loss exact (no label smoothing).
    models::TransformerLMConfig lm;
    TrainOptions train;
    /// metrics.jsonl "step" record every N steps (TrainRuntime::log_every; 0: none), in
    /// config.json as "train.log_every" so --resume keeps it.
    int64_t log_every = 50;
    /// Keep the model files of the last K checkpoints in checkpoints/ for `qkv average --last`
    /// (TrainRuntime::keep_checkpoints; 0: none), "train.keep_checkpoints" in config.json.
    int64_t keep_checkpoints = 0;
    DecodeConfig decode;
    /// Processes the model was last trained with (data-parallel ranks; "world_size" in
    /// config.json, absent in older files: 1). A record, not a setting: --resume may use another.
    int64_t world_size = 1;

    /// Checks every range and rule config.json's reader checks (run_config_from_json: the CLI
    /// flags' bounds, heads dividing the width, the positional-encoding table covering num_steps
    /// and decode.max_len, a warmup schedule's warmup_steps, an even bidirectional width, tying
    /// with equal vocabularies). Vocabulary sizes both 0 mean "from the data, later" and are not
    /// checked. Throws ConfigError "invalid training configuration: key 'train.lr' is 0, expected
    /// a number > 0 and <= 10" (the first violation, naming its key, value and range).
    void validate() const;
};

/// Names accepted by preset_config for the translation models, in help order.
std::vector<std::string> preset_names();
/// The language model's: "lm", "lm-tiny".
std::vector<std::string> lm_preset_names();

/// d2l: the book's run (spec §2–3): 641 pairs, D2L EN pipeline, num_steps 9, C 256, 2 blocks,
///   4 heads, F 64, dropout 0.2, batch 128, Adam lr 1e-3, 30 epochs, clip 1; decoding ≤ 9 tokens.
/// demo: real data, short pairs (source ≤ 5, target ≤ 7 tokens; 40,594 pairs), words seen ≥ 3
///   times, a small fast model (C 128, 2 blocks, 4 heads, F 256, dropout 0.1), batch 64,
///   Adam(2e-3, 0.9, 0.98, 1e-9) with 200 warmup steps then 1/√step decay, label smoothing 0.1,
///   a 210 s training budget (validation, checkpoints and decoding come on top of it).
/// full: every pair, anchor pipeline and model, 60-minute training budget.
/// anchor: quality_anchor.md §2 (C 256, 2+2 blocks, 4 heads, F 1024, dropout 0.1, num_steps 12,
///   Adam(5e-4, 0.9, 0.98, 1e-9), batch 128, masked loss, 20-minute budget, decoding ≤ 20).
/// With kind == bahdanau the same data and schedule with D2L's Bahdanau model (spec §3): d2l:
///   E = H = 256, 2 GRU layers, dropout 0.2, Adam lr 0.005 (30 epochs, clip 1, batch 128, the
///   book's 512 training pairs); demo/full/anchor: the same model, Adam lr 0.005 (demo) or 1e-3
///   with PyTorch's default betas/eps and a constant learning rate, batch 128, no label smoothing;
///   demo also has Bahdanau et al.'s encoder (one bidirectional GRU layer; so one decoder layer
///   too) and pairs of <= 10 source / <= 12 target tokens (num_steps 14, decoding <= 16), under
///   which the attention aligns (bench/RESULTS_gru.md §7).
/// With kind == lm (D2L 9.2's character model, models/lm.h): lm (C 128, 2 blocks, 4 heads, RoPE,
///   T 64, batch 32, Adam(1e-3, beta2 0.98) with 100 warmup steps then 1/sqrt(step), clip 1,
///   validation every minute, a 3-minute budget) and lm-tiny (C 32, 1 block, 2 heads, FFN 64, no
///   dropout, T 16, batch 16, 10 warmup steps, 20 s: seconds, for tests); the last 10 % of the
///   text held out.
/// Throws qkv::Error listing the names for an unknown one, ConfigError for a translation preset
/// with kind lm ("--preset demo is a translation preset; --model lm takes lm or lm-tiny") or a
/// language-model preset without it ("--preset lm-tiny needs --model lm").
RunConfig preset_config(const std::string& name, ModelKind kind = ModelKind::transformer);

/// config.json: {"preset", "data": {...}, "model": {...}, "train": {...}, "decode": {...}}.
/// "data.fingerprint" ({"pairs": N, "fnv1a64": "16 hex digits"}, translation_data.h
/// DataFingerprint) is written when known; run_config_from_json leaves it unknown when absent.
nlohmann::json to_json(const RunConfig& c);
/// Reads to_json's form. Missing keys keep their defaults (older files), except the ones that
/// fix the parameter shapes: "model" with its vocabulary sizes and widths (transformer:
/// num_hiddens, num_blks, num_heads, ffn_num_hiddens; bahdanau: embed_size, num_hiddens,
/// num_layers) and "data.num_steps". A bahdanau "model.bidirectional" (written for bahdanau
/// runs) that is absent means false (D2L's unidirectional encoder: older folders load as
/// before). Throws qkv::Error naming the key ("model.num_hiddens") when one of these is missing,
/// a value has the wrong type or is out of range (train.warmup_steps 0 with a warmup schedule
/// included; an odd model.num_hiddens with model.bidirectional), or an enum name is unknown.
RunConfig run_config_from_json(const nlohmann::json& j);

/// "constant" / "warmup_inv_sqrt" / "warmup_linear_decay".
const char* schedule_name(optim::LrSchedule s);
/// Inverse of schedule_name; throws qkv::Error naming the accepted names.
optim::LrSchedule parse_schedule(const std::string& s);

/// Parses a duration: "90" or "90s" (seconds), "20m", "1.5h" (a decimal number, optionally with
/// an exponent, then s/m/h); throws qkv::Error otherwise (hexadecimal "0x10", "inf", spaces).
double parse_duration(const std::string& s);

/// The shortest time budget or validation interval accepted, in seconds: "--val-every 1e-9s"
/// would validate and write a checkpoint after every step.
constexpr double kMinDurationSeconds = 1;
/// The longest one, in seconds (about 3 years): beyond it "none" says what is meant, and 1e20 s
/// would not print as a time.
constexpr double kMaxDurationSeconds = 1e8;

/// A time limit or interval as `qkv train` and qkv.train take it: parse_duration's forms, or
/// "none"/"off" for no limit (returns 0). An explicit 0 is refused with a message naming
/// "none"/"off" (0 is the internal "no limit", so "0" would mean the opposite of what it says), and
/// so is a duration under kMinDurationSeconds or over kMaxDurationSeconds. Throws qkv::Error.
double parse_duration_or_off(const std::string& s);

/// The same rules for a number of seconds (qkv.train's time_budget=90): 0 is no limit; a negative,
/// non-finite, under-kMinDurationSeconds or over-kMaxDurationSeconds value throws qkv::Error
/// naming `name`. -0 is 0.
double check_duration_seconds(double seconds, const std::string& name);

}  // namespace qkv::runtime
