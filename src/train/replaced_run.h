#pragma once
// Private to src/train: an overwritten run's files wait aside until the new run has a model
// (train::run and train::run_lm).
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>

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

/// A fresh run (no --resume, nothing replaced) that threw before its first checkpoint: removes
/// the run files it wrote (kModelDirFiles; none of them was there before, or the folder would
/// have been refused) and the folder when this run created it and it is empty, so the same
/// command can run again once the cause is fixed. A run that has a checkpoint keeps its files
/// (--resume continues it).
inline void remove_files_of_failed_fresh_run(const fs::path& dir, bool dir_existed) {
    std::error_code ec;
    if (fs::exists(dir / "checkpoint.safetensors", ec)) return;
    for (const char* f : kModelDirFiles) fs::remove(dir / f, ec);
    if (!dir_existed && fs::is_empty(dir, ec)) fs::remove(dir, ec);
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
