#pragma once
// `qkv train` as library calls: a preset plus overrides (configure_run, the flag rules included),
// or a model folder's own configuration to resume (resume_config), then train::run, which reads the
// data, builds the model, keeps the model folder (train/model_dir.h) and trains (train/trainer.h).
// What `qkv train --preset d2l --max-steps 200 --out DIR` does, from C++:
//
//   train::RunOverrides ov;
//   ov.set("train.max_steps", 200);
//   ov.set("data.path", "../shared/data/fra-eng.zip");
//   train::RunConfig cfg = train::configure_run("d2l", train::ModelKind::transformer, ov);
//   train::RunOptions opt;
//   opt.out_dir = "DIR";
//   opt.hooks.push_back(std::make_shared<train::LossPlotHook>("DIR/loss.png"));  // as qkv train
//   train::RunResult r = train::run(cfg, opt);
//
// The CLI adds only flag parsing (one flag per row of runtime::config_fields()), the exit status of
// an interrupted run and the printed summary and sample translations; the check of the flags given
// with --resume against the folder's config.json is check_resume_overrides.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/models/encoder_decoder.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/hooks.h"
#include "qkv/runtime/run_config_fields.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/interrupt.h"

namespace qkv::train {

// RunOverrides (settings that replace a preset's, by config.json key: ov.set("train.max_steps", 200))
// is runtime::RunOverrides (qkv/runtime/run_config_fields.h), one entry per row of the field table;
// the messages of the rules below name the flags. On resume only the rows --resume applies count
// (resume_config).

/// preset_config(preset, kind) with the overrides and `qkv train`'s rules applied: a warmup schedule
/// without warmup steps gets 400; `--preset full --subword none` trains on words untied with the
/// anchor's lengths (num_steps 12 unless given, decoding <= 20); a subword run on a word preset
/// gets num_steps += 2/3 (unless given) and decode.max_len += 1/2 (subword pieces are longer
/// sequences: bench/RESULTS.md). Data other than fra-eng (a TSV file, a file pair) defaults to
/// SentencePiece unigram pieces on the anchor pipeline (--subword none keeps words; the word
/// tokenizer splits on spaces, which languages written without them lack), and fra-eng to the
/// languages en and fr. Then RunConfig::validate(). Throws ConfigError (naming the flag or
/// key) for --vocab-size without --subword, --tie-weights without --shared-vocab or with bahdanau,
/// flags of the other architecture (check_architecture_overrides), --subword/--shared-vocab on the
/// d2l pipeline, heads that do not divide the width, and what validate() refuses; qkv::Error for
/// an unknown preset.
/// kind lm (the language model, train/lm.h): the lm or lm-tiny preset with the overrides; a
/// ConfigError for a flag it does not take ("--subword does not apply to --model lm"), a translation
/// preset, heads that do not divide the width ("--num-heads 3 must divide --num-hiddens 32"),
/// key/value heads that do not divide the heads, or RoPE with an odd head width.
RunConfig configure_run(const std::string& preset, ModelKind kind, const RunOverrides& o);

/// The model folder's config.json (load_model_dir_config) with the first group of overrides
/// (stopping rules, log_every) and the data file (model_data_config: --data or --src-file/--tgt-file,
/// else the recorded path; a language model's text: --data, else the recorded path); validated. Throws qkv::Error when out_dir holds no checkpoint.safetensors or its
/// config.json is unreadable, ConfigError when the result is invalid.
RunConfig resume_config(const std::string& out_dir, const RunOverrides& o);

/// --resume with overrides (qkv train's flags): the folder's checkpoint must exist
/// (check_resume_checkpoint), overrides of the other architecture are refused
/// (check_architecture_overrides), and those that --resume does not apply are compared with the
/// folder's config.json (resume_flag_diffs, report_resume_diffs: a ConfigError for the ones that
/// would change the model, a warning line on `log` for the others). `preset`: the --preset given, ""
/// when none. `lm`: --model lm was given (a language model's folder is resumed only with it, a
/// translation model's only without: a ConfigError naming the command that works; flags of the other
/// kind are refused first, as a preset of the other kind). Then resume_config(out_dir, o).
RunConfig check_resume_overrides(const std::string& out_dir, const RunOverrides& o, const std::string& preset,
                                 std::FILE* log, bool lm = false);

/// Overrides of the architecture that `arch` is not: a ConfigError naming the flag ("--num-blks
/// applies to the Transformer only (not --model bahdanau)", "--num-kv-heads applies to --model lm
/// only", "--subword does not apply to --model lm"); `folder` non-empty (a resume of a translation
/// model) adds which folder's config.json decided the architecture.
void check_architecture_overrides(const RunOverrides& o, ModelKind arch, const std::string& folder = "");

/// A flash backend forced for the whole process (--attention flash, or QKV_ATTENTION=flash without
/// it: default_attention_backend()) that cannot take attention heads of width `head_dim` (the fused
/// kernel takes 1..256): a ConfigError with the reasons the attention call would give ("the flash
/// backend was forced but cannot run: flash: head dims must be in 1..256, got 300 ..."), so a run
/// is refused before it reads or writes anything instead of failing at its first step. Nothing
/// when the backend is not forced or the kernel can run.
void check_forced_flash(int64_t head_dim);

/// Whether the folder `dir` holds what a run stopped before its first checkpoint leaves (kill -9,
/// a power cut): a qkv config.json (a JSON object with "data", "model" and "train" objects, as
/// train::run writes it for every model kind) but no model.safetensors, no checkpoint.safetensors and
/// no kept checkpoint (checkpoints/): nothing trained. A fresh run trains into such a folder without
/// --overwrite: its files wait aside until the new run's first checkpoint (as with --overwrite).
bool holds_stopped_run(const std::string& dir);

/// --resume into `out_dir` needs its checkpoint.safetensors: when there is none, throws ConfigError
/// "--resume: no checkpoint at 'OUT/checkpoint.safetensors': " and what the folder holds, naming the
/// command that works there: a run stopped before its first checkpoint (holds_stopped_run) is
/// trained again without --resume; a model without its checkpoint is replaced with --overwrite or
/// trained into another --out; a missing or empty folder gets a model with qkv train --out OUT.
/// `lm`: the commands say --model lm.
void check_resume_checkpoint(const std::string& out_dir, bool lm = false);

/// How train::run runs (nothing here is saved in config.json).
struct RunOptions {
    std::string out_dir = "runs/qkv";  // the model folder
    /// Continue out_dir's run from its checkpoint (the config must be resume_config's). A folder
    /// that holds a model (model.safetensors, checkpoint.safetensors or config.json) is refused
    /// without resume or overwrite, except one a run left before its first checkpoint
    /// (holds_stopped_run), which a fresh run replaces.
    bool resume = false;
    /// Replace the model in out_dir: the earlier run's files wait in out_dir/.qkv-replaced until
    /// the new run's first checkpoint after a step, then go; a run that fails or stops before it
    /// gets them back (RunResult::restored_earlier).
    bool overwrite = false;
    bool progress = true;          // progress bar (TrainRuntime::progress)
    std::FILE* log = stderr;       // the run's lines (configuration, data, epochs, notes); nullptr: silent
    /// Read at every step boundary; nonzero stops the run there with a checkpoint
    /// (TrainRuntime::interrupt), stop_reason "interrupted". Ignored with catch_signals.
    const volatile std::sig_atomic_t* interrupt = nullptr;
    /// As `qkv train`: from the model built to the end of training a util::InterruptGuard is armed,
    /// so the first SIGINT/SIGTERM stops at the next step boundary with a checkpoint and a second
    /// kills at once (saying what is saved: KillNotes). RunResult::signal tells which was caught.
    bool catch_signals = false;
    /// The optimizer for the freshly built model (Trainer::set_optimizer); empty: Adam.
    std::function<std::shared_ptr<optim::Optimizer>(models::EncoderDecoder&)> make_optimizer;
    std::shared_ptr<GradientSync> gradient_sync;   // Trainer::set_gradient_sync; nullptr: none
    std::vector<std::shared_ptr<TrainHook>> hooks;  // Trainer::add_hook, in order
    std::function<void(const LoggedStep&)> on_logged_step;          // at each metrics.jsonl step record
    std::function<void(int64_t step, double val_loss)> on_validated;  // after each validation
    /// Called once the run is accepted and before the data is read or anything is written: after
    /// every refusal (the ConfigErrors of run) and, on resume, once there are steps to
    /// train. qkv train tests there that it can write --out (a file made and removed), so that a
    /// refused run leaves the folder as it was. An exception it throws ends the run, nothing written.
    std::function<void()> on_accepted;
    /// Data-parallel training (`mpirun -np N qkv train`: dist::world()): with size > 1 this
    /// process is one rank; --batch-size stays the global batch (TrainRuntime::comm). Every rank
    /// reads the data and builds the model; the ranks must agree on the configuration, the data
    /// file and the model (refused before anything is written otherwise); rank 0 alone logs,
    /// shows progress, runs the hooks and callbacks and writes the folder (config.json records
    /// world_size), which the other ranks read to resume, so it must be on a filesystem every rank
    /// sees. nullptr or size 1: one process.
    std::shared_ptr<dist::Communicator> comm;
    GradientReducerOptions reduce;  // overlap (default) or after-backward, bucket sizes
};

struct RunResult {
    /// False when a resume had nothing left to do (`nothing_to_do` says why) or the run was
    /// stopped before its first checkpoint after replacing a model (restored_earlier).
    bool trained = false;
    std::string nothing_to_do;
    bool restored_earlier = false;  // overwrite: stopped before the first checkpoint, earlier files back
    int signal = 0;                 // catch_signals: the signal caught during training (0: none)
    RunConfig config;               // as trained: vocabulary sizes, data fingerprint and path filled
    TrainResult train;
    std::shared_ptr<TranslationData> data;  // the data trained on (for samples); null when not read
    std::shared_ptr<models::EncoderDecoder> model;  // the trained model (eval mode); null when not built
};

/// The stopping rule a resumed checkpoint `p` has already met under `cfg`, or "" when training
/// would go on: epochs done, steps done, or the time budget spent. `given` words the message
/// ("--epochs 2" when given there, else "config.json's epochs 2").
std::string resume_already_done(const RunConfig& cfg, const TrainingProgress& p, const RunOverrides& given = {});

/// Trains as `qkv train` does (see the file comment): checks out_dir (held model, resume,
/// overwrite), reads the data (on resume: checks its fingerprint and vocabularies against the
/// folder), builds the model with cfg.train.seed, writes config.json and the vocabularies, trains,
/// and writes config.json again (a resume: the stopping rules given are not saved). `given` only
/// words messages (resume_already_done). Throws ConfigError for a folder that holds a model, or
/// other files of the names a run writes (model_dir.h kModelDirFiles), without resume/overwrite
/// (the folder as the system will find it once made: --out new/.. is the folder new is in), for
/// resume with overwrite and for a forced flash backend that cannot take the
/// Transformer's heads (check_forced_flash), qkv::Error for data, file and training errors
/// (after restoring an overwritten run's files when the new run had no checkpoint yet).
/// A language model (cfg.architecture lm) trains on its text instead (train/lm.h: LmData, the
/// decoder-only model behind models::LMTrainingView in RunResult::model, RunResult::data null;
/// "validation perplexity P" at the end; a fresh run stopped before its first checkpoint removes
/// what it wrote and returns trained = false); under mpirun (comm size > 1) it is refused.
RunResult run(RunConfig cfg, const RunOptions& opt, const RunOverrides& given = {});

}  // namespace qkv::train
