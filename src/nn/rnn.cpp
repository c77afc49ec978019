// nn::GRU: parameters with PyTorch's names and init; forward via one input GEMM per layer and
// direction and the recurrence chosen by GRUImpl (ops/gru.h for the fused ones); the reverse
// direction runs the same recurrence over the time-reversed sequence.
#include "qkv/nn/rnn.h"

#include <algorithm>
#include <string>

#include "qkv/ops/dropout.h"
#include "qkv/ops/gru.h"
#include "qkv/ops/ops.h"

namespace qkv::nn {

GRU::GRU(int64_t in, int64_t hidden, int64_t layers, double p, bool bidir)
    : input_size(in), hidden_size(hidden), num_layers(layers), dropout(p), bidirectional(bidir) {
    QKV_CHECK(in > 0 && hidden > 0 && layers > 0, "GRU: input_size, hidden_size and num_layers must be "
              "positive, got ", in, ", ", hidden, ", ", layers);
    QKV_CHECK(p >= 0 && p < 1, "GRU: dropout must be in [0, 1), got ", p);
    const int64_t H = hidden, D = num_directions();
    for (int64_t l = 0; l < layers; ++l) {
        for (int64_t d = 0; d < D; ++d) {
            const std::string s = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
            const int64_t I = l == 0 ? in : D * H;
            // torch.nn.GRU.reset_parameters: every parameter U(±1/√H), in registration order.
            weight_ih.push_back(register_parameter("weight_ih" + s, uniform_init({3 * H, I}, H)));
            weight_hh.push_back(register_parameter("weight_hh" + s, uniform_init({3 * H, H}, H)));
            bias_ih.push_back(register_parameter("bias_ih" + s, uniform_init({3 * H}, H)));
            bias_hh.push_back(register_parameter("bias_hh" + s, uniform_init({3 * H}, H)));
        }
    }
}

size_t GRU::param_index(int64_t layer, int64_t direction) const {
    QKV_CHECK(layer >= 0 && layer < num_layers, "GRU: layer ", layer, " out of range [0, ", num_layers, ")");
    QKV_CHECK(direction >= 0 && direction < num_directions(), "GRU: direction ", direction, " out of range [0, ",
              num_directions(), ")", bidirectional ? "" : " (the GRU is not bidirectional)");
    return size_t(layer * num_directions() + direction);
}

Tensor GRU::input_projection(int64_t layer, const Tensor& x, int64_t direction) const {
    const size_t i = param_index(layer, direction);
    return linear(x, weight_ih[i], bias_ih[i]);
}

Tensor GRU::cell(int64_t layer, const Tensor& gi, const Tensor& h, int64_t direction) const {
    const size_t i = param_index(layer, direction);
    const Tensor gh = linear(h, weight_hh[i], bias_hh[i]);
    if (impl != GRUImpl::composite) return gru_cell(gi, gh, h);
    const int64_t H = hidden_size;
    const Tensor r = sigmoid(gi.slice(1, 0, H) + gh.slice(1, 0, H));
    const Tensor z = sigmoid(gi.slice(1, H, 2 * H) + gh.slice(1, H, 2 * H));
    const Tensor n = tanh(gi.slice(1, 2 * H, 3 * H) + r * gh.slice(1, 2 * H, 3 * H));
    return n + z * (h - n);
}

std::vector<Tensor> GRU::step(const Tensor& gi0, const std::vector<Tensor>& h) const {
    QKV_CHECK(!bidirectional, "GRU: step runs one time step forward, which a bidirectional GRU cannot (its "
              "reverse direction needs the later steps): use forward on the whole sequence");
    QKV_CHECK(int64_t(h.size()) == num_layers, "GRU: step needs ", num_layers, " states, got ", h.size());
    std::vector<Tensor> out;
    out.reserve(h.size());
    Tensor gi = gi0;
    for (int64_t l = 0; l < num_layers; ++l) {
        if (l > 0) gi = input_projection(l, qkv::dropout(out.back(), dropout, is_training()));
        out.push_back(cell(l, gi, h[size_t(l)]));
    }
    return out;
}

std::pair<Tensor, Tensor> GRU::forward(const Tensor& X, const Tensor& h0) const {
    QKV_CHECK(X.defined() && X.dim() == 3 && X.shape()[2] == input_size, "GRU: input must be (T, B, ",
              input_size, "), got ", X.defined() ? X.shape() : Shape{});
    if (!bidirectional) return forward_projected(input_projection(0, X), h0);  // (T, B, 3H): one GEMM
    const int64_t H = hidden_size, Tn = X.shape()[0], B = X.shape()[1];
    QKV_CHECK(!h0.defined() || h0.shape() == Shape({2 * num_layers, B, H}), "GRU: h0 must be (",
              2 * num_layers, ", ", B, ", ", H, ") (2 directions × ", num_layers, " layers), got ", h0.shape());
    if (Tn == 0) return forward_projected(zeros({0, B, 6 * H}, X.dtype()), h0);
    return run_layers({input_projection(0, X, 0), input_projection(0, X, 1)}, h0);
}

std::pair<Tensor, Tensor> GRU::forward_projected(const Tensor& gi0, const Tensor& h0) const {
    const int64_t H = hidden_size, D = num_directions();
    QKV_CHECK(gi0.defined() && gi0.dim() == 3 && gi0.shape()[2] == D * 3 * H, "GRU: layer-0 projection must be "
              "(T, B, ", D * 3 * H, "), got ", gi0.defined() ? gi0.shape() : Shape{});
    const int64_t Tn = gi0.shape()[0], B = gi0.shape()[1];
    QKV_CHECK(!h0.defined() || h0.shape() == Shape({D * num_layers, B, H}), "GRU: h0 must be (", D * num_layers,
              ", ", B, ", ", H, ")", bidirectional ? " (2 directions × " + std::to_string(num_layers) + " layers)" : "",
              ", got ", h0.shape());
    const DType dt = gi0.dtype();
    if (Tn == 0) return {zeros({0, B, D * H}, dt), h0.defined() ? h0 : zeros({D * num_layers, B, H}, dt)};
    if (!bidirectional) return run_layers({gi0}, h0);
    return run_layers({gi0.slice(2, 0, 3 * H), gi0.slice(2, 3 * H, 6 * H)}, h0);
}

Tensor GRU::run_direction(int64_t l, int64_t d, const Tensor& gi, const Tensor& hl) const {
    const size_t i = param_index(l, d);
    const int64_t Tn = gi.shape()[0];
    if (impl == GRUImpl::sequence) {
        if (d == 0) return gru_sequence(gi, hl, weight_hh[i], bias_hh[i]);
        // The reverse direction: the same recurrence over the time-reversed sequence, put back
        // in time order.
        std::vector<int64_t> rev(static_cast<size_t>(Tn));
        for (int64_t t = 0; t < Tn; ++t) rev[size_t(t)] = Tn - 1 - t;
        const Tensor idx = from_vector(rev, {Tn});
        return index_select(gru_sequence(index_select(gi, 0, idx), hl, weight_hh[i], bias_hh[i]), 0, idx);
    }
    Tensor h = hl.defined() ? hl : zeros({gi.shape()[1], hidden_size}, gi.dtype());
    std::vector<Tensor> steps = split(gi, 1, 0);
    if (d == 1) std::reverse(steps.begin(), steps.end());
    std::vector<Tensor> outs;
    outs.reserve(steps.size());
    for (const Tensor& git : steps) {
        h = cell(l, git.squeeze(0), h, d);
        outs.push_back(h);
    }
    if (d == 1) std::reverse(outs.begin(), outs.end());
    return stack(outs, 0);
}

std::pair<Tensor, Tensor> GRU::run_layers(const std::vector<Tensor>& gi0, const Tensor& h0) const {
    const int64_t D = num_directions(), Tn = gi0[0].shape()[0];
    Tensor seq;
    std::vector<Tensor> last;
    for (int64_t l = 0; l < num_layers; ++l) {
        // Layers >= 1: the previous layer's output ([forward | reverse]) after dropout, projected
        // with one GEMM for all steps per direction.
        const Tensor x = l == 0 ? Tensor() : qkv::dropout(seq, dropout, is_training());
        std::vector<Tensor> outs;
        for (int64_t d = 0; d < D; ++d) {
            const Tensor gi = l == 0 ? gi0[size_t(d)] : input_projection(l, x, d);
            const Tensor hl = h0.defined() ? h0.select(0, l * D + d) : Tensor();
            outs.push_back(run_direction(l, d, gi, hl));
            // the final state: after t = T−1 (forward), after t = 0 (reverse)
            last.push_back(outs.back().select(0, d == 0 ? Tn - 1 : 0));
        }
        seq = D == 1 ? outs[0] : concat(outs, 2);
    }
    return {seq, stack(last, 0)};
}

}  // namespace qkv::nn
