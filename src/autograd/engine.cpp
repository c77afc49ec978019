// The autograd engine: graph recording helpers, Tensor::backward (iterative topological order),
// gradient accumulation into leaves, and grad mode.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/strided.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"

namespace qkv {

namespace {
thread_local bool g_grad_enabled = true;
thread_local LeafGradReady g_leaf_grad_ready;

/// out = a + b for same-shape float tensors (any layout); a new contiguous tensor.
Tensor add_same_shape(const Tensor& a, const Tensor& b) {
    QKV_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(),
              "backward: gradient shape/dtype mismatch: ", a.shape(), " vs ", b.shape());
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    const Shape os = out.strides();
    auto run = [&](auto* pa, auto* pb, auto* po) {
        detail::for_each_strided<3>(a.shape(), {&a.strides(), &b.strides(), &os},
                                    {0, 0, 0}, [&](int64_t n, auto o, auto s) {
                                        for (int64_t i = 0; i < n; ++i)
                                            po[o[2] + i * s[2]] = pa[o[0] + i * s[0]] + pb[o[1] + i * s[1]];
                                    });
    };
    if (a.dtype() == DType::f32) run(a.data<float>(), b.data<float>(), out.data<float>());
    else if (a.dtype() == DType::f64) run(a.data<double>(), b.data<double>(), out.data<double>());
    else QKV_CHECK(false, "backward: gradients must be float, got ", dtype_name(a.dtype()));
    return out;
}

/// Elements per in-place accumulation below which one thread does it (as ops' kParallelGrain).
constexpr int64_t kAccumulateGrain = 32768;

/// acc += g in place (acc contiguous float, same shape and dtype as g; g any layout).
template <class T>
void add_into(const Tensor& acc, const Tensor& g) {
    T* pa = acc.data<T>();
    const T* pg = g.data<T>();
    const int64_t n = acc.numel();
    if (g.is_contiguous()) {
#pragma omp parallel for simd if (parallel : n > kAccumulateGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) pa[i] += pg[i];
        return;
    }
    const Shape as = acc.strides();
    detail::for_each_strided<2>(g.shape(), {&g.strides(), &as}, {0, 0}, [&](int64_t m, auto o, auto s) {
        for (int64_t i = 0; i < m; ++i) pa[o[1] + i * s[1]] += pg[o[0] + i * s[0]];
    });
}

/// acc's memory is reachable through acc alone: one handle to its TensorImpl, one TensorImpl on
/// its storage (no view, no saved copy, no user handle), contiguous, no autograd state.
bool exclusively_owned(const Tensor& t) {
    return t.impl_ptr().use_count() == 1 && t.impl().storage.use_count() == 1 && t.is_contiguous() &&
           t.impl().grad == nullptr && t.impl().grad_fn == nullptr;
}

/// acc (+)= g. In place when nothing else can see acc's memory (a gradient summed from several
/// uses: the GRU's weights at every step, residual branches); otherwise into a new tensor, so a
/// gradient handed to two inputs (AddBackward) or held by the caller is never modified.
void accumulate(Tensor& acc, const Tensor& g) {
    if (!acc.defined()) {
        acc = g;
        return;
    }
    if (exclusively_owned(acc) && acc.shape() == g.shape() && acc.dtype() == g.dtype() &&
        acc.impl().storage != g.impl().storage) {
        if (acc.dtype() == DType::f32) return add_into<float>(acc, g);
        if (acc.dtype() == DType::f64) return add_into<double>(acc, g);
    }
    acc = add_same_shape(acc, g);
}
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

LeafGradHook::LeafGradHook(LeafGradReady hook) : prev_(std::move(g_leaf_grad_ready)) {
    g_leaf_grad_ready = std::move(hook);
}
LeafGradHook::~LeafGradHook() { g_leaf_grad_ready = std::move(prev_); }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
    if (!g_grad_enabled) return false;
    for (const Tensor* t : inputs)
        if (t && t->defined() && t->requires_grad()) return true;
    return false;
}

Edge edge_of(const Tensor& t) {
    if (!t.defined() || !t.requires_grad()) return {};
    if (t.grad_fn()) return {t.grad_fn(), nullptr};
    return {nullptr, t.impl_ptr()};
}

void set_history(Tensor& out, std::shared_ptr<Node> node,
                 std::initializer_list<const Tensor*> inputs) {
    for (const Tensor* t : inputs) node->next.push_back(t ? edge_of(*t) : Edge{});
    out.impl().requires_grad = true;
    out.impl().grad_fn       = std::move(node);
}

void set_history(Tensor& out, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
    for (const Tensor& t : inputs) node->next.push_back(edge_of(t));
    out.impl().requires_grad = true;
    out.impl().grad_fn       = std::move(node);
}

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, FunctionNode::Fn fn) {
    if (!g_grad_enabled) return;
    bool any = false;
    for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
    if (!any) return;
    set_history(out, std::make_shared<FunctionNode>(name, std::move(fn)), inputs);
}

// ---- Tensor's autograd members ----

Tensor& Tensor::requires_grad_(bool on) {
    QKV_CHECK(!on || is_floating(dtype()), "requires_grad_: only float tensors can require grad, got ",
              dtype_name(dtype()));
    QKV_CHECK(is_leaf(), "requires_grad_: only leaves can change requires_grad (use detach())");
    impl().requires_grad = on;
    return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
void Tensor::set_grad(const Tensor& g) {
    if (g.defined())
        QKV_CHECK(is_floating(dtype()) && g.shape() == shape() && g.dtype() == dtype(),
                  "set_grad: expected a gradient of shape ", shape(), " and dtype ", dtype_name(dtype()),
                  " (the tensor's), got shape ", g.shape(), " and dtype ", dtype_name(g.dtype()),
                  is_floating(dtype()) ? "" : " (only float tensors have gradients)");
    impl().grad = g.defined() ? g.impl_ptr() : nullptr;
}
void Tensor::reset_grad() { impl().grad = nullptr; }

Tensor Tensor::detach() const {
    auto impl2           = std::make_shared<TensorImpl>();
    impl2->storage       = impl().storage;
    impl2->shape         = impl().shape;
    impl2->strides       = impl().strides;
    impl2->offset        = impl().offset;
    impl2->dtype         = impl().dtype;
    return Tensor(std::move(impl2));
}

void Tensor::backward(const Tensor& grad) const {
    QKV_CHECK(requires_grad(), "backward: tensor does not require grad (no graph to differentiate)");
    Tensor seed = grad;
    if (!seed.defined()) {
        QKV_CHECK(numel() == 1, "backward: grad can be implicitly created only for a scalar output, "
                  "got shape ", shape());
        seed = full(shape(), 1.0, dtype());
    }
    QKV_CHECK(seed.shape() == shape(), "backward: grad of shape ", seed.shape(),
              " does not match the output shape ", shape());
    NoGradGuard no_grad;
    if (is_leaf()) {
        Tensor acc = this->grad();
        accumulate(acc, seed);
        impl().grad = acc.impl_ptr();
        if (g_leaf_grad_ready) g_leaf_grad_ready(impl());
        return;
    }
    // Iterative post-order DFS gives a topological order without recursion (long sequences).
    std::vector<Node*> order;
    std::unordered_set<Node*> seen;
    std::vector<std::pair<Node*, size_t>> stack{{grad_fn().get(), 0}};
    seen.insert(grad_fn().get());
    while (!stack.empty()) {
        auto& [node, i] = stack.back();
        if (i < node->next.size()) {
            Node* child = node->next[i++].fn.get();
            if (child && seen.insert(child).second) stack.push_back({child, 0});
        } else {
            order.push_back(node);
            stack.pop_back();
        }
    }
    std::unordered_map<Node*, Tensor> grads;
    grads[grad_fn().get()] = seed;
    // Keep the nodes alive while we walk them even if tensors holding them die meanwhile.
    std::shared_ptr<Node> root = grad_fn();
    std::vector<std::shared_ptr<Node>> keep;
    keep.reserve(order.size());
    for (Node* n : order)
        for (auto& e : n->next)
            if (e.fn) keep.push_back(e.fn);
    // With a leaf hook: how many edges still lead into each leaf; a leaf is final when the last
    // of them has been walked (its node run, or skipped for having no gradient).
    std::unordered_map<const TensorImpl*, int64_t> pending_edges;
    const LeafGradReady hook = g_leaf_grad_ready;
    if (hook)
        for (Node* n : order)
            for (const Edge& e : n->next)
                if (!e.fn && e.leaf && e.needed()) ++pending_edges[e.leaf.get()];
    auto edges_walked = [&](Node* node) {
        if (!hook) return;
        for (const Edge& e : node->next)
            if (!e.fn && e.leaf && e.needed() && --pending_edges[e.leaf.get()] == 0) hook(*e.leaf);
    };
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node* node = *it;
        auto gi = grads.find(node);
        if (gi == grads.end()) {
            edges_walked(node);
            continue;
        }
        Tensor g = std::move(gi->second);
        grads.erase(gi);
        QKV_CHECK(!node->released, "backward: ", node->name(), " was already differentiated; the "
                  "graph is freed after backward (run the forward again)");
        std::vector<Tensor> in_grads = node->backward(g);
        QKV_ASSERT(in_grads.size() == node->next.size());
        for (size_t k = 0; k < in_grads.size(); ++k) {
            const Edge& e = node->next[k];
            if (!e.needed() || !in_grads[k].defined()) continue;
            if (e.fn) {
                accumulate(grads[e.fn.get()], in_grads[k]);
            } else {
                TensorImpl& leaf = *e.leaf;
                QKV_CHECK(in_grads[k].shape() == leaf.shape, node->name(), ": gradient of shape ",
                          in_grads[k].shape(), " for an input of shape ", leaf.shape);
                Tensor acc(std::move(leaf.grad));  // the leaf's own reference moves into acc
                try {
                    accumulate(acc, in_grads[k]);
                } catch (...) {
                    leaf.grad = acc.impl_ptr();  // keep the earlier gradient on a dtype error
                    throw;
                }
                leaf.grad = acc.impl_ptr();
            }
        }
        edges_walked(node);
        node->release();
        node->released = true;
    }
}

}  // namespace qkv
