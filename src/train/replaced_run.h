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

/// A run's --out folder as the OS will find it once fs::create_directories has made it, worked out
/// before anything is created: each existing component with its symbolic links followed, ".." the
/// parent of the folder reached so far ("new/.." is the folder new is made in; "L/.." for a link L
/// to a folder elsewhere is that folder's parent, not the link's), "." and empty components
/// skipped. Taken from the path as given, so undoing a failed run finds the folders it made even
/// when the path goes through one and back out ("new/../other" makes new and other).
struct OutFolder {
    fs::path              dir;      // absolute, without symbolic links, "." or ".."
    std::vector<fs::path> created;  // the folders making `dir` creates, in that order (resolved likewise)
    explicit OutFolder(const fs::path& given) {
        std::error_code ec;
        const fs::path abs = fs::absolute(given, ec);
        fs::path cur = abs.root_path();
        for (const fs::path& part : abs.relative_path()) {
            if (part.empty() || part == ".") continue;
            if (part == "..") {  // `cur` has no links left: its parent is the one the OS goes to
                cur = cur.parent_path();
                continue;
            }
            cur /= part;
            if (std::find(created.begin(), created.end(), cur) != created.end()) continue;  // made on the way
            if (!fs::exists(fs::symlink_status(cur, ec))) {
                created.push_back(cur);
                continue;
            }
            fs::path real = fs::canonical(cur, ec);
            if (ec) {  // a dangling link or a folder it may not search: the run cannot make the folder
                dir = abs.lexically_normal();
                return;
            }
            cur = std::move(real);
        }
        dir = cur;
    }
    /// Removes the folders the run created that are empty, innermost first.
    void remove_created_folders() const {
        std::error_code ec;
        for (auto it = created.rbegin(); it != created.rend(); ++it)
            if (fs::is_directory(fs::symlink_status(*it, ec)) && fs::is_empty(*it, ec)) fs::remove(*it, ec);
    }
};

/// What a fresh run finds before it writes anything: its folder (OutFolder) and which run file
/// names (kModelDirFiles) are already there (a folder is refused only when it holds a model, so a
/// user's own vocab.txt or loss.png may be there). Undoing the run removes only what it made.
struct FreshRunStart {
    OutFolder             out;
    std::vector<fs::path> had;
    explicit FreshRunStart(const fs::path& dir) : out(dir) {
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
