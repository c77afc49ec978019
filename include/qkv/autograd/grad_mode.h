#pragma once
// Thread-local switch for recording the autograd graph (like torch.no_grad()), and the leaf-
// gradient hook that lets data-parallel training reduce gradients while backward still runs.
#include <functional>
#include <memory>

namespace qkv {

struct TensorImpl;

/// True when ops record graph nodes (default true; false inside NoGradGuard and backward).
bool grad_enabled();
void set_grad_enabled(bool on);

/// RAII: disables graph recording in this thread for its lifetime.
class NoGradGuard {
public:
    NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
    ~NoGradGuard() { set_grad_enabled(prev_); }
    NoGradGuard(const NoGradGuard&)            = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
    bool prev_;
};

/// Called by Tensor::backward, on the thread that runs it, once per leaf whose gradient is final
/// for that backward: after the last node with an edge to it has run (PyTorch DDP's "gradient
/// ready" point). Leaves backward never reaches are not reported.
using LeafGradReady = std::function<void(const TensorImpl& leaf)>;

/// RAII: installs `hook` for the backward passes this thread runs during its lifetime (the one
/// before it comes back after). Without a hook, backward does no extra work.
class LeafGradHook {
public:
    explicit LeafGradHook(LeafGradReady hook);
    ~LeafGradHook();
    LeafGradHook(const LeafGradHook&)            = delete;
    LeafGradHook& operator=(const LeafGradHook&) = delete;

private:
    LeafGradReady prev_;
};

}  // namespace qkv
