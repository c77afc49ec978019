#pragma once
// Thread-local switch for recording the autograd graph (like torch.no_grad()).

namespace qkv {

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

}  // namespace qkv
