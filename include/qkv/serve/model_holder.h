#pragma once
// The model `qkv serve` translates with, reloadable from its folder while requests are served:
// a reload loads and checks the folder into a new ModelDir and swaps it in only when that
// succeeded (a damaged folder is refused; the old model keeps serving). Batches that started on
// the old model finish with it (each holds a shared_ptr).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "qkv/ops/precision.h"
#include "qkv/train/model_dir.h"

namespace qkv::serve {

class ModelHolder {
public:
    /// Nothing is loaded until reload() succeeds. compute_type as `qkv translate --compute-type`:
    /// "fp32", "bf16" (bf16 products and attention: precision()) or "int8" (each loaded model's
    /// Linear weights quantized, nn::quantize_linears_int8). Throws qkv::Error for another value.
    explicit ModelHolder(std::string dir, std::string compute_type = "fp32");

    /// Loads dir (train::load_model_dir) and translates one short sentence with it as a check;
    /// on success it becomes the served model and "" is returned. On failure the served model
    /// stays and the error message is returned (for the log: it may name files). Reloads are
    /// serialised. Never throws for a bad folder.
    std::string reload();
    /// The served model (nullptr before the first successful reload).
    std::shared_ptr<train::ModelDir> get() const;
    const std::string& dir() const { return dir_; }
    const std::string& compute_type() const { return compute_type_; }
    /// The matrix-product precision translations with this model run under (thread-local: the
    /// caller sets it, MatmulPrecisionGuard).
    MatmulPrecision precision() const {
        return compute_type_ == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp32;
    }
    /// Successful loads so far (1 after the first).
    int64_t generation() const;

private:
    std::string dir_;
    std::string compute_type_;
    mutable std::mutex mu_;
    std::mutex reload_mu_;
    std::shared_ptr<train::ModelDir> model_;
    int64_t generation_ = 0;
};

}  // namespace qkv::serve
