#pragma once
// nn::Module: the base of every layer and model. Holds named parameters and named child modules
// (registered in constructors, PyTorch-style dotted names such as "blks.0.attention.W_q.weight"),
// the train/eval flag, and state_dict save/load. Each module has its own typed forward(...).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::nn {

class Module {
public:
    virtual ~Module() = default;
    Module() = default;
    Module(const Module&)            = delete;
    Module& operator=(const Module&) = delete;

    /// All parameters, depth-first in registration order, with dotted names (PyTorch's order).
    /// A parameter shared under several names (tie_parameter) is listed once, under its first
    /// name, as PyTorch's named_parameters() (remove_duplicate=True): optimizers see it once.
    std::vector<std::pair<std::string, Tensor>> named_parameters() const;
    std::vector<Tensor> parameters() const;
    /// Parameters and buffers by name (what a checkpoint stores). A tied parameter appears under
    /// every name, as in PyTorch's state_dict().
    std::map<std::string, Tensor> state_dict() const;
    /// Copies values into the registered tensors. strict: every key must match exactly (names
    /// and shapes); throws naming the first missing, unexpected or mis-shaped key. A tied
    /// parameter may be present under any one or several of its names (a file with only one of
    /// them loads under strict); when several are present their values must be identical,
    /// otherwise throws naming both.
    void load_state_dict(const std::map<std::string, Tensor>& sd, bool strict = true);
    /// Makes this module's parameter `name` (a direct one, e.g. "weight") the tensor `t`, which
    /// another module owns or will own (a leaf; requires_grad is set on it): both names then refer to
    /// one parameter (weight tying). The
    /// caller also points the module's member (e.g. Linear::weight) at `t`. Throws qkv::Error
    /// when `name` is not registered here or the shapes differ.
    void tie_parameter(const std::string& name, const Tensor& t);
    /// Total number of parameter elements.
    int64_t num_parameters() const;

    /// Sets training mode on this module and all children (dropout active).
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return training_; }
    /// Drops every parameter's .grad.
    void zero_grad();
    /// Calls f on this module and then on every child module, depth-first in registration order
    /// (a module registered under two names is visited twice).
    void for_each_module(const std::function<void(Module&)>& f);

protected:
    /// Registers a parameter (requires_grad is set); returns the stored handle.
    Tensor register_parameter(const std::string& name, Tensor t);
    /// Registers a non-trainable tensor saved in state_dict (e.g. running stats).
    Tensor register_buffer(const std::string& name, Tensor t);
    template <class M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
        children_.emplace_back(name, m);
        return m;
    }

private:
    void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                 bool buffers) const;
    std::vector<std::pair<std::string, Tensor>>                    params_;
    std::vector<std::pair<std::string, Tensor>>                    buffers_;
    std::vector<std::pair<std::string, std::shared_ptr<Module>>>   children_;
    bool training_ = true;
};

/// PyTorch's default init for nn.Linear weights and biases: U(-1/√fan_in, 1/√fan_in)
/// (kaiming_uniform with a = √5). Uses the default generator. float32, `shape` as given.
/// Under a SkipInitGuard: zeros, and the generator is not advanced.
Tensor uniform_init(const Shape& shape, int64_t fan_in);
/// Xavier/Glorot uniform: U(±√(6 / (fan_in + fan_out))) (D2L ZH's init). Same rules.
Tensor xavier_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out);
/// Normal N(mean, std²) (nn.Embedding's default is N(0, 1)). Same rules.
Tensor normal_init(const Shape& shape, double mean = 0.0, double std = 1.0);

/// While alive, the initialisers above return zeros on this thread instead of drawing random
/// numbers: for a model whose every parameter is about to be overwritten by a strict
/// load_state_dict (PyTorch: torch.nn.utils.skip_init); without it, loading a large model spends
/// most of its time drawing weights it then discards (bench/RESULTS.md, issue 21). Nests.
class SkipInitGuard {
public:
    SkipInitGuard();
    ~SkipInitGuard();
    SkipInitGuard(const SkipInitGuard&)            = delete;
    SkipInitGuard& operator=(const SkipInitGuard&) = delete;
    /// True while a guard is alive on this thread.
    static bool active();

private:
    bool prev_;
};

}  // namespace qkv::nn
