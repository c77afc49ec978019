#pragma once
// Private to src/train: an overwritten run's files wait aside until the new run has a model
// (train::run and train::run_lm).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"

namespace qkv::train {

namespace fs = std::filesystem;

inline constexpr const char* kAside = ".qkv-replaced";

/// overwrite: the earlier run's files (all that qkv train writes: kModelDirFiles) wait in
/// OUT/.qkv-replaced until the new run has written its first checkpoint after a step; a run that
/// fails or is stopped before that gets them back.
class ReplacedRun {
public:
    /// Moves the run files in `dir` aside (a rename each: the same file system).
    explicit ReplacedRun(const std::string& dir) : dir_(dir), aside_(fs::path(dir) / kAside) {
        fs::create_directory(aside_);
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (fs::exists(dir_ / f, ec)) fs::rename(dir_ / f, aside_ / f);
        pending_ = true;
    }
    /// The new run has a model: the earlier one goes for good.
    void discard() {
        if (!pending_) return;
        fs::remove_all(aside_);
        pending_ = false;
    }
    /// The new run has none: its files go, the earlier run's come back. True when it did so.
    bool restore() {
        if (!pending_) return false;
        pending_ = false;
        std::error_code ec;
        for (const char* f : kModelDirFiles) {
            fs::remove(dir_ / f, ec);
            if (fs::exists(aside_ / f, ec)) fs::rename(aside_ / f, dir_ / f);
        }
        fs::remove(aside_, ec);
        return true;
    }

    /// restore() after the new run threw; says so on `log` (may be null).
    void restore_after_failure(std::FILE* log) {
        if (restore() && log)
            std::fprintf(log, "qkv train: the new run failed before its first checkpoint; the earlier model in %s is "
                              "restored\n", dir_.c_str());
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
                         dir_.c_str());
        return true;
    }

private:
    fs::path dir_, aside_;
    bool pending_ = false;
};

/// `dir` made absolute and normal, without a trailing separator.
inline fs::path normal_dir(const fs::path& dir) {
    std::error_code ec;
    fs::path p = fs::absolute(dir, ec).lexically_normal();
    if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
    return p;
}

/// The nearest of `dir` and its parents that exists now: taken before a run creates `dir`, it
/// marks which folders the run created (those below it).
inline fs::path existing_ancestor(const fs::path& dir) {
    std::error_code ec;
    fs::path p = normal_dir(dir);
    while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
    return p;
}

/// Removes `dir` and then each parent, up to (not including) `existed` (existing_ancestor taken
/// before the run), while each is empty: the folders the run created and left empty.
inline void remove_created_folders(const fs::path& dir, const fs::path& existed) {
    std::error_code ec;
    for (fs::path p = normal_dir(dir); p != existed && p.has_parent_path() && p.parent_path() != p; p = p.parent_path())
        if (!fs::is_empty(p, ec) || ec || !fs::remove(p, ec)) break;
}

/// What a fresh run finds before it writes anything: the nearest existing folder on the way to
/// `dir` (existing_ancestor) and which run file names (kModelDirFiles) are already in `dir` (a
/// folder is refused only when it holds a model, so a user's own vocab.txt or loss.png may be
/// there). Undoing the run removes only what it made.
struct FreshRunStart {
    fs::path              existed;
    std::vector<fs::path> had;
    explicit FreshRunStart(const fs::path& dir) : existed(existing_ancestor(dir)) {
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (fs::exists(dir / f, ec)) had.push_back(dir / f);
    }
    /// Removes the run files in `dir` that were not there at the start, then the folders the run
    /// created once empty.
    void undo(const fs::path& dir) const {
        std::error_code ec;
        for (const char* f : kModelDirFiles)
            if (std::find(had.begin(), had.end(), dir / f) == had.end()) fs::remove(dir / f, ec);
        remove_created_folders(dir, existed);
    }
};

/// A fresh run (no --resume, nothing replaced) that threw before its first checkpoint: removes
/// the run files it wrote and the folders it created (FreshRunStart::undo), so the same command
/// can run again once the cause is fixed. A run that has a checkpoint keeps its files (--resume
/// continues it).
inline void remove_files_of_failed_fresh_run(const fs::path& dir, const FreshRunStart& start) {
    std::error_code ec;
    if (fs::exists(dir / "checkpoint.safetensors", ec)) return;
    start.undo(dir);
}

/// --overwrite into `out_dir` while an earlier overwrite's files still wait aside (it was killed):
/// a ConfigError saying how to recover.
inline void check_no_files_aside(const std::string& out_dir) {
    const fs::path aside = fs::path(out_dir) / kAside;
    std::error_code ec;
    if (fs::exists(aside, ec))
        throw ConfigError(detail::str("--overwrite: '", aside.string(), "' holds the model an earlier qkv train "
                                      "--overwrite was replacing when it was killed; move its files back into '",
                                      out_dir, "' (or delete it) first"));
}

}  // namespace qkv::train
