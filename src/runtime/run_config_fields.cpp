// The table of RunConfig's training options (run_config_fields.h) and the code that reads it.
#include "qkv/runtime/run_config_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "qkv/util/progress.h"

namespace qkv::runtime {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A member of RunConfig as the table stores it (ConfigField::member).
#define QKV_MEMBER(expr) [](RunConfig& c) -> void* { return &c.expr; }

// Ranges. Integers: closed; reals as their check was written before the table.
constexpr FieldRange from(double lo, double hi = kInf) { return {lo, hi, false, false}; }
constexpr FieldRange half_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
constexpr FieldRange above(double lo, double hi = kInf) { return {lo, hi, true, false}; }  // (lo, hi]
constexpr FieldRange any() { return {}; }

bool subword_run(const RunConfig& c) { return c.data.subword != data::SubwordKind::none; }
bool file_pair(const RunConfig& c) { return !c.data.src_file.empty(); }  // written as a pair
bool sharded_run(const RunConfig& c) { return c.train.shard_optimizer; }  // older files stay as they were

const FieldChoice kArchitecture{{"transformer", "bahdanau"},
                                [](const RunConfig& c) -> std::string { return model_kind_name(c.architecture); },
                                [](RunConfig& c, const std::string& s, const std::string&) {
                                    c.architecture = parse_model_kind(s);
                                }};
const FieldChoice kPipeline{{"d2l_en", "anchor", "text"},
                            [](const RunConfig& c) -> std::string {
                                switch (c.data.pipeline) {
                                    case DataPipeline::d2l_en: return "d2l_en";
                                    case DataPipeline::anchor: return "anchor";
                                    case DataPipeline::text: return "text";
                                }
                                return "anchor";
                            },
                            [](RunConfig& c, const std::string& s, const std::string&) {
                                if (s == "d2l_en") c.data.pipeline = DataPipeline::d2l_en;
                                else if (s == "anchor") c.data.pipeline = DataPipeline::anchor;
                                else if (s == "text") c.data.pipeline = DataPipeline::text;
                                else throw Error(detail::str("data.pipeline '", s, "' is not d2l_en, anchor or text"));
                            }};
const FieldChoice kSubword{{"none", "bpe", "unigram"},
                           [](const RunConfig& c) -> std::string { return data::subword_kind_name(c.data.subword); },
                           [](RunConfig& c, const std::string& s, const std::string&) {
                               c.data.subword = data::parse_subword_kind(s);
                           }};
const FieldChoice kInit{{"d2l_en", "d2l_zh", "pytorch"},
                        [](const RunConfig& c) -> std::string {
                            const auto i = c.bahdanau.init;
                            return i == models::BahdanauInit::d2l_en   ? "d2l_en"
                                   : i == models::BahdanauInit::d2l_zh ? "d2l_zh"
                                                                       : "pytorch";
                        },
                        [](RunConfig& c, const std::string& s, const std::string&) {
                            QKV_CHECK(s == "d2l_en" || s == "d2l_zh" || s == "pytorch", "model.init '", s,
                                      "' is not d2l_en, d2l_zh or pytorch");
                            c.bahdanau.init = s == "d2l_en"   ? models::BahdanauInit::d2l_en
                                              : s == "d2l_zh" ? models::BahdanauInit::d2l_zh
                                                              : models::BahdanauInit::pytorch;
                        }};
const FieldChoice kSchedule{{"constant", "warmup_inv_sqrt", "warmup_linear_decay"},
                            [](const RunConfig& c) -> std::string { return schedule_name(c.train.schedule); },
                            [](RunConfig& c, const std::string& s, const std::string&) {
                                c.train.schedule = parse_schedule(s);
                            }};
const FieldChoice kPrecision{{"fp32", "bf16"},
                             [](const RunConfig& c) -> std::string { return precision_name(c.train.precision); },
                             [](RunConfig& c, const std::string& s, const std::string& what) {
                                 c.train.precision = parse_precision(s, what.c_str());
                             }};

const FieldChoice kModelKind{{"lm"},  // config.json's top-level "model_kind" of a language model
                             [](const RunConfig&) -> std::string { return "lm"; },
                             [](RunConfig& c, const std::string& s, const std::string& what) {
                                 QKV_CHECK(s == "lm", what, " '", s, "' is not lm");
                                 c.architecture = ModelKind::lm;
                             }};
const FieldChoice kPositions{{"rope", "sinusoidal"},
                             [](const RunConfig& c) -> std::string { return c.lm.rope ? "rope" : "sinusoidal"; },
                             [](RunConfig& c, const std::string& s, const std::string& what) {
                                 QKV_CHECK(s == "rope" || s == "sinusoidal", what, " must be rope or sinusoidal, got '",
                                           s, "'");
                                 c.lm.rope = s == "rope";
                             }};

/// --resume compares --num-kv-heads with the heads config.json's 0 stands for.
FieldValue kv_heads_used(const RunConfig& c) { return c.lm.num_kv_heads > 0 ? c.lm.num_kv_heads : c.lm.num_heads; }

using T = FieldType;
using R = OnResume;
using S = FieldScope;
using K = FlagKind;

// The rows. Order: `qkv train --help`'s within each group, then the keys without a flag. Help texts
// say the presets' defaults (preset_config; docs/training.md lists them all). constexpr: initialized
// before any code runs (the CLI's registrations read it during static initialization).
constexpr ConfigField kFields[] = {
    {.key = "preset", .type = T::text, .range = any(), .member = QKV_MEMBER(preset), .flag = "--preset",
     .help = "configuration to start from", .group = "Model"},
    {.key = "model.architecture", .type = T::choice, .range = any(), .choice = &kArchitecture, .flag = "--model",
     .help = "the model", .group = "Model", .on_resume = R::refuse},
    // data
    {.key = "data.path", .type = T::text, .range = any(), .member = QKV_MEMBER(data.path), .flag = "--data",
     .python = "data data_path",
     .help = "fra-eng.zip, fra.txt or a folder (default: $QKV_DATA, then ../shared/data/fra-eng.zip), or a TSV "
             "corpus: source<TAB>target per line, plain or gzip",
     .group = "Data", .file = true, .on_resume = R::apply, .scope = S::all},
    {.key = "data.src_file", .type = T::text, .range = any(), .member = QKV_MEMBER(data.src_file),
     .flag = "--src-file", .python = "src_file",
     .help = "source sentences, one per line (with --tgt-file: a line-aligned pair of files instead of --data; "
             "gzip or not; default: none, --data)",
     .group = "Data", .file = true, .on_resume = R::apply, .applies = file_pair},
    {.key = "data.tgt_file", .type = T::text, .range = any(), .member = QKV_MEMBER(data.tgt_file),
     .flag = "--tgt-file", .python = "tgt_file",
     .help = "target sentences, line i translating line i of --src-file (default: none, --data)", .group = "Data",
     .file = true, .on_resume = R::apply, .applies = file_pair},
    {.key = "data.src_lang", .type = T::text, .range = any(), .member = QKV_MEMBER(data.src_lang),
     .flag = "--src-lang", .python = "src_lang",
     .help = "source language code, recorded in config.json (default: en for fra-eng, none for other data)",
     .group = "Data"},
    {.key = "data.tgt_lang", .type = T::text, .range = any(), .member = QKV_MEMBER(data.tgt_lang),
     .flag = "--tgt-lang", .python = "tgt_lang",
     .help = "target language code, recorded in config.json (default: fr for fra-eng, none for other data)",
     .group = "Data"},
    // training: stopping rules
    {.key = "train.time_budget_s", .type = T::duration, .range = from(0, kMaxDurationSeconds),
     .member = QKV_MEMBER(train.time_budget_s), .flag = "--time-budget", .python = "time_budget time_budget_s",
     .help = "stop after this much training time, e.g. 20m, 90s, 1h; 'none' (or 'off'): no time limit "
             "(default: the preset's: {presets})",
     .group = "Training", .on_resume = R::apply, .scope = S::all},
    {.key = "train.val_every_s", .type = T::duration, .range = from(0, kMaxDurationSeconds),
     .member = QKV_MEMBER(train.val_every_s), .flag = "--val-every", .python = "val_every val_every_s",
     .help = "also validate, and write the checkpoint, every this much training time, e.g. 5m; 'off': at epoch "
             "ends only (default: the preset's: {presets})",
     .group = "Training", .scope = S::all},
    {.key = "train.epochs", .type = T::integer, .range = from(1, 1000000), .member = QKV_MEMBER(train.epochs),
     .flag = "--epochs", .python = "epochs", .help = "epochs (default: the preset's: {presets})",
     .group = "Training", .on_resume = R::apply, .scope = S::all},
    {.key = "train.max_steps", .type = T::integer, .range = from(0), .member = QKV_MEMBER(train.max_steps),
     .flag = "--max-steps,--steps", .flag_range = from(1, 1000000000), .python = "max_steps",
     .help = "stop after this many optimizer steps in total (default: none)", .group = "Training",
     .on_resume = R::apply, .scope = S::all},
    // model
    {.key = "model.num_hiddens", .type = T::integer, .range = from(1, 65536),
     .member = QKV_MEMBER(model.num_hiddens), .bahdanau_member = QKV_MEMBER(bahdanau.num_hiddens), .lm_member = QKV_MEMBER(lm.num_hiddens),
     .flag = "--num-hiddens", .python = "num_hiddens",
     .help = "model width C (bahdanau: GRU and attention width H; default: the preset's: {presets})",
     .group = "Model", .on_resume = R::refuse, .scope = S::all, .required = true},
    {.key = "model.embed_size", .type = T::integer, .range = from(1, 65536),
     .member = QKV_MEMBER(bahdanau.embed_size), .flag = "--embed-size", .python = "embed_size",
     .help = "bahdanau: embedding size E (default: the preset's: {presets})", .group = "Model", .on_resume = R::refuse,
     .scope = S::bahdanau, .required = true, .other_lacks = "separate embedding size"},
    {.key = "model.num_layers", .type = T::integer, .range = from(1, 64), .member = QKV_MEMBER(bahdanau.num_layers),
     .flag = "--num-layers", .python = "num_layers",
     .help = "bahdanau: GRU layers (default: the preset's: {presets})", .group = "Model",
     .on_resume = R::refuse, .scope = S::bahdanau, .required = true, .other_lacks = "GRU layers"},
    {.key = "model.bidirectional", .type = T::boolean, .range = any(),
     .member = QKV_MEMBER(bahdanau.bidirectional), .flag = "--bidirectional,!--no-bidirectional",
     .flag_kind = K::negatable, .python = "bidirectional",
     .help = "bahdanau: bidirectional GRU encoder, H/2 per direction (Bahdanau et al. 2015; D2L's is "
             "unidirectional); --num-hiddens must be even (default: the preset's: {presets}; "
             "--no-bidirectional turns it off)",
     .group = "Model", .on_resume = R::refuse, .scope = S::bahdanau, .other_lacks = "GRU encoder"},
    {.key = "model.num_blks", .type = T::integer, .range = from(1, 64), .member = QKV_MEMBER(model.num_blks), .lm_member = QKV_MEMBER(lm.num_blks),
     .flag = "--num-blks", .python = "num_blks",
     .help = "blocks in the encoder and in the decoder (default: the preset's: {presets})", .group = "Model",
     .on_resume = R::refuse, .scope = S::transformer_lm, .required = true},
    {.key = "model.num_heads", .type = T::integer, .range = from(1, 1024), .member = QKV_MEMBER(model.num_heads), .lm_member = QKV_MEMBER(lm.num_heads),
     .flag = "--num-heads", .python = "num_heads", .help = "attention heads (default: the preset's: {presets})",
     .group = "Model", .on_resume = R::refuse, .scope = S::transformer_lm, .required = true},
    {.key = "model.ffn_num_hiddens", .type = T::integer, .range = from(1, 262144),
     .member = QKV_MEMBER(model.ffn_num_hiddens), .lm_member = QKV_MEMBER(lm.ffn_num_hiddens), .flag = "--ffn-num-hiddens", .python = "ffn_num_hiddens",
     .help = "FFN width (default: the preset's: {presets})",
     .group = "Model", .on_resume = R::refuse, .scope = S::transformer_lm, .required = true},
    {.key = "model.dropout", .type = T::real, .range = half_open(0, 1), .member = QKV_MEMBER(model.dropout),
     .bahdanau_member = QKV_MEMBER(bahdanau.dropout), .lm_member = QKV_MEMBER(lm.dropout), .flag = "--dropout", .flag_range = from(0, 0.99),
     .python = "dropout", .help = "dropout probability (default: the preset's: {presets})",
     .group = "Model", .scope = S::all},
    {.key = "train.batch_size", .type = T::integer, .range = from(1, 100000), .member = QKV_MEMBER(train.batch_size),
     .flag = "--batch-size", .python = "batch_size",
     .help = "minibatch size in pairs (default: the preset's: {presets})",
     .group = "Training", .scope = S::all},
    {.key = "data.num_steps", .type = T::integer, .range = from(2, 1000), .member = QKV_MEMBER(data.num_steps),
     .flag = "--num-steps", .python = "num_steps",
     .help = "positions per sequence, <eos> included (truncate/pad; default: the preset's, 8 for demo (14 "
             "bahdanau), 9 for d2l, 12 for anchor, 20 pieces for full; subword pieces otherwise: chosen from the "
             "train split, 99 % of its sentences whole, at most 4 x the preset's)",
     .group = "Data", .scope = S::all, .required = true},
    {.key = "train.lr", .type = T::real, .range = above(0, 10), .member = QKV_MEMBER(train.lr), .flag = "--lr",
     .python = "lr",
     .help = "Adam learning rate (default: the preset's: {presets})",
     .group = "Training", .scope = S::all},
    {.key = "train.label_smoothing", .type = T::real, .range = half_open(0, 1),
     .member = QKV_MEMBER(train.label_smoothing), .flag = "--label-smoothing", .flag_range = from(0, 0.99),
     .python = "label_smoothing",
     .help = "label smoothing epsilon (default: the preset's: {presets})",
     .group = "Training"},
    {.key = "train.clip_norm", .type = T::real, .range = from(0, 1e6), .member = QKV_MEMBER(train.clip_norm),
     .flag = "--clip", .python = "clip clip_norm", .help = "clip gradients to this global norm (0: off; default 1)",
     .group = "Training", .scope = S::all},
    {.key = "train.schedule", .type = T::choice, .range = any(), .choice = &kSchedule, .flag = "--schedule",
     .python = "schedule", .help = "learning-rate schedule (default: the preset's)", .group = "Training"},
    {.key = "train.warmup_steps", .type = T::integer, .range = from(0), .member = QKV_MEMBER(train.warmup_steps),
     .flag = "--warmup", .flag_range = from(1, 1000000000), .python = "warmup warmup_steps",
     .help = "warmup steps for the warmup schedules (default: the preset's, 200 for demo, 300 for full, else 400)",
     .group = "Training", .scope = S::all},
    {.key = "train.batch_tokens", .type = T::integer, .range = from(0, 100000000),
     .member = QKV_MEMBER(train.batch_tokens), .flag = "--batch-tokens", .python = "batch_tokens",
     .help = "batches by tokens: each epoch cut into batches of about N tokens (a pair counts its longer side), "
             "so short pairs come in larger batches; --batch-size then does not apply (0: off; default: the "
             "preset's: {presets})",
     .group = "Training"},
    {.key = "train.bucket_pool", .type = T::integer, .range = from(0, 1000000),
     .member = QKV_MEMBER(train.bucket_pool), .flag = "--bucket-pool", .python = "bucket_pool",
     .help = "length bucketing: sort pools of N batches by pair length, shuffle the batches (0: off; default: "
             "the preset's: {presets})",
     .group = "Training"},
    {.key = "train.precision", .type = T::choice, .range = any(), .choice = &kPrecision, .flag = "--precision",
     .python = "precision",
     .help = "fp32 (default) or bf16: mixed-precision training, matrix products with bf16-rounded operands and "
             "fp32 accumulation (oneDNN's bf16 matmul where AMX is usable or AVX-512-BF16 runs at full rate, as "
             "on AMD, else the fp32 GEMM on rounded operands), attention likewise; weights, optimizer state, "
             "softmax, layer norm and the loss stay fp32 (qkv --version shows the bf16 path)",
     .group = "Training", .scope = S::all},
    {.key = "train.shard_optimizer", .type = T::boolean, .range = any(),
     .member = QKV_MEMBER(train.shard_optimizer), .flag = "--shard-optimizer,!--no-shard-optimizer",
     .flag_kind = K::negatable, .python = "shard_optimizer",
     .help = "under mpirun: each rank keeps Adam's moments for 1/N of the parameters only (ZeRO stage 1; same "
             "losses up to fp32 reordering); applies on --resume too (a sharded checkpoint resumes on any number "
             "of ranks, sharded or not)",
     .group = "Training", .on_resume = R::apply, .applies = sharded_run},
    {.key = "train.trim_batches", .type = T::boolean, .range = any(), .member = QKV_MEMBER(train.trim_batches),
     .flag = "--trim", .flag_kind = K::on_off, .python = "trim",
     .help = "on|off: cut each batch to its longest pair (masked loss only; same loss, less padding computed; "
             "default: the preset's: {presets})",
     .group = "Training"},
    {.key = "train.loss_on_padding", .type = T::boolean, .range = any(),
     .member = QKV_MEMBER(train.loss_on_padding), .flag = "--loss-on-padding", .flag_kind = K::switch_on,
     .python = "loss_on_padding", .help = "average the loss over pad positions too (reproduces D2L EN's curves)",
     .group = "Training"},
    {.key = "model.pe_position_zero_at_inference", .type = T::boolean, .range = any(),
     .member = QKV_MEMBER(model.pe_position_zero_at_inference), .flag = "--pe-quirk", .flag_kind = K::switch_on,
     .python = "pe_quirk", .help = "decode with D2L's position-0 positional encoding at every step",
     .group = "Decoding (the held-out samples, and later translate/eval)", .scope = S::transformer},
    {.key = "data.max_pairs", .type = T::integer, .range = from(0), .member = QKV_MEMBER(data.max_pairs),
     .flag = "--max-pairs", .flag_range = from(1, 1000000000), .python = "max_pairs",
     .help = "use only the first N (filtered) pairs (default: all)", .group = "Data"},
    {.key = "data.max_src_tokens", .type = T::integer, .range = from(0, 1000),
     .member = QKV_MEMBER(data.max_src_tokens), .flag = "--max-src-tokens", .flag_range = from(1, 1000),
     .python = "max_src_tokens",
     .help = "keep pairs with at most N source tokens (default: the preset's, 5 for demo, 10 for demo bahdanau, "
             "else any)",
     .group = "Data"},
    {.key = "data.max_tgt_tokens", .type = T::integer, .range = from(0, 1000),
     .member = QKV_MEMBER(data.max_tgt_tokens), .flag = "--max-tgt-tokens", .flag_range = from(1, 1000),
     .python = "max_tgt_tokens",
     .help = "keep pairs with at most N target tokens (default: the preset's, 7 for demo, 12 for demo bahdanau, "
             "else any)",
     .group = "Data"},
    {.key = "data.subword", .type = T::choice, .range = any(), .choice = &kSubword, .flag = "--subword",
     .python = "subword",
     .help = "none (D2L words) | bpe | unigram: SentencePiece subword units learned from the train split (BLEU "
             "stays on words); default: none on fra-eng (bpe for --preset full and real), bpe on other corpora",
     .group = "Data", .on_resume = R::refuse},
    {.key = "data.subword_vocab_size", .type = T::integer, .range = from(5, double(int64_t(1) << 24)),
     .member = QKV_MEMBER(data.subword_vocab_size), .flag = "--vocab-size", .flag_range = from(8, 1000000),
     .python = "vocab_size",
     .help = "subword vocabulary size, reserved tokens included (default 8000; on data other than fra-eng at "
             "most 8000: a small corpus gets the pieces it has)",
     .group = "Data", .on_resume = R::refuse, .applies = subword_run},
    {.key = "data.shared_vocab", .type = T::boolean, .range = any(), .member = QKV_MEMBER(data.shared_vocab),
     .flag = "--shared-vocab", .flag_kind = K::switch_on, .python = "shared_vocab",
     .help = "one vocabulary (one SentencePiece model) for English and French", .group = "Data",
     .on_resume = R::refuse},
    {.key = "model.tie_weights", .type = T::boolean, .range = any(), .member = QKV_MEMBER(model.tie_weights),
     .flag = "--tie-weights", .flag_kind = K::switch_on, .python = "tie_weights",
     .help = "Transformer: one matrix for source/target embeddings and the output layer (needs --shared-vocab)",
     .group = "Model", .on_resume = R::refuse, .scope = S::transformer},
    {.key = "data.min_freq", .type = T::integer, .range = from(0), .member = QKV_MEMBER(data.min_freq),
     .flag = "--min-freq", .flag_range = from(1, 1000000000), .python = "min_freq",
     .help = "word vocabulary: keep words seen at least N times in training (default: the preset's: "
             "{presets}; not for subword pieces)",
     .group = "Data"},
    {.key = "data.n_test", .type = T::integer, .range = from(1), .member = QKV_MEMBER(data.n_test),
     .flag = "--test-pairs", .flag_range = from(1, 100000000), .python = "test_pairs n_test",
     .help = "held-out test pairs (default 5000; a corpus of fewer than 4 x (valid + test) pairs gets 10 % of "
             "its pairs each)",
     .group = "Data"},
    {.key = "data.n_valid", .type = T::integer, .range = from(1), .member = QKV_MEMBER(data.n_valid),
     .flag = "--valid-pairs", .flag_range = from(1, 100000000), .python = "valid_pairs n_valid",
     .help = "validation pairs (default: the preset's: {presets}; small corpora: as --test-pairs)",
     .group = "Data"},
    {.key = "data.strict", .type = T::boolean, .range = any(), .member = QKV_MEMBER(data.strict),
     .flag = "--strict", .flag_kind = K::switch_on, .python = "strict",
     .help = "a malformed data line is an error (default: skipped)", .group = "Data"},
    {.key = "train.seed", .type = T::unsigned_integer, .range = any(), .member = QKV_MEMBER(train.seed),
     .flag = "--seed", .python = "seed",
     .help = "seed for init, dropout and batch order (default 0; the split keeps seed 0)", .group = "Training", .scope = S::all},
    {.key = "train.keep_checkpoints", .type = T::integer, .range = from(0, 1000000),
     .member = QKV_MEMBER(keep_checkpoints), .flag = "--keep-checkpoints", .python = "keep_checkpoints",
     .help = "also keep the model of the last K checkpoints in OUT/checkpoints/ (for qkv average --last K; "
             "default 0: none; kept on --resume unless given)",
     .group = "Output", .on_resume = R::apply},
    {.key = "train.log_every", .type = T::integer, .range = from(0, 1000000000), .member = QKV_MEMBER(log_every),
     .flag = "--log-every", .python = "log_every",
     .help = "metrics.jsonl: mean train loss every N steps (default 50; 0: none; --resume: config.json's unless "
             "given)",
     .group = "Output", .on_resume = R::apply, .scope = S::all},
    // the language model's own (`qkv train --model lm`; models/lm.h)
    {.key = "model.num_kv_heads", .type = T::integer, .range = from(0, 1024), .member = QKV_MEMBER(lm.num_kv_heads),
     .flag = "--num-kv-heads", .flag_range = from(1, 1024), .python = "num_kv_heads",
     .help = "--model lm: key/value heads (grouped-query attention; divides --num-heads; default: --num-heads, no "
             "grouping)",
     .group = "LM-only (--model lm)", .on_resume = R::refuse, .scope = S::lm, .resume_value = kv_heads_used},
    {.key = "model.positions", .type = T::choice, .range = any(), .choice = &kPositions, .flag = "--positions",
     .python = "positions", .help = "--model lm: positions, rope or sinusoidal (default rope)",
     .group = "LM-only (--model lm)", .on_resume = R::refuse, .scope = S::lm},
    // -1 (all positions) or >= 1: check_rules
    {.key = "model.window", .type = T::integer, .range = any(), .member = QKV_MEMBER(lm.window), .flag = "--window",
     .flag_range = from(1, 1000000000), .python = "window",
     .help = "--model lm: sliding-window attention, each token sees itself and the N - 1 before it (default: none, "
             "all before it)",
     .group = "LM-only (--model lm)", .on_resume = R::refuse, .scope = S::lm},
    // config.json only (no flag)
    {.key = "model_kind", .type = T::choice, .range = any(), .choice = &kModelKind, .scope = S::lm},
    {.key = "model.vocab_size", .type = T::integer, .range = from(4), .member = QKV_MEMBER(lm.vocab_size),
     .scope = S::lm, .required = true, .from_data = true},
    {.key = "data.valid_fraction", .type = T::real, .range = {0, 0.5, true, true},
     .member = QKV_MEMBER(data.valid_fraction), .scope = S::lm},
    {.key = "world_size", .type = T::integer, .range = from(1, 1000000), .member = QKV_MEMBER(world_size)},
    {.key = "data.pipeline", .type = T::choice, .range = any(), .choice = &kPipeline},
    {.key = "data.split_seed", .type = T::unsigned_integer, .range = any(), .member = QKV_MEMBER(data.split_seed)},
    {.key = "data.concat_fraction", .type = T::real, .range = from(0, 1),
     .member = QKV_MEMBER(data.concat_fraction)},
    {.key = "data.d2l_num_train", .type = T::integer, .range = from(1), .member = QKV_MEMBER(data.d2l_num_train)},
    {.key = "data.d2l_num_val", .type = T::integer, .range = from(0), .member = QKV_MEMBER(data.d2l_num_val)},
    // 4 reserved tokens (<unk> <pad> <bos> <eos>) at least
    {.key = "model.src_vocab_size", .type = T::integer, .range = from(4), .member = QKV_MEMBER(model.src_vocab_size),
     .required = true, .from_data = true},
    {.key = "model.tgt_vocab_size", .type = T::integer, .range = from(4), .member = QKV_MEMBER(model.tgt_vocab_size),
     .required = true, .from_data = true},
    // model.max_len's range depends on data.num_steps and decode.max_len: check_rules
    {.key = "model.max_len", .type = T::integer, .range = any(), .member = QKV_MEMBER(model.max_len), .lm_member = QKV_MEMBER(lm.max_len),
     .scope = S::transformer_lm},
    {.key = "model.init", .type = T::choice, .range = any(), .choice = &kInit, .scope = S::bahdanau},
    {.key = "train.adam_beta1", .type = T::real, .range = half_open(0, 1), .member = QKV_MEMBER(train.adam_beta1)},
    {.key = "train.adam_beta2", .type = T::real, .range = half_open(0, 1), .member = QKV_MEMBER(train.adam_beta2), .scope = S::all},
    {.key = "train.adam_eps", .type = T::real, .range = above(0), .member = QKV_MEMBER(train.adam_eps)},
    {.key = "train.val_batch_size", .type = T::integer, .range = from(1), .member = QKV_MEMBER(train.val_batch_size)},
    {.key = "decode.max_len", .type = T::integer, .range = from(1, 1000), .member = QKV_MEMBER(decode.max_len)},
    {.key = "decode.beam", .type = T::integer, .range = from(1, 100), .member = QKV_MEMBER(decode.beam)},
    {.key = "decode.length_penalty", .type = T::real, .range = from(0, 10),
     .member = QKV_MEMBER(decode.length_penalty)},
};

#undef QKV_MEMBER

std::string num_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

void* member_of(const ConfigField& f, RunConfig& c) {
    if (c.architecture == ModelKind::lm && f.lm_member) return f.lm_member(c);
    return c.architecture == ModelKind::bahdanau && f.bahdanau_member ? f.bahdanau_member(c) : f.member(c);
}

/// Writes `v` (already of the field's C++ type) to the member at `p`.
void store(FieldType type, void* p, const FieldValue& v) {
    switch (type) {
        case T::integer: *static_cast<int64_t*>(p) = std::get<int64_t>(v); break;
        case T::unsigned_integer: *static_cast<uint64_t*>(p) = std::get<uint64_t>(v); break;
        case T::real:
        case T::duration: *static_cast<double*>(p) = std::get<double>(v); break;
        case T::boolean: *static_cast<bool*>(p) = std::get<bool>(v); break;
        case T::text: *static_cast<std::string*>(p) = std::get<std::string>(v); break;
        case T::choice: break;
    }
}

/// `v` as the field's C++ type: integers become reals, non-negative ones unsigned; else an Error.
FieldValue converted(const ConfigField& f, const FieldValue& v) {
    const auto wrong = [&] { return Error(detail::str("config field '", f.key, "': a value of another type")); };
    switch (f.type) {
        case T::integer:
            if (const auto* u = std::get_if<uint64_t>(&v); u && *u <= uint64_t(INT64_MAX)) return int64_t(*u);
            if (std::holds_alternative<int64_t>(v)) return v;
            throw wrong();
        case T::unsigned_integer:
            if (const auto* i = std::get_if<int64_t>(&v); i && *i >= 0) return uint64_t(*i);
            if (std::holds_alternative<uint64_t>(v)) return v;
            throw wrong();
        case T::real:
        case T::duration:
            if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
            if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
            if (std::holds_alternative<double>(v)) return v;
            throw wrong();
        case T::boolean:
            if (std::holds_alternative<bool>(v)) return v;
            throw wrong();
        case T::text:
        case T::choice:
            if (std::holds_alternative<std::string>(v)) return v;
            throw wrong();
    }
    throw wrong();
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
    static const std::vector<ConfigField> fields(std::begin(kFields), std::end(kFields));
    return fields;
}

const ConfigField& config_field(const std::string& key) {
    for (const auto& f : config_fields())
        if (key == f.key) return f;
    throw Error(detail::str("no training configuration key '", key, "'"));
}

const ConfigField* config_field_by_flag(const std::string& flag) {
    for (const auto& f : config_fields()) {
        const std::string names = f.flag;
        for (size_t at = 0; at < names.size();) {
            size_t end = names.find(',', at);
            if (end == std::string::npos) end = names.size();
            std::string n = names.substr(at, end - at);
            if (!n.empty() && n[0] == '!') n.erase(0, 1);
            if (n == flag) return &f;
            at = end + 1;
        }
    }
    return nullptr;
}

const ConfigField* config_field_by_python(const std::string& keyword) {
    for (const auto& f : config_fields()) {
        const std::string names = std::string(" ") + f.python + " ";
        if (!keyword.empty() && names.find(" " + keyword + " ") != std::string::npos) return &f;
    }
    return nullptr;
}

std::string field_flag_name(const ConfigField& f) {
    const std::string names = f.flag;
    return names.substr(0, names.find(','));
}

std::string field_section(const ConfigField& f) {
    const std::string k = f.key;
    const size_t dot = k.find('.');
    return dot == std::string::npos ? "" : k.substr(0, dot);
}

std::string field_name(const ConfigField& f) {
    const std::string k = f.key;
    const size_t dot = k.find('.');
    return dot == std::string::npos ? k : k.substr(dot + 1);
}

bool field_in_scope(const ConfigField& f, ModelKind arch) {
    return (unsigned(f.scope) & (1u << unsigned(arch))) != 0;
}

std::string scope_text(FieldScope s) {
    if (s == S::lm) return "--model lm";
    if (s == S::bahdanau) return "--model bahdanau";
    if (s == S::transformer) return "the Transformer";
    return "the translation models";
}

FieldValue get_field(const ConfigField& f, const RunConfig& c) {
    if (f.type == T::choice) return f.choice->get(c);
    void* p = member_of(f, const_cast<RunConfig&>(c));  // read only
    switch (f.type) {
        case T::integer: return *static_cast<int64_t*>(p);
        case T::unsigned_integer: return *static_cast<uint64_t*>(p);
        case T::real:
        case T::duration: return *static_cast<double*>(p);
        case T::boolean: return *static_cast<bool*>(p);
        default: return *static_cast<std::string*>(p);
    }
}

void set_field(const ConfigField& f, RunConfig& c, const FieldValue& v, const std::string& what) {
    const FieldValue x = converted(f, v);
    if (f.type == T::choice) return f.choice->set(c, std::get<std::string>(x), what.empty() ? f.key : what);
    store(f.type, f.member(c), x);
    if (f.bahdanau_member) store(f.type, f.bahdanau_member(c), x);
    if (f.lm_member) store(f.type, f.lm_member(c), x);
}

std::string field_value_text(const FieldValue& v) {
    if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
    if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
    if (const auto* d = std::get_if<double>(&v)) return num_text(*d);
    if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
    return std::get<std::string>(v);
}

std::string field_range_text(FieldType type, const FieldRange& r) {
    if (type == T::integer) {
        const auto lo = int64_t(r.lo);
        return std::isinf(r.hi) ? "an integer >= " + std::to_string(lo)
                                : "an integer from " + std::to_string(lo) + " to " + std::to_string(int64_t(r.hi));
    }
    if (std::isinf(r.hi)) return std::string("a number ") + (r.lo_open ? "> " : ">= ") + num_text(r.lo);
    if (!r.lo_open && !r.hi_open) return "a number from " + num_text(r.lo) + " to " + num_text(r.hi);
    return std::string("a number ") + (r.lo_open ? "> " : ">= ") + num_text(r.lo) + " and " +
           (r.hi_open ? "< " : "<= ") +
           num_text(r.hi);
}

bool field_in_range(const FieldValue& v, const FieldRange& r) {
    if (const auto* i = std::get_if<int64_t>(&v))  // in integers: 2^63 - 1 is no double
        return (std::isinf(r.lo) || *i >= int64_t(r.lo)) && (std::isinf(r.hi) || *i <= int64_t(r.hi));
    const auto* d = std::get_if<double>(&v);
    if (!d) return true;
    return (r.lo_open ? *d > r.lo : *d >= r.lo) && (r.hi_open ? *d < r.hi : *d <= r.hi);
}

FieldValue field_default(const ConfigField& f) { return get_field(f, RunConfig{}); }

namespace {

std::string help_value(const ConfigField& f, const FieldValue& v) {
    if (f.type == T::duration) {
        const double s = std::get<double>(v);
        if (s == 0) return "none";
        const auto n = int64_t(s);
        return double(n) != s ? num_text(s) + "s" : n % 3600 == 0 ? std::to_string(n / 3600) + "h"
                                                : n % 60 == 0     ? std::to_string(n / 60) + "m"
                                                                  : std::to_string(n) + "s";
    }
    if (f.type == T::boolean) return std::get<bool>(v) ? "on" : "off";
    return field_value_text(v);
}

/// "M, p1 v1, p2 and p3 v2": the most common value (the first preset's on a tie), then the others
/// with their presets.
std::string grouped(const std::vector<std::pair<std::string, std::string>>& values) {
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // value, presets (in order)
    for (const auto& pv : values) {  // not a structured binding: clang 14 cannot capture one
        const std::string& preset = pv.first;
        const std::string& v      = pv.second;
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == v; });
        if (g == groups.end()) groups.push_back({v, {preset}});
        else g->second.push_back(preset);
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    std::string text = groups.front().first;
    for (size_t i = 1; i < groups.size(); ++i) {
        std::string who;
        for (size_t k = 0; k < groups[i].second.size(); ++k)
            who += (k == 0 ? "" : k + 1 == groups[i].second.size() ? " and " : ", ") + groups[i].second[k];
        text += ", " + who + " " + groups[i].first;
    }
    return text;
}

}  // namespace

std::string field_preset_defaults(const ConfigField& f) {
    std::vector<std::pair<std::string, std::string>> transformer, bahdanau;
    bool differ = false;
    for (const auto& p : preset_names()) {
        const RunConfig t = preset_config(p, ModelKind::transformer), b = preset_config(p, ModelKind::bahdanau);
        transformer.push_back({p, help_value(f, get_field(f, t))});
        bahdanau.push_back({p, help_value(f, get_field(f, b))});
        differ = differ || bahdanau.back().second != transformer.back().second;
    }
    if (!field_in_scope(f, ModelKind::transformer)) return grouped(bahdanau);
    if (!field_in_scope(f, ModelKind::bahdanau) || !differ) return grouped(transformer);
    return grouped(transformer) + "; bahdanau: " + grouped(bahdanau);
}

RunOverrides& RunOverrides::set(const std::string& key, const FieldValue& v, const std::string& text) {
    const ConfigField& f = config_field(key);
    FieldValue x = converted(f, v);
    if (f.type == T::choice) {  // an unknown name is refused here, naming the key
        RunConfig scratch;
        f.choice->set(scratch, std::get<std::string>(x), key);
    }
    values[key] = std::move(x);
    if (!text.empty()) texts[key] = text;
    else texts.erase(key);
    return *this;
}

bool RunOverrides::has(const std::string& key) const {
    config_field(key);  // a misspelt key throws
    return values.count(key) > 0;
}

std::string RunOverrides::text(const std::string& key) const {
    if (const auto t = texts.find(key); t != texts.end()) return t->second;
    const auto v = values.find(key);
    return v == values.end() ? "" : field_value_text(v->second);
}

void apply_overrides(RunConfig& c, const RunOverrides& o, bool stop_only) {
    for (const auto& f : config_fields()) {
        const auto v = o.values.find(f.key);
        if (v == o.values.end() || (stop_only && (f.on_resume != R::apply || field_section(f) == "data"))) continue;
        set_field(f, c, v->second);
    }
}

std::vector<ResumeDiff> resume_flag_diffs(const RunConfig& saved, const RunOverrides& o, const std::string& preset) {
    std::vector<ResumeDiff> diffs;
    for (const auto& f : config_fields()) {
        const auto v = o.values.find(f.key);
        if (!*f.flag || v == o.values.end() || f.on_resume == R::apply) continue;
        if (!field_in_scope(f, saved.architecture)) continue;  // check_architecture_overrides refuses it
        const bool used = !f.applies || f.applies(saved);
        const FieldValue now = f.resume_value ? f.resume_value(saved) : get_field(f, saved);
        if (used && now == v->second) continue;
        ResumeDiff d{field_flag_name(f), o.text(f.key), f.key, field_value_text(now), f.on_resume == R::refuse};
        if (f.flag_kind == K::switch_on || f.flag_kind == K::negatable) {
            d.given.clear();  // the switch alone
            if (f.flag_kind == K::negatable && !std::get<bool>(v->second))
                d.flag = std::string(f.flag).substr(std::string(f.flag).find('!') + 1);
        } else if (f.flag_kind == K::on_off) {
            d.saved = std::get<bool>(now) ? "on" : "off";
        } else if (f.type == T::duration) {
            const double s = std::get<double>(now);
            d.saved = s > 0 ? util::format_duration(s) : "off";
        }
        if (!used) d.saved = f.applies == subword_run ? "(none: a word model)" : "(none)";
        diffs.push_back(d);
    }
    if (!preset.empty() && saved.architecture == ModelKind::lm)  // its config.json records no preset
        diffs.push_back({"--preset", preset, "configuration", "", false});
    else if (!preset.empty() && preset != saved.preset)  // --preset given: nothing comes from it on resume
        diffs.push_back({"--preset", preset, "preset", saved.preset.empty() ? "(none)" : saved.preset, false});
    return diffs;
}

void report_resume_diffs(const std::string& out_dir, const std::string& cfg_file, const std::vector<ResumeDiff>& diffs,
                         std::FILE* log, const std::string& who) {
    auto flag_text = [](const ResumeDiff& x) { return x.given.empty() ? x.flag : x.flag + " " + x.given; };
    std::string refused;
    for (const auto& x : diffs)
        if (x.refused)
            refused += detail::str(refused.empty() ? "" : "; ", flag_text(x), " (the checkpoint's ", x.key, " is ",
                                   x.saved, ")");
    if (!refused.empty())
        throw ConfigError(detail::str("--resume continues the model in '", out_dir, "' as ", cfg_file,
                                      " describes it, and these flags would change it: ", refused,
                                      ". Drop them, or train a new model (without --resume) into another --out or, "
                                      "replacing this one, with --overwrite"));
    if (!log) return;
    for (const auto& x : diffs)
        std::fprintf(log, "%s: warning: --resume: %s is ignored; the checkpoint's %s%s%s (%s) is used\n", who.c_str(),
                     flag_text(x).c_str(), x.key.c_str(), x.saved.empty() ? "" : " ", x.saved.c_str(),
                     cfg_file.c_str());
}

}  // namespace qkv::runtime
