#pragma once
// The model `qkv serve` translates with, reloadable from its folder while requests are served:
// a reload loads and checks the folder into a new ModelDir and swaps it in only when that
// succeeded (a damaged folder is refused; the old model keeps serving). Batches that started on
// the old model finish with it (each holds a shared_ptr).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "qkv/train/model_dir.h"

namespace qkv::serve {

class ModelHolder {
public:
    /// Nothing is loaded until reload() succeeds.
    explicit ModelHolder(std::string dir);

    /// Loads dir (train::load_model_dir) and translates one short sentence with it as a check;
    /// on success it becomes the served model and "" is returned. On failure the served model
    /// stays and the error message is returned (for the log: it may name files). Reloads are
    /// serialised. Never throws for a bad folder.
    std::string reload();
    /// The served model (nullptr before the first successful reload).
    std::shared_ptr<train::ModelDir> get() const;
    const std::string& dir() const { return dir_; }
    /// Successful loads so far (1 after the first).
    int64_t generation() const;

private:
    std::string dir_;
    mutable std::mutex mu_;
    std::mutex reload_mu_;
    std::shared_ptr<train::ModelDir> model_;
    int64_t generation_ = 0;
};

}  // namespace qkv::serve
