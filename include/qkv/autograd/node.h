#pragma once
// Autograd graph nodes. Each differentiable op calls record(out, "XxxBackward", inputs, closure)
// next to its forward (src/ops/<op>.cpp); the closure captures what its backward needs and maps
// grad_out to input grads (a FunctionNode). Node stays an interface for other node kinds.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

/// Where an input's gradient goes: the input's own producer node, or (for a leaf that requires
/// grad) its TensorImpl, whose .grad accumulates. Both null: the input needs no gradient.
struct Edge {
    std::shared_ptr<Node>       fn;
    std::shared_ptr<TensorImpl> leaf;
    bool needed() const { return fn || leaf; }
};

class Node {
public:
    virtual ~Node() = default;
    /// Op name for error messages and graph dumps, e.g. "MatmulBackward".
    virtual const char* name() const = 0;
    /// Given d(loss)/d(output), returns one gradient per input (same order as `next`); an
    /// undefined Tensor means "no gradient". Runs with grad mode off. Shapes must equal the inputs'.
    virtual std::vector<Tensor> backward(const Tensor& grad_out) = 0;
    /// Releases saved tensors (called after backward; the graph is freed).
    virtual void release() {}

    std::vector<Edge> next;
    bool released = false;  // set after backward ran: the saved state is gone
};

/// True when grad mode is on and any input requires grad: the op must record a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
/// Edge for an input tensor (its grad_fn, or its impl if a leaf requiring grad).
Edge edge_of(const Tensor& t);
/// Attaches `node` (with edges to `inputs`) as the producer of `out`, setting requires_grad.
/// Call only when any_requires_grad(...) is true.
void set_history(Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs);
void set_history(Tensor& out, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

/// A node whose backward is a closure (for the many simple ops whose backward is a line or two
/// of other ops). The closure captures what it saves; release() drops it.
class FunctionNode : public Node {
public:
    using Fn = std::function<std::vector<Tensor>(const Tensor&)>;
    FunctionNode(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
    const char* name() const override { return name_; }
    std::vector<Tensor> backward(const Tensor& g) override { return fn_(g); }
    void release() override { fn_ = nullptr; }

private:
    const char* name_;
    Fn          fn_;
};

/// Records `out = op(inputs)` with a closure backward when grad mode is on and any input requires
/// grad; otherwise does nothing. The closure returns one gradient per input (undefined = none).
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, FunctionNode::Fn fn);

}  // namespace qkv
