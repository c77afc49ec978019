// `qkv train`: train D2L's Transformer (or, with --model bahdanau, D2L's GRU encoder–decoder with
// Bahdanau attention; with --model lm a decoder-only language model on a text) from a preset plus
// flag overrides; writes the model folder (runtime/model_dir.h) and ends with a few held-out
// translations (a language model: a greedy sample). The flags of the run configuration are the rows
// of runtime::config_fields() (train_flags.h); the library does the rest (train/run.h:
// configure_run's preset rules, check_resume_overrides, train::run's folder guards and training,
// for every model kind). Here: the command's own flags and usage errors (exit 2: --out, a
// ConfigError); train_output.h prints the summary, the samples and the end of an interrupted run
// (exit status 130 / 143).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "options.h"
#include "qkv/dist/communicator.h"
#include "qkv/runtime/generate.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/run_config.h"
#include "qkv/train/lm.h"
#include "qkv/train/run.h"
#include "qkv/util/timer.h"
#include "train_flags.h"
#include "train_output.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
    std::string preset = "demo", model = "transformer", out = "runs/qkv", grad_reduce = "overlap";
    bool resume = false, overwrite = false, no_progress = false;
    ConfigFlags flags;
};

bool given(CLI::App* c, const char* flag) { return c->get_option(flag)->count() > 0; }

train::RunOptions run_options(const TrainArgs& a) {
    train::RunOptions ro;
    ro.out_dir = a.out, ro.resume = a.resume, ro.overwrite = a.overwrite, ro.progress = !a.no_progress;
    ro.catch_signals = true;
    ro.on_accepted   = [out = a.out] { test_out_folder_write("--out", out); };
    return ro;
}

/// After a language model's run: the summary and a greedy sample from D2L's prompt when the text has
/// its letters, else from the vocabulary's first letter.
void report_lm(const train::RunResult& r, const std::string& out) {
    if (report_early_end(r, /*lm=*/true)) return;
    print_summary(r.train, out, "model.safetensors, checkpoint.safetensors, config.json, vocab.txt, metrics.jsonl");
    report_signal(r, out, /*lm=*/true);
    const runtime::ModelDir m = runtime::load_model_dir(out, /*language_model=*/true);
    std::string prompt = "the time traveller";
    for (char ch : prompt)
        if (m.tgt_vocab.token_to_idx(std::string(1, ch)) == m.tgt_vocab.unk()) prompt = m.tgt_vocab.idx_to_token(3);
    runtime::GenerateOptions g;
    g.max_new_tokens = 60;
    std::printf("sample (greedy): %s%s\n", prompt.c_str(), runtime::generate_text(m, prompt, g).c_str());
}

void run(TrainArgs& a, CLI::App* c) {
    runtime::RunOverrides o;
    try {
        o = config_overrides(a.flags);
    } catch (const Error& e) {
        usage_error(e.what());
    }
    if (a.resume && a.overwrite)
        usage_error("--resume continues the model in --out and --overwrite replaces it: give one of them");
    const bool lm = a.model == "lm";
    if (lm && given(c, "--grad-reduce")) usage_error("--grad-reduce does not apply to --model lm");
    if (given(c, "--model") && !lm) o.set("model.architecture", a.model);
    util::Timer wall;
    check_out_folder("--out", a.out, /*write_test=*/false);
    train::RunOptions ro = run_options(a);
    // Under `mpirun -np N` this process is one of N ranks (data-parallel; a build without MPI
    // refuses here rather than train N separate copies into one folder).
    ro.comm = dist::world();
    // The line a lost rank leaves (dist/communicator.h lost_rank_line): the resume command.
    ro.comm->set_recovery_hint("qkv train", "qkv train --resume --out " + shell_quote(a.out));
    ro.reduce.overlap = a.grad_reduce == "overlap";
    const bool rank0 = ro.comm->rank() == 0;
    // Rank 0 alone writes the folder, so it alone tests it (another rank's probe folder, made and
    // removed, could remove the folder rank 0 has just made).
    if (!rank0) ro.on_accepted = nullptr;
    if (!lm) ro.hooks.push_back(std::make_shared<train::LossPlotHook>((fs::path(a.out) / "loss.png").string()));
    const std::string preset = given(c, "--preset") ? a.preset : lm ? "lm" : a.preset;
    train::RunResult r;
    try {
        // nothing is read or written before the configuration is known good
        const runtime::RunConfig cfg =
            a.resume ? train::check_resume_overrides(a.out, o, given(c, "--preset") ? a.preset : "", stderr, lm)
                     : train::configure_run(preset, runtime::parse_model_kind(a.model), o);
        r = train::run(cfg, ro, o);
    } catch (const runtime::ConfigError& e) {
        usage_error(e.what());
    }
    if (lm) return report_lm(r, a.out);
    if (!rank0) {  // rank 0 reports for the whole run
        if (r.nothing_to_do.empty() && r.restored_earlier) throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
        if (r.nothing_to_do.empty() && r.signal != 0) throw ExitStatus{128 + r.signal};
        return;
    }
    if (report_early_end(r, /*lm=*/false)) return;
    print_summary(r.train, a.out);
    if (ro.comm->size() > 1 && r.train.train_seconds > 0)
        std::printf("data-parallel: %d ranks; rank 0 waited %.2f s on the gradient reduction (%.1f %% of its training "
                    "time)\n", ro.comm->size(), r.train.comm_seconds,
                    100.0 * r.train.comm_seconds / r.train.train_seconds);
    report_signal(r, a.out, /*lm=*/false);
    runtime::ModelDir m = runtime::load_model_dir(a.out);
    print_samples(m, *r.data, 8);
    std::printf("total wall time %s\n", util::format_duration(wall.seconds()).c_str());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    CLI::App* c = app.add_subcommand("train", "train D2L's Transformer or Bahdanau model on English-French or a parallel corpus of your own");
    std::string presets;
    for (auto& n : runtime::preset_names()) presets += (presets.empty() ? "" : "|") + n;
    std::vector<std::string> all_presets = runtime::preset_names();
    for (const auto& n : runtime::lm_preset_names()) all_presets.push_back(n);
    // --preset and --model are rows of the table (config.json's "preset", "model.architecture") that
    // also take the language model's names, so declared here (add_config_flags skips them).
    c->add_option("--preset", a->preset, "configuration to start from: " + presets + " (default demo); with --model lm: "
                                         "lm (default) or lm-tiny")
        ->check(CLI::IsMember(all_presets))->group("Model");
    c->add_option("--model", a->model, "transformer (default), bahdanau (GRU encoder-decoder with additive attention, "
                                       "D2L 11.4), or lm (a decoder-only language model on a text, e.g. "
                                       "../shared/data/timemachine.txt; qkv generate samples it)")
        ->check(CLI::IsMember({"transformer", "bahdanau", "lm"}))->group("Model");
    add_config_flags(c, a->flags);
    c->get_option("--src-file")->needs(c->get_option("--tgt-file"));
    c->get_option("--tgt-file")->needs(c->get_option("--src-file"));
    c->get_option("--data")->excludes(c->get_option("--src-file"));
    c->add_flag("--resume", a->resume, "continue from OUT/checkpoint.safetensors (written at epoch ends, validation "
                                       "points, stops and Ctrl-C) with OUT/config.json's settings (same losses as an "
                                       "uninterrupted run); only " + resume_applied_flags() + " apply, other flags "
                                       "that differ are refused (model shape) or ignored with a warning")
        ->group("Training");
    c->add_flag("--overwrite", a->overwrite,
                "train a new model into an --out that already holds one (model.safetensors, "
                "checkpoint.safetensors or config.json) or other files of the names a run writes (vocabularies, "
                "spm.model, metrics.jsonl, loss.png, ...; without --resume or this flag such a folder is "
                "refused): the earlier run's files wait in OUT/.qkv-replaced until the new run's first "
                "checkpoint, then go; a run that fails or is stopped before it restores them")
        ->group("Training");
    c->add_option("--grad-reduce", a->grad_reduce, "under mpirun: reduce gradient buckets during backward (overlap, "
                                                   "default) or after it (after-backward)")
        ->check(CLI::IsMember({"overlap", "after-backward"}))->group("Training");
    c->add_option("--out", a->out, "model folder to write (default runs/qkv, the folder translate, eval, serve, "
                                  "heatmap and info read by default)")->check(non_empty_path())->group("Output");
    c->add_flag("--no-progress", a->no_progress, "no progress bar (default: a bar on a terminal, a line every 10 s "
                                                 "otherwise)")->group("Output");
    c->callback([a, c] { run(*a, c); });
});

}  // namespace
}  // namespace qkv::cli
