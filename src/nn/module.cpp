// nn::Module: registration, recursive parameter listing, train/eval, state_dict.
#include "qkv/nn/module.h"

#include <cmath>
#include <cstring>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/ops/elementwise.h"

namespace qkv::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
    QKV_CHECK(t.defined(), "register_parameter: parameter '", name, "' is undefined");
    t = t.detach();
    t.requires_grad_(true);
    params_.emplace_back(name, t);
    return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
    buffers_.emplace_back(name, t);
    return t;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     bool buffers) const {
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
    if (buffers)
        for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
    for (const auto& [n, m] : children_)
        if (m) m->collect(prefix + n + ".", out, buffers);
}

void Module::tie_parameter(const std::string& name, const Tensor& t) {
    for (auto& [n, p] : params_) {
        if (n != name) continue;
        QKV_CHECK(t.defined() && t.shape() == p.shape(), "tie_parameter: '", name, "' has shape ", p.shape(),
                  " but the shared tensor has ", t.defined() ? t.shape() : Shape{});
        QKV_CHECK(t.is_leaf(), "tie_parameter: the shared tensor for '", name, "' is not a leaf");
        p = t;
        p.requires_grad_(true);
        return;
    }
    throw Error(detail::str("tie_parameter: no parameter '", name, "' in this module"));
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
    std::vector<std::pair<std::string, Tensor>> all, out;
    collect("", all, false);
    out.reserve(all.size());
    for (auto& [n, t] : all) {
        bool dup = false;
        for (auto& [n2, t2] : out) dup = dup || t2.is_same(t);
        if (!dup) out.emplace_back(n, t);
    }
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& [n, t] : named_parameters()) out.push_back(t);
    return out;
}

std::map<std::string, Tensor> Module::state_dict() const {
    std::vector<std::pair<std::string, Tensor>> all;
    collect("", all, true);
    return {all.begin(), all.end()};
}

void Module::load_state_dict(const std::map<std::string, Tensor>& sd, bool strict) {
    std::vector<std::pair<std::string, Tensor>> all;
    collect("", all, true);
    NoGradGuard ng;
    // Tied parameters: the first name of each shared tensor that the file has, and its value.
    auto file_name_of = [&](const Tensor& t) -> const std::string* {
        for (auto& [n2, t2] : all)
            if (t2.is_same(t) && sd.count(n2)) return &n2;
        return nullptr;
    };
    for (auto& [name, t] : all) {
        auto it = sd.find(name);
        if (it == sd.end()) {
            QKV_CHECK(!strict || file_name_of(t) != nullptr, "load_state_dict: missing key '", name,
                      "' (shape ", t.shape(), ")");
            continue;
        }
        if (const std::string* first = file_name_of(t); first && *first != name) {
            const Tensor& a = sd.at(*first);
            const Tensor& b = it->second;
            QKV_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() &&
                          std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(),
                                      size_t(a.numel() * dtype_size(a.dtype()))) == 0,
                      "load_state_dict: '", *first, "' and '", name,
                      "' are one tied parameter in the model but differ in the checkpoint");
        }
        QKV_CHECK(it->second.shape() == t.shape(), "load_state_dict: '", name, "' has shape ",
                  it->second.shape(), " in the checkpoint but ", t.shape(), " in the model");
        Tensor dst = t;
        copy_(dst, it->second);
    }
    if (strict) {
        for (const auto& [name, t] : sd) {
            bool found = false;
            for (auto& [n2, t2] : all) found = found || n2 == name;
            QKV_CHECK(found, "load_state_dict: unexpected key '", name, "' in the checkpoint");
        }
    }
}

int64_t Module::num_parameters() const {
    int64_t n = 0;
    for (auto& [name, t] : named_parameters()) n += t.numel();
    return n;
}

void Module::train(bool on) {
    training_ = on;
    for (auto& [n, m] : children_)
        if (m) m->train(on);
}

void Module::zero_grad() {
    for (auto& [n, t] : named_parameters()) t.reset_grad();
}

namespace {
thread_local bool t_skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }
bool SkipInitGuard::active() { return t_skip_init; }

Tensor uniform_init(const Shape& shape, int64_t fan_in) {
    if (t_skip_init) return zeros(shape);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    return rand(shape, nullptr, -bound, bound);
}

Tensor xavier_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out) {
    if (t_skip_init) return zeros(shape);
    const double bound = std::sqrt(6.0 / double(fan_in + fan_out));
    return rand(shape, nullptr, -bound, bound);
}

Tensor normal_init(const Shape& shape, double mean, double std) {
    if (t_skip_init) return zeros(shape);
    return randn(shape, nullptr, mean, std);
}

void Module::for_each_module(const std::function<void(Module&)>& f) {
    f(*this);
    for (auto& [name, child] : children_) child->for_each_module(f);
}

}  // namespace qkv::nn
