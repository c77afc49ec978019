// PyTorch parity for a composite computation (tools/gen_mlp_fixture.py, torch 1.13): a 2-layer
// MLP with layer_norm and weighted, label-smoothed cross-entropy. Loss and every gradient must
// match to 1e-5 relative (fp32 on both sides; sums of ≤ 16 terms per element).
#include <gtest/gtest.h>

#include "qkv/io/safetensors.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/ops.h"
#include "support/test_util.h"

using namespace qkv;

TEST(PyTorchParity, MlpLayerNormCrossEntropy) {
    auto f = io::load_safetensors(QKV_FIXTURE_DIR "/mlp_layernorm_ce.safetensors");
    std::map<std::string, Tensor> p;
    for (const char* n : {"x", "W1", "b1", "g", "beta", "W2", "b2"}) p[n] = f.at(n).detach().requires_grad_();
    Tensor h = relu(layer_norm(linear(p["x"], p["W1"], p["b1"]), {16}, p["g"], p["beta"]));
    Tensor logits = linear(h, p["W2"], p["b2"]);
    CrossEntropyOptions o;
    o.label_smoothing = 0.1;
    Tensor loss = cross_entropy(logits, f.at("t"), f.at("w"), o);
    loss.backward();
    constexpr double kRtol = 1e-5, kAtol = 1e-6;  // 1e-6 floor for gradients that are ~0
    EXPECT_TRUE(test::all_close(loss.reshape({1}).to_vector<float>(), f.at("loss").to_vector<float>(), kAtol, kRtol));
    for (const auto& [n, t] : p)
        EXPECT_TRUE(test::all_close(t.grad().to_vector<float>(), f.at("grad." + n).to_vector<float>(), kAtol, kRtol))
            << "gradient of " << n;
}
