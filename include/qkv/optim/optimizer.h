#pragma once
// Optimizers with PyTorch's update rules (torch.optim.SGD, Adam, AdamW), gradient clipping by
// global norm (D2L's grad_clipping / torch.nn.utils.clip_grad_norm_), and learning-rate schedules.
// Updates run in place on the parameter tensors without recording autograd history.
#include <map>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::optim {

struct ClipFactor {
    double norm;   // ‖g‖, the global L2 norm before clipping
    double scale;  // max_norm / ‖g‖ when ‖g‖ > max_norm, else 1
};

class Optimizer {
public:
    /// Takes the parameters to update (handles: the updates land in the caller's tensors). `name`
    /// ("SGD", "Adam", ...) starts every error message. Throws qkv::Error when lr < 0, when a
    /// parameter is undefined, not contiguous or not float, and when a parameter is listed twice
    /// ("Adam: parameter 3 is the same tensor as parameter 1 (listed twice)", indices 0-based as
    /// in state_dict) or overlaps an earlier one in memory (two views of one storage sharing
    /// elements, e.g. W and W.detach()): every step would update those elements twice. Disjoint
    /// views of one storage (slices of a flat buffer) are accepted. Models list a tied tensor once
    /// (nn::Module::parameters), so their parameters() always pass.
    Optimizer(std::vector<Tensor> params, double lr, const std::string& name = "optimizer");
    virtual ~Optimizer() = default;
    /// One update from the current .grad of every parameter (parameters without grad are skipped).
    /// grad_scale multiplies every gradient inside the update (rounded to the parameter's dtype)
    /// and leaves .grad untouched: step(grad_clip_factor(params, c).scale) updates the parameters
    /// bit for bit as clip_grad_norm(params, c) followed by step() does, without a separate
    /// pass over the gradients. Throws qkv::Error when grad_scale is negative, NaN or infinite.
    virtual void step(double grad_scale = 1.0) = 0;
    /// grad_clip_factor(params(), max_norm) (below): what step(.scale) clips by. A sharded
    /// optimizer (train::ZeroRedundancyAdam) takes the norm over every rank's shard instead.
    virtual ClipFactor clip_factor(double max_norm);
    /// Drops every parameter's .grad (PyTorch's set_to_none=True).
    void zero_grad();
    double lr() const { return lr_; }
    void set_lr(double lr) { lr_ = lr; }
    int64_t steps() const { return steps_; }
    /// Optimizer state (moments, step count) for checkpoints: keys "state.<i>.<name>".
    virtual std::map<std::string, Tensor> state_dict() const;
    /// Restores state_dict(); throws naming a missing or mis-shaped entry.
    virtual void load_state_dict(const std::map<std::string, Tensor>& sd);
    const std::vector<Tensor>& params() const { return params_; }

protected:
    std::vector<Tensor> params_;
    double lr_;
    int64_t steps_ = 0;
};

struct SGDOptions {
    double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
    bool nesterov = false;
};

/// torch.optim.SGD: g += wd·p; buf = momentum·buf + (1−dampening)·g (buf = g at the first step);
/// g = nesterov ? g + momentum·buf : buf; p −= lr·g.
class SGD : public Optimizer {
public:
    /// Throws as Optimizer's constructor does (messages start "SGD:") and when nesterov is set
    /// without momentum > 0 and dampening 0.
    SGD(std::vector<Tensor> params, double lr, SGDOptions opt = {});
    void step(double grad_scale = 1.0) override;
    std::map<std::string, Tensor> state_dict() const override;
    void load_state_dict(const std::map<std::string, Tensor>& sd) override;

private:
    SGDOptions opt_;
    std::vector<Tensor> momentum_;
};

struct AdamOptions {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
    bool decoupled_weight_decay = false;  // true: AdamW (Loshchilov & Hutter 2019)
};

/// torch.optim.Adam / AdamW (Kingma & Ba 2015, Algorithm 1, PyTorch's ordering of eps):
/// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²; p −= lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps).
class Adam : public Optimizer {
public:
    /// Throws as Optimizer's constructor does and when a beta is outside [0, 1) or eps < 0; every
    /// message names the class constructed: "Adam:", or "AdamW:" with decoupled_weight_decay
    /// ("AdamW::step:" for a bad grad_scale).
    Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions opt = {});
    void step(double grad_scale = 1.0) override;
    std::map<std::string, Tensor> state_dict() const override;
    void load_state_dict(const std::map<std::string, Tensor>& sd) override;

private:
    AdamOptions opt_;
    std::vector<Tensor> m_, v_;
};

/// Scales every gradient by max_norm / ‖g‖ when the global L2 norm ‖g‖ over all parameters
/// exceeds max_norm (D2L 9.5 grad_clipping). Returns ‖g‖ before clipping. Throws when the norm is
/// not finite (a NaN/inf gradient) so training never continues silently on NaN, when max_norm
/// is not finite and > 0, and when a tensor is listed twice ("clip_grad_norm: parameter 2 is the
/// same tensor as parameter 0 (listed twice)", as the optimizers say; it would count twice).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

/// The norm and the factor clip_grad_norm(params, max_norm) would scale the gradients by,
/// without touching them; pass .scale to Optimizer::step to fold the clipping into the update.
/// Throws as clip_grad_norm does (a norm that is not finite; max_norm not finite and > 0; a tensor
/// listed twice).
ClipFactor grad_clip_factor(const std::vector<Tensor>& params, double max_norm);

/// Learning rate at optimiser step `step` (1-based) for the schedules qkv offers.
/// constant: base. warmup_inv_sqrt (Vaswani et al. 2017 eq. 3 shape, peak = base at `warmup`):
/// base · min(step/warmup, √(warmup/step)). warmup_linear_decay: linear up to base over `warmup`
/// steps, then linear down to 0 at `total`.
enum class LrSchedule { constant, warmup_inv_sqrt, warmup_linear_decay };
double scheduled_lr(LrSchedule s, double base, int64_t step, int64_t warmup, int64_t total);

}  // namespace qkv::optim
