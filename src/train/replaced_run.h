#pragma once
// Private to src/train (train::run and its language-model branch): the refusal of a fresh run into a folder
// that holds run files (check_fresh_out), an overwritten run's files waiting aside until the new
// run has a model (ReplacedRun), and undoing a failed fresh run (FreshRunStart). The --out folder
// as the OS will find it is OutFolder (train/out_folder.h).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/train/average.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/out_folder.h"
#include "qkv/train/run.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

namespace fs = std::filesystem;

inline constexpr const char* kAside = ".qkv-replaced";

/// The TrainRuntime settings a run takes from its RunOptions (the folder, resume, progress, log,
/// interrupt flag) and its config's log_every; the caller adds the rest.
inline TrainRuntime runtime_from(const RunOptions& opt, int64_t log_every) {
    TrainRuntime rt;
    rt.out_dir   = opt.out_dir;
    rt.resume    = opt.resume;
    rt.progress  = opt.progress;
    rt.log       = opt.log;
    rt.log_every = log_every;
    rt.interrupt = opt.interrupt;
    return rt;
}

/// overwrite: the earlier run's files (all that qkv train writes: kModelDirFiles, and the models of
/// kept checkpoints in OUT/checkpoints, average.h kept_checkpoints) wait in OUT/.qkv-replaced until
/// the new run has written its first checkpoint after a step; a run that fails or is stopped
/// before that gets them back.
class ReplacedRun {
public:
    /// Moves the run files in the folder of --out `shown` (`out`: as the OS finds it) aside (a
    /// rename each: the same file system).
    ReplacedRun(const std::string& shown, const OutFolder& out)
        : shown_(shown), out_(out), dir_(out.dir), aside_(out.dir / kAside) {
        fs::create_directory(aside_);
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (fs::exists(fs::symlink_status(dir_ / f, ec))) fs::rename(dir_ / f, aside_ / f);
        // The new run removes the kept checkpoints it finds (RunRecorder::start).
        had_kept_dir_ = fs::exists(dir_ / kKept, ec);
        const auto kept = kept_checkpoints(dir_.string());
        if (!kept.empty()) fs::create_directory(aside_ / kKept);
        for (const auto& k : kept) fs::rename(k, aside_ / kKept / fs::path(k).filename());
        pending_ = true;
    }
    /// The new run has a model: the earlier one goes for good.
    void discard() {
        if (!pending_) return;
        fs::remove_all(aside_);
        pending_ = false;
    }
    /// The new run has none: its files go, the earlier run's come back, and folders the new run
    /// made on the way to its folder (--out new/..) go. True when it did so.
    bool restore() {
        if (!pending_) return false;
        pending_ = false;
        std::error_code ec;
        for (const char* f : kModelDirFiles) {
            fs::remove(dir_ / f, ec);
            if (fs::exists(fs::symlink_status(aside_ / f, ec))) fs::rename(aside_ / f, dir_ / f);
        }
        for (const auto& k : kept_checkpoints(dir_.string())) fs::remove(k, ec);  // the new run's
        std::vector<fs::path> earlier;
        for (fs::directory_iterator it(aside_ / kKept, ec), end; !ec && it != end; it.increment(ec))
            earlier.push_back(it->path());
        for (const auto& k : earlier) fs::rename(k, dir_ / kKept / k.filename(), ec);
        fs::remove(aside_ / kKept, ec);
        if (!had_kept_dir_ && fs::is_directory(dir_ / kKept, ec) && fs::is_empty(dir_ / kKept, ec))
            fs::remove(dir_ / kKept, ec);  // made by the new run
        fs::remove(aside_, ec);
        out_.remove_created_folders();
        return true;
    }

    /// restore() after the new run threw; says so on `log` (may be null).
    void restore_after_failure(std::FILE* log) {
        if (restore() && log)
            std::fprintf(log, "qkv train: the new run failed before its first checkpoint; the earlier model in %s is "
                              "restored\n", shown_.c_str());
    }
    /// restore() after fit() returned: true when the new run had no checkpoint after a step and
    /// the earlier files came back, said on `log` with what stopped it (`sig`: SIGINT, SIGTERM,
    /// or 0 for another stop).
    bool restore_after_stop(int sig, std::FILE* log) {
        if (!restore()) return false;
        if (log)
            std::fprintf(log, "qkv train: %s before the new run's first checkpoint; the earlier model in %s is "
                              "restored\n",
                         sig == SIGINT ? "interrupted (SIGINT)" : sig == SIGTERM ? "interrupted (SIGTERM)" : "stopped",
                         shown_.c_str());
        return true;
    }

private:
    static constexpr const char* kKept = "checkpoints";
    std::string shown_;
    OutFolder   out_;
    fs::path    dir_, aside_;
    bool had_kept_dir_ = false;
    bool pending_      = false;
};

/// What a fresh run finds before it writes anything: its folder (OutFolder) and which run file
/// names (kModelDirFiles) are already there (none: a folder that holds one is refused,
/// check_fresh_out, unless something wrote one since). Undoing the run removes only what it made.
struct FreshRunStart {
    OutFolder             out;
    std::vector<fs::path> had;
    explicit FreshRunStart(OutFolder folder) : out(std::move(folder)) {
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (fs::exists(out.dir / f, ec)) had.push_back(out.dir / f);
    }
    /// Removes the run files that were not there at the start, then the folders the run created
    /// once empty.
    void undo() const {
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (std::find(had.begin(), had.end(), out.dir / f) == had.end()) fs::remove(out.dir / f, ec);
        out.remove_created_folders();
    }
};

/// A fresh run (no --resume, nothing replaced) that threw before its first checkpoint: removes
/// the run files it wrote and the folders it created (FreshRunStart::undo), so the same command
/// can run again once the cause is fixed. A run that has a checkpoint keeps its files (--resume
/// continues it).
inline void remove_files_of_failed_fresh_run(const FreshRunStart& start) {
    std::error_code ec;
    if (fs::exists(start.out.dir / "checkpoint.safetensors", ec)) return;
    start.undo();
}

/// A new run (fresh or --overwrite: `overwrite`) into --out `out_dir` (resolved: `dir`) while an
/// earlier overwrite's files still wait aside (it was killed): a ConfigError saying how to recover.
inline void check_no_files_aside(const std::string& out_dir, const fs::path& dir, bool overwrite) {
    const fs::path aside = fs::path(out_dir) / kAside;
    std::error_code ec;
    if (fs::exists(dir / kAside, ec))
        throw ConfigError(detail::str(overwrite ? "--overwrite: '" : "--out: '", aside.string(),
                                      "' holds the model an earlier qkv train --overwrite was replacing when it was "
                                      "killed; move its files back into '", out_dir, "' (or delete it) first"));
}

/// The run file names (kModelDirFiles) in the folder `dir`, in that order, then "N kept
/// checkpoints in checkpoints/" when it keeps some (kept_checkpoints: a new run removes
/// them). Temporaries of their writes that a killed run left ("config.json.tmp.123") are not among
/// them: a run removes those (util::remove_stale_temp_files) before it writes the file.
inline std::vector<std::string> run_files_in(const fs::path& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const char* f : kModelDirFiles)
        if (fs::exists(fs::symlink_status(dir / f, ec))) found.push_back(f);
    if (const size_t n = kept_checkpoints(dir.string()).size(); n > 0)
        found.push_back(detail::str(n, " kept checkpoint", n == 1 ? "" : "s", " in checkpoints/"));
    return found;
}

/// A fresh run (no --resume) into --out `out_dir` (resolved: `dir`, OutFolder::dir) writes over or
/// removes every run file (kModelDirFiles) there, so a folder that holds any is refused with a
/// ConfigError naming the folder and the files, unless `overwrite`: one with a model
/// (model.safetensors, checkpoint.safetensors, config.json) "already holds a qkv model (...)";
/// one with other run files only (a user's spm.model, metrics.jsonl, ...) "holds files that qkv
/// train writes (...) but no model". A folder a run left before its first checkpoint
/// (holds_stopped_run) is not refused: its files are returned, to be set aside as --overwrite's. A
/// folder whose earlier replaced files still wait aside (a
/// killed --overwrite) is refused with or without `overwrite` (check_no_files_aside). Returns the
/// run files found: those --overwrite moves aside (ReplacedRun).
inline std::vector<std::string> check_fresh_out(const std::string& out_dir, const fs::path& dir, bool overwrite) {
    // Files an overwrite killed midway left aside: any new run there would bury them.
    check_no_files_aside(out_dir, dir, overwrite);
    const std::vector<std::string> found = run_files_in(dir);
    if (found.empty() || overwrite) return found;
    std::string model, all;
    for (const auto& f : found) {
        all += (all.empty() ? "" : ", ") + f;
        if (f == "model.safetensors" || f == "checkpoint.safetensors" || f == "config.json")
            model += (model.empty() ? "" : ", ") + f;
    }
    // A run stopped before its first checkpoint trained nothing: a new run takes its place (its
    // files wait aside until the new run's first checkpoint, as with --overwrite).
    if (holds_stopped_run(dir.string())) return found;
    // --resume is named only where it works: it continues from checkpoint.safetensors.
    std::error_code ec;
    if (!model.empty() && fs::exists(dir / "checkpoint.safetensors", ec))
        throw ConfigError(detail::str("--out '", out_dir, "' already holds a qkv model (", model,
                                      "); continue its training with --resume, replace it with --overwrite, or give "
                                      "another --out"));
    if (!model.empty())
        throw ConfigError(detail::str("--out '", out_dir, "' already holds a qkv model (", model,
                                      ") without a checkpoint.safetensors to continue from: replace it with "
                                      "--overwrite, or give another --out"));
    throw ConfigError(detail::str("--out '", out_dir, "' holds files that qkv train writes (", all,
                                  ") but no model; a new run would write over them: give another --out, or replace "
                                  "them with --overwrite (they wait in '", (fs::path(out_dir) / kAside).string(),
                                  "' until the new run's first checkpoint and come back if it fails or is stopped "
                                  "before it)"));
}

/// A fresh run without --overwrite that check_fresh_out let into a folder with run files `held` (a
/// run stopped before its first checkpoint, holds_stopped_run): says on `log` (may be null) that the
/// new run takes its place.
inline void note_stopped_run(const std::string& out_dir, const std::vector<std::string>& held, std::FILE* log) {
    if (!log) return;
    std::string files;
    for (const auto& f : held) files += (files.empty() ? "" : ", ") + f;
    std::fprintf(log, "qkv train: '%s' holds a run stopped before its first checkpoint (%s; no model, no checkpoint): "
                      "training a new one in its place\n", out_dir.c_str(), files.c_str());
}

}  // namespace qkv::train
