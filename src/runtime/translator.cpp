// The thread-safe translator over a model folder (runtime/translator.h).
#include "qkv/runtime/translator.h"

#include <exception>

#include "qkv/core/error.h"

namespace qkv::runtime {

Translator::Translator(std::string dir, ComputeType compute_type, Setup setup)
    : dir_(std::move(dir)), compute_type_(compute_type), setup_(std::move(setup)) {}

std::shared_ptr<ModelDir> Translator::load_copy() const {
    auto m = std::make_shared<ModelDir>(load_model_dir(dir_));
    if (setup_)
        setup_(*m);
    else
        apply_compute_type(*m->model, compute_type_);
    return m;
}

void Translator::load() {
    std::lock_guard<std::mutex> serial(load_mu_);
    auto m = load_copy();
    std::lock_guard<std::mutex> lock(mu_);
    newest_ = m;
    free_   = {std::move(m)};  // copies of the older model are dropped as they come back
    copies_ = 1;
    ++generation_;
}

std::string Translator::reload() {
    std::lock_guard<std::mutex> serial(load_mu_);
    try {
        const MatmulPrecisionGuard guard(precision());
        auto m = load_copy();
        TranslateOptions o;
        o.max_len = 2;
        translate_tokens(*m, {{"hello", "."}}, o);  // the model runs end to end
        std::lock_guard<std::mutex> lock(mu_);
        newest_ = m;
        free_   = {std::move(m)};
        copies_ = 1;
        ++generation_;
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

std::shared_ptr<const ModelDir> Translator::get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return newest_;
}

int64_t Translator::generation() const {
    std::lock_guard<std::mutex> lock(mu_);
    return generation_;
}

int64_t Translator::copies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return copies_;
}

Translator::Lease Translator::borrow() {
    int64_t generation = 0;
    {
        std::lock_guard<std::mutex> lock(mu_);
        QKV_CHECK(generation_ > 0, "no model loaded");
        generation = generation_;
        if (!free_.empty()) {
            auto m = std::move(free_.back());
            free_.pop_back();
            return Lease(this, std::move(m), generation);
        }
    }
    auto m = load_copy();  // every copy is lent: one more
    std::lock_guard<std::mutex> lock(mu_);
    if (generation == generation_) ++copies_;
    return Lease(this, std::move(m), generation);
}

void Translator::give_back(std::shared_ptr<ModelDir> m, int64_t generation) {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation == generation_) free_.push_back(std::move(m));
}

Translator::Lease::~Lease() {
    if (m_) owner_->give_back(std::move(m_), generation_);
}

std::vector<std::vector<Translation>> Translator::translate(const std::vector<std::vector<std::string>>& src,
                                                            const TranslateOptions& opt) {
    const ActiveCall active(active_);
    const MatmulPrecisionGuard guard(precision());
    Lease m = borrow();
    return translate_nbest(*m, src, opt);
}

std::vector<TokenScores> Translator::score(const std::vector<std::vector<std::string>>& sources,
                                           const std::vector<std::vector<std::string>>& targets) {
    QKV_CHECK(sources.size() == targets.size(), "score: ", sources.size(), " sources but ", targets.size(), " targets");
    const ActiveCall active(active_);
    const MatmulPrecisionGuard guard(precision());
    Lease lease = borrow();
    ModelDir& m = *lease;
    const auto units = source_units(m, sources);
    std::vector<TokenScores> out(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
        const SourceRow row = encode_source_row(m, units[i]);
        std::vector<int64_t> ids = m.tgt_vocab.encode(m.subwords.active() ? m.subwords.tgt->encode(targets[i]) : targets[i]);
        ids.push_back(m.tgt_vocab.eos());
        TokenScores& r = out[i];
        r.log_probs    = teacher_force(m, row.ids, row.valid_len, ids);
        for (size_t t = 0; t < ids.size(); ++t) {
            r.tokens.push_back(m.tgt_vocab.decode({ids[t]}).front());
            r.sum += r.log_probs[t];
        }
    }
    return out;
}

std::vector<AttentionMap> Translator::attention(const std::vector<std::vector<std::string>>& sources,
                                                int64_t max_len, bool no_unk) {
    const ActiveCall active(active_);
    const MatmulPrecisionGuard guard(precision());
    Lease lease = borrow();
    const auto units = source_units(*lease, sources);
    std::vector<AttentionMap> out(sources.size());
    for (size_t i = 0; i < sources.size(); ++i)
        if (!sources[i].empty()) out[i] = greedy_attention(*lease, units[i], max_len, no_unk);
    return out;
}

}  // namespace qkv::runtime
