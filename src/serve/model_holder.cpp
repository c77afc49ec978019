// Reloadable model for qkv serve (serve/model_holder.h).
#include "qkv/serve/model_holder.h"

#include <exception>

namespace qkv::serve {

ModelHolder::ModelHolder(std::string dir) : dir_(std::move(dir)) {}

std::string ModelHolder::reload() {
    std::lock_guard<std::mutex> serial(reload_mu_);
    try {
        auto m = std::make_shared<train::ModelDir>(train::load_model_dir(dir_));
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
