// SGD, Adam/AdamW, gradient clipping and schedules (see include/qkv/optim/optimizer.h).
#include "qkv/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/optim_step.h"

namespace qkv::optim {

namespace {
/// Throws when a parameter is an earlier one again or overlaps it in memory: the step would update
/// those elements once per listing. Parameters are contiguous, so each one covers the bytes
/// [offset, offset + numel) · dtype_size of its storage.
void check_distinct(const std::string& who, const std::vector<Tensor>& params) {
    auto bytes = [](const Tensor& t) {
        const int64_t begin = t.offset() * dtype_size(t.dtype());
        return std::pair{begin, begin + t.numel() * dtype_size(t.dtype())};
    };
    for (size_t i = 0; i < params.size(); ++i)
        for (size_t j = 0; j < i; ++j) {
            QKV_CHECK(!params[i].is_same(params[j]), who, ": parameter ", i, " is the same tensor as parameter ",
                      j, " (listed twice)");
            if (params[i].impl().storage != params[j].impl().storage) continue;
            const auto [a0, a1] = bytes(params[i]);
            const auto [b0, b1] = bytes(params[j]);
            QKV_CHECK(a0 == a1 || b0 == b1 || a1 <= b0 || b1 <= a0, who, ": parameter ", i,
                      " shares memory with parameter ", j,
                      " (overlapping views of one storage; their common elements would be updated twice)");
        }
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const std::string& name)
    : params_(std::move(params)), lr_(lr) {
    QKV_CHECK(lr >= 0, name, ": learning rate must be >= 0, got ", lr);
    for (size_t i = 0; i < params_.size(); ++i)
        QKV_CHECK(params_[i].defined() && params_[i].is_contiguous() && is_floating(params_[i].dtype()),
                  name, ": parameter ", i, " must be a contiguous float tensor");
    check_distinct(name, params_);
}

ClipFactor Optimizer::clip_factor(double max_norm) { return grad_clip_factor(params_, max_norm); }

void Optimizer::zero_grad() {
    for (Tensor& p : params_) p.reset_grad();
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
    return {{"step", from_vector<int64_t>({steps_}, {1})}};
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
    auto it = sd.find("step");
    QKV_CHECK(it != sd.end(), "optimizer: state has no 'step' entry");
    steps_ = int64_t(it->second.item());
}

namespace {
void check_grad_scale(const char* who, double grad_scale) {
    QKV_CHECK(std::isfinite(grad_scale) && grad_scale >= 0, who, ": grad_scale must be finite and >= 0, got ",
              grad_scale);
}
/// Restores a list of per-parameter state tensors named "<kind>.<i>".
void load_list(const std::map<std::string, Tensor>& sd, const std::string& kind, const std::vector<Tensor>& params,
               std::vector<Tensor>& out) {
    out.assign(params.size(), Tensor());
    for (size_t i = 0; i < params.size(); ++i) {
        auto it = sd.find(kind + "." + std::to_string(i));
        if (it == sd.end()) continue;
        QKV_CHECK(it->second.shape() == params[i].shape(), "optimizer: state '", kind, ".", i, "' has shape ",
                  it->second.shape(), ", parameter has ", params[i].shape());
        out[i] = it->second.to(params[i].dtype()).contiguous().clone();
    }
}
template <class T>
T* data_of(const Tensor& t) {
    return t.data<T>();
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions opt)
    : Optimizer(std::move(params), lr, "SGD"), opt_(opt), momentum_(params_.size()) {
    QKV_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
              "SGD: nesterov needs momentum > 0 and dampening 0");
}

void SGD::step(double grad_scale) {
    check_grad_scale("SGD::step", grad_scale);
    NoGradGuard ng;
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) {
        Tensor& p = params_[i];
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        const Tensor gc = g.contiguous().to(p.dtype());
        const bool first = !momentum_[i].defined();
        if (opt_.momentum != 0 && first) momentum_[i] = zeros(p.shape(), p.dtype());
        auto run = [&](auto* pp, const auto* pg, auto* buf) {
            using T = std::remove_pointer_t<decltype(pp)>;
            const int64_t n = p.numel();
            const bool scaled = grad_scale != 1.0;
            for (int64_t j = 0; j < n; ++j) {
                const T gj = scaled ? pg[j] * T(grad_scale) : pg[j];
                T d        = gj + T(opt_.weight_decay) * pp[j];
                if (opt_.momentum != 0) {
                    buf[j] = first ? d : T(opt_.momentum) * buf[j] + T(1 - opt_.dampening) * d;
                    d = opt_.nesterov ? d + T(opt_.momentum) * buf[j] : buf[j];
                }
                pp[j] -= T(lr_) * d;
            }
        };
        if (p.dtype() == DType::f32)
            run(data_of<float>(p), data_of<float>(gc), momentum_[i].defined() ? data_of<float>(momentum_[i]) : nullptr);
        else
            run(data_of<double>(p), data_of<double>(gc), momentum_[i].defined() ? data_of<double>(momentum_[i]) : nullptr);
    }
}

std::map<std::string, Tensor> SGD::state_dict() const {
    auto sd = Optimizer::state_dict();
    for (size_t i = 0; i < momentum_.size(); ++i)
        if (momentum_[i].defined()) sd["momentum_buffer." + std::to_string(i)] = momentum_[i];
    return sd;
}

void SGD::load_state_dict(const std::map<std::string, Tensor>& sd) {
    Optimizer::load_state_dict(sd);
    load_list(sd, "momentum_buffer", params_, momentum_);
}

namespace {
/// The class the user constructed, for messages: AdamW is Adam with decoupled weight decay.
const char* adam_name(const AdamOptions& opt) { return opt.decoupled_weight_decay ? "AdamW" : "Adam"; }
}  // namespace

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions opt)
    : Optimizer(std::move(params), lr, adam_name(opt)), opt_(opt), m_(params_.size()), v_(params_.size()) {
    QKV_CHECK(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1, adam_name(opt),
              ": betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
    QKV_CHECK(opt.eps >= 0, adam_name(opt), ": eps must be >= 0, got ", opt.eps);
}

void Adam::step(double grad_scale) {
    check_grad_scale(opt_.decoupled_weight_decay ? "AdamW::step" : "Adam::step", grad_scale);
    NoGradGuard ng;
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) {
        Tensor& p = params_[i];
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        if (!m_[i].defined()) {
            m_[i] = zeros(p.shape(), p.dtype());
            v_[i] = zeros(p.shape(), p.dtype());
        }
        AdamStepArgs a;
        a.lr = lr_, a.beta1 = opt_.beta1, a.beta2 = opt_.beta2, a.eps = opt_.eps;
        a.weight_decay = opt_.weight_decay, a.decoupled = opt_.decoupled_weight_decay, a.step = steps_;
        a.grad_scale = grad_scale;
        adam_step_(p, g, m_[i], v_[i], a);
    }
}

std::map<std::string, Tensor> Adam::state_dict() const {
    auto sd = Optimizer::state_dict();
    for (size_t i = 0; i < m_.size(); ++i)
        if (m_[i].defined()) {
            sd["exp_avg." + std::to_string(i)]    = m_[i];
            sd["exp_avg_sq." + std::to_string(i)] = v_[i];
        }
    return sd;
}

void Adam::load_state_dict(const std::map<std::string, Tensor>& sd) {
    Optimizer::load_state_dict(sd);
    load_list(sd, "exp_avg", params_, m_);
    load_list(sd, "exp_avg_sq", params_, v_);
}

ClipFactor grad_clip_factor(const std::vector<Tensor>& params, double max_norm) {
    QKV_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm must be finite and > 0, got ",
              max_norm);
    // A tensor listed twice would count twice in the norm (and be scaled twice): refused, as the
    // optimizers refuse it. Two handles on one storage are two tensors with their own gradients.
    std::unordered_map<const TensorImpl*, size_t> first;
    for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].defined()) continue;
        const auto [it, fresh] = first.emplace(params[i].impl_ptr().get(), i);
        QKV_CHECK(fresh, "clip_grad_norm: parameter ", i, " is the same tensor as parameter ", it->second,
                  " (listed twice)");
    }
    NoGradGuard ng;
    std::vector<Tensor> grads;
    grads.reserve(params.size());
    for (const Tensor& p : params)
        if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
    const double total = sum_of_squares(grads);
    const double norm = std::sqrt(total);
    QKV_CHECK(std::isfinite(norm), "clip_grad_norm: the gradient norm is ", norm,
              " (a NaN or inf gradient; lower the learning rate or check the inputs)");
    return {norm, norm > max_norm && norm > 0 ? max_norm / norm : 1.0};
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
    NoGradGuard ng;
    const auto [norm, scale] = grad_clip_factor(params, max_norm);
    if (scale != 1.0) {
        std::vector<Tensor> grads;
        for (const Tensor& p : params) {
            Tensor g = p.grad();
            if (!g.defined()) continue;
            // Scale in place only when nothing else shares the gradient's memory (the engine may
            // hand the same tensor to several leaves, e.g. both inputs of an add).
            const bool owned = g.is_contiguous() && g.impl().storage.use_count() == 1 &&
                               g.impl_ptr().use_count() <= 2;
            if (!owned) {
                g = g.contiguous().clone().detach();
                const_cast<Tensor&>(p).set_grad(g);
            }
            grads.push_back(g);
        }
        scale_(grads, scale);
    }
    return norm;
}

double scheduled_lr(LrSchedule s, double base, int64_t step, int64_t warmup, int64_t total) {
    step = std::max<int64_t>(step, 1);
    switch (s) {
        case LrSchedule::constant: return base;
        case LrSchedule::warmup_inv_sqrt:
            if (warmup <= 0) return base;
            return base * std::min(double(step) / double(warmup), std::sqrt(double(warmup) / double(step)));
        case LrSchedule::warmup_linear_decay:
            if (step <= warmup) return base * double(step) / double(std::max<int64_t>(warmup, 1));
            if (total <= warmup) return base;
            return base * std::max(0.0, double(total - step) / double(total - warmup));
    }
    return base;
}

}  // namespace qkv::optim
