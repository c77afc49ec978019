// attention_basics: qkv's attention building blocks, from the public headers only.
//   1. masked_softmax with valid_lens (D2L 11.3.1): masked weights are exactly 0.
//   2. scaled_dot_product_attention (D2L 11.3.2) with valid_lens on (B, H, T, D) inputs, on the
//      `math` backend (composed differentiable ops, the reference) and the fused `flash` kernel.
//   3. autograd: backward through both backends; the gradients agree and masked keys get none.
//   4. nn::MultiHeadAttention, the module inside qkv::models::Transformer.
// Every step checks its result; the program exits 1 when a check fails (ctest runs it).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/reduce.h"

using namespace qkv;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
    std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what);
    failures += ok ? 0 : 1;
}

// Largest |a - b| over the elements of two float32 tensors of one shape.
double max_abs_diff(const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
    double m = x.size() == y.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::fmax(m, std::fabs(double(x[i]) - y[i]));
    return m;
}

bool all_zero(const Tensor& t) { return max_abs_diff(t, zeros(t.shape())) == 0.0; }

const char* backend_name(AttentionBackend b) { return b == AttentionBackend::flash ? "flash" : "math"; }

}  // namespace

int main() try {
    manual_seed(0);  // the default generator: rand/randn below and parameter init in nn modules

    std::puts("1. masked_softmax: batch 0 keeps 2 of 4 keys, batch 1 keeps 3");
    const Tensor X = rand({2, 2, 4});                        // (B, Q, K) scores
    const Tensor lens = from_vector<int64_t>({2, 3}, {2});   // (B): one length per batch row
    const Tensor W = masked_softmax(X, lens);                // (B, Q, K), rows sum to 1
    std::cout << "  " << W << "\n";
    check(all_zero(W.select(0, 0).slice(1, 2, 4)) && all_zero(W.select(0, 1).slice(1, 3, 4)),
          "masked weights are exactly 0");
    check(max_abs_diff(sum(W, {2}), ones({2, 2})) < 1e-6, "each row sums to 1");

    std::puts("2. scaled_dot_product_attention, math vs flash");
    const int64_t B = 2, H = 2, Tq = 3, Tk = 5, D = 8, Dv = 4;
    Tensor q = randn({B, H, Tq, D}), k = randn({B, H, Tk, D}), v = randn({B, H, Tk, Dv});
    q.requires_grad_();
    k.requires_grad_();
    v.requires_grad_();
    AttentionMask mask;
    mask.valid_lens = from_vector<int64_t>({3, 5}, {B});  // batch 0 sees keys 0..2 only
    std::printf("  automatic would choose: %s\n",
                backend_name(select_attention_backend(q, k, v, mask, {}, /*need_weights=*/false)));

    AttentionOptions math_opt, flash_opt;
    math_opt.backend  = AttentionBackend::math;
    flash_opt.backend = AttentionBackend::flash;  // throws (with the reasons) if it cannot run
    const Tensor out_math  = scaled_dot_product_attention(q, k, v, mask, math_opt);   // (B, H, Tq, Dv)
    const Tensor out_flash = scaled_dot_product_attention(q, k, v, mask, flash_opt);
    std::printf("  output %s, max |math - flash| = %.2e\n", shape_str(out_math.shape()).c_str(),
                max_abs_diff(out_math, out_flash));
    check(max_abs_diff(out_math, out_flash) < 1e-5, "flash output equals math output");
    // valid_lens 3 means: exactly the attention over the first 3 keys alone.
    const Tensor first3 = scaled_dot_product_attention(q.slice(0, 0, 1), k.slice(0, 0, 1).slice(2, 0, 3),
                                                       v.slice(0, 0, 1).slice(2, 0, 3), {}, math_opt);
    check(max_abs_diff(out_math.slice(0, 0, 1), first3) < 1e-6, "valid_len 3 == attending to 3 keys");

    std::puts("3. autograd: backward through each backend");
    const Tensor g = randn({B, H, Tq, Dv});  // a fixed upstream gradient: loss = sum(out * g)
    std::vector<Tensor> grads[2];
    const Tensor* outs[2] = {&out_math, &out_flash};
    for (int i = 0; i < 2; ++i) {
        sum(mul(*outs[i], g)).backward();
        grads[i] = {q.grad(), k.grad(), v.grad()};
        q.reset_grad();  // gradients accumulate, as in PyTorch; start the next backend from none
        k.reset_grad();
        v.reset_grad();
    }
    std::printf("  dq %s, dk %s, dv %s\n", shape_str(grads[0][0].shape()).c_str(),
                shape_str(grads[0][1].shape()).c_str(), shape_str(grads[0][2].shape()).c_str());
    double worst = 0;
    for (int j = 0; j < 3; ++j) worst = std::fmax(worst, max_abs_diff(grads[0][j], grads[1][j]));
    std::printf("  max |math - flash| over dq, dk, dv = %.2e\n", worst);
    check(grads[0][0].shape() == q.shape() && grads[0][1].shape() == k.shape() &&
              grads[0][2].shape() == v.shape(), "gradients have their inputs' shapes");
    check(worst < 1e-5, "flash gradients equal math gradients");
    check(all_zero(grads[1][1].select(0, 0).slice(1, 3, 5)) && all_zero(grads[1][2].select(0, 0).slice(1, 3, 5)),
          "masked keys and values get zero gradient");

    std::puts("4. nn::MultiHeadAttention (C 16, 4 heads) on (2, 5, 16) with valid_lens (3, 5)");
    nn::MultiHeadAttentionConfig cfg;
    cfg.num_hiddens = 16;
    cfg.num_heads   = 4;
    nn::MultiHeadAttention mha(cfg);
    mha.eval();  // modules start in training mode (dropout active), as torch.nn.Module
    const Tensor Xs = randn({2, 5, 16}), vl = from_vector<int64_t>({3, 5}, {2});
    const Tensor Y = mha.forward(Xs, Xs, Xs, vl);  // self-attention, flash when it can run
    mha.keep_attention_weights(true);             // the math path, keeping (B, H, Tq, Tk) weights
    const Tensor Y2 = mha.forward(Xs, Xs, Xs, vl);
    const Tensor A = mha.attention_weights();
    std::printf("  %lld parameters, output %s, weights %s\n", (long long)mha.num_parameters(),
                shape_str(Y.shape()).c_str(), shape_str(A.shape()).c_str());
    check(Y.shape() == Shape({2, 5, 16}) && A.shape() == Shape({2, 4, 5, 5}), "module output shapes");
    check(max_abs_diff(Y, Y2) < 1e-5, "same output with and without kept weights");
    check(all_zero(A.select(0, 0).slice(2, 3, 5)), "batch 0 never attends past key 3");

    std::printf("%s\n", failures ? "attention_basics: FAILED" : "attention_basics: all checks passed");
    return failures ? 1 : 0;
} catch (const Error& e) {  // every qkv function throws qkv::Error on bad input, naming it
    std::fprintf(stderr, "attention_basics: error: %s\n", e.what());
    return 1;
}
