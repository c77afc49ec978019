// Reloadable model for qkv serve (serve/model_holder.h).
#include "qkv/serve/model_holder.h"

#include <exception>

#include "qkv/core/error.h"
#include "qkv/nn/layers.h"

namespace qkv::serve {

ModelHolder::ModelHolder(std::string dir, std::string compute_type)
    : dir_(std::move(dir)), compute_type_(std::move(compute_type)) {
    QKV_CHECK(compute_type_ == "fp32" || compute_type_ == "bf16" || compute_type_ == "int8",
              "serve: compute type must be fp32, bf16 or int8, got '", compute_type_, "'");
}

std::string ModelHolder::reload() {
    std::lock_guard<std::mutex> serial(reload_mu_);
    try {
        const MatmulPrecisionGuard precision(this->precision());
        auto m = std::make_shared<train::ModelDir>(train::load_model_dir(dir_));
        if (compute_type_ == "int8") nn::quantize_linears_int8(*m->model);
        train::TranslateOptions o;
        o.max_len = 2;
        train::translate_tokens(*m, {{"hello", "."}}, o);  // the model runs end to end
        std::lock_guard<std::mutex> lock(mu_);
        model_ = std::move(m);
        ++generation_;
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

std::shared_ptr<train::ModelDir> ModelHolder::get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return model_;
}

int64_t ModelHolder::generation() const {
    std::lock_guard<std::mutex> lock(mu_);
    return generation_;
}

}  // namespace qkv::serve
