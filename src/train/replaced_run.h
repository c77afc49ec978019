#pragma once
// Private to src/train: an overwritten run's files wait aside until the new run has a model
// (train::run and train::run_lm).
#include <filesystem>
#include <string>

#include "qkv/train/model_dir.h"

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

private:
    fs::path dir_, aside_;
    bool pending_ = false;
};

}  // namespace qkv::train
