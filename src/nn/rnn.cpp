// nn::GRU: parameters with PyTorch's names and init; forward via one input GEMM per layer and
// the recurrence chosen by GRUImpl (ops/gru.h for the fused ones).
#include "qkv/nn/rnn.h"

#include <string>

#include "qkv/ops/dropout.h"
#include "qkv/ops/gru.h"
#include "qkv/ops/ops.h"

namespace qkv::nn {

GRU::GRU(int64_t in, int64_t hidden, int64_t layers, double p)
    : input_size(in), hidden_size(hidden), num_layers(layers), dropout(p) {
    QKV_CHECK(in > 0 && hidden > 0 && layers > 0, "GRU: input_size, hidden_size and num_layers must be "
              "positive, got ", in, ", ", hidden, ", ", layers);
    QKV_CHECK(p >= 0 && p < 1, "GRU: dropout must be in [0, 1), got ", p);
    const int64_t H = hidden;
    for (int64_t l = 0; l < layers; ++l) {
        const std::string s = "_l" + std::to_string(l);
        const int64_t I = l == 0 ? in : H;
        // torch.nn.GRU.reset_parameters: every parameter U(±1/√H), in registration order.
        weight_ih.push_back(register_parameter("weight_ih" + s, uniform_init({3 * H, I}, H)));
        weight_hh.push_back(register_parameter("weight_hh" + s, uniform_init({3 * H, H}, H)));
        bias_ih.push_back(register_parameter("bias_ih" + s, uniform_init({3 * H}, H)));
        bias_hh.push_back(register_parameter("bias_hh" + s, uniform_init({3 * H}, H)));
    }
}

Tensor GRU::input_projection(int64_t layer, const Tensor& x) const {
    QKV_CHECK(layer >= 0 && layer < num_layers, "GRU: layer ", layer, " out of range [0, ", num_layers, ")");
    return linear(x, weight_ih[size_t(layer)], bias_ih[size_t(layer)]);
}

Tensor GRU::cell(int64_t layer, const Tensor& gi, const Tensor& h) const {
    QKV_CHECK(layer >= 0 && layer < num_layers, "GRU: layer ", layer, " out of range [0, ", num_layers, ")");
    const Tensor gh = linear(h, weight_hh[size_t(layer)], bias_hh[size_t(layer)]);
    if (impl != GRUImpl::composite) return gru_cell(gi, gh, h);
    const int64_t H = hidden_size;
    const Tensor r = sigmoid(gi.slice(1, 0, H) + gh.slice(1, 0, H));
    const Tensor z = sigmoid(gi.slice(1, H, 2 * H) + gh.slice(1, H, 2 * H));
    const Tensor n = tanh(gi.slice(1, 2 * H, 3 * H) + r * gh.slice(1, 2 * H, 3 * H));
    return n + z * (h - n);
}

std::vector<Tensor> GRU::step(const Tensor& gi0, const std::vector<Tensor>& h) const {
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
    return forward_projected(input_projection(0, X), h0);  // (T, B, 3H): one GEMM for all steps
}

std::pair<Tensor, Tensor> GRU::forward_projected(const Tensor& gi0, const Tensor& h0) const {
    const int64_t H = hidden_size;
    QKV_CHECK(gi0.defined() && gi0.dim() == 3 && gi0.shape()[2] == 3 * H, "GRU: layer-0 projection must be "
              "(T, B, ", 3 * H, "), got ", gi0.defined() ? gi0.shape() : Shape{});
    const int64_t Tn = gi0.shape()[0], B = gi0.shape()[1];
    QKV_CHECK(!h0.defined() || h0.shape() == Shape({num_layers, B, H}), "GRU: h0 must be (", num_layers,
              ", ", B, ", ", H, "), got ", h0.shape());
    const DType dt = gi0.dtype();
    if (Tn == 0) return {zeros({0, B, H}, dt), h0.defined() ? h0 : zeros({num_layers, B, H}, dt)};
    Tensor seq;
    std::vector<Tensor> last;
    for (int64_t l = 0; l < num_layers; ++l) {
        // (T, B, 3H): one GEMM for all steps of layers >= 1
        const Tensor gi = l == 0 ? gi0 : input_projection(l, qkv::dropout(seq, dropout, is_training()));
        const Tensor hl = h0.defined() ? h0.select(0, l) : Tensor();
        if (impl == GRUImpl::sequence) {
            seq = gru_sequence(gi, hl, weight_hh[size_t(l)], bias_hh[size_t(l)]);
        } else {
            Tensor h = hl.defined() ? hl : zeros({B, H}, dt);
            std::vector<Tensor> outs;
            for (const Tensor& git : split(gi, 1, 0)) {
                h = cell(l, git.squeeze(0), h);
                outs.push_back(h);
            }
            seq = stack(outs, 0);
        }
        last.push_back(seq.select(0, Tn - 1));
    }
    return {seq, stack(last, 0)};
}

}  // namespace qkv::nn
