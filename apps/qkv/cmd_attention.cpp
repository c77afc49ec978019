// `qkv attention`: the second seed's program (shared/seeds/002: scaled dot-product attention with
// dropout 0.1 on Q, K, V of shape (2, 10, 8)) and the first seed's 4-token self-attention example
// ("I love deep learning", embedding dim 8): the 4 × 4 weight matrix as a table and a heatmap.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/attention.h"
#include "qkv/util/plot.h"

namespace qkv::cli {
namespace {

struct AttentionArgs {
    uint64_t seed   = 0;
    std::string out = "out/attention";
};

std::string shape_str(const Shape& s) {
    std::ostringstream os;
    os << '(';
    for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    os << ')';
    return os.str();
}

void run_attention(const AttentionArgs& a) {
    check_out_folder("--out", a.out);  // before the tables are printed (a usage error, exit 2)
    check_weights_backend("attention");
    NoGradGuard ng;
    Generator gen(a.seed);

    // ---- seed 002: q, k, v ~ N(0, 1) of (batch, seq_len, d) = (2, 10, 8); nn.Dropout(0.1) in
    // training mode (a fresh nn.Module is in training mode), so the weights are dropped out.
    const Tensor q = randn({2, 10, 8}, &gen), k = randn({2, 10, 8}, &gen), v = randn({2, 10, 8}, &gen);
    AttentionOptions opt;
    opt.dropout  = 0.1;
    opt.training = true;
    opt.gen      = &gen;
    const Tensor out = scaled_dot_product_attention(q, k, v, {}, opt);
    std::printf("== scaled dot-product attention softmax(QK^T / sqrt(d)) V, dropout 0.1 (training)\n");
    std::printf("Q shape: %s\n", shape_str(q.shape()).c_str());
    std::printf("K shape: %s\n", shape_str(k.shape()).c_str());
    std::printf("V shape: %s\n", shape_str(v.shape()).c_str());
    std::printf("output shape: %s\n", shape_str(out.shape()).c_str());

    // ---- seed 000: self-attention over 4 tokens, Q = K = V = X (4, 8) ----
    const std::vector<std::string> tokens = {"I", "love", "deep", "learning"};
    const int64_t T = int64_t(tokens.size()), D = 8;
    const Tensor X = randn({1, T, D}, &gen);  // deterministic embeddings from the seeded generator
    nn::DotProductAttention attn(0.0);
    attn.eval();
    attn.forward(X, X, X);
    const std::vector<float> w = attn.attention_weights().contiguous().to_vector<float>();  // (1, T, T)
    std::printf("\n== self-attention of \"I love deep learning\" (embedding dim %lld, seed %llu): "
                "row i = how much token i attends to each token\n",
                (long long)D, (unsigned long long)a.seed);
    std::printf("%-10s", "");
    for (const auto& t : tokens) std::printf("%10s", t.c_str());
    std::printf("%10s\n", "row sum");
    double worst = 0;
    for (int64_t i = 0; i < T; ++i) {
        std::printf("%-10s", tokens[size_t(i)].c_str());
        double s = 0;
        for (int64_t j = 0; j < T; ++j) {
            const float x = w[size_t(i * T + j)];
            s += x;
            std::printf("%10.4f", x);
        }
        worst = std::max(worst, std::abs(s - 1.0));
        std::printf("%10.4f\n", s);
    }
    QKV_CHECK(worst < 1e-5, "attention: a row of the weights does not sum to 1 (off by ", worst, ")");

    std::filesystem::create_directories(a.out);
    std::vector<double> vals(w.begin(), w.end());
    util::Heatmap heat(vals, T, T);
    heat.title      = "self-attention weights";
    heat.xlabel     = "Keys", heat.ylabel = "Queries";
    heat.row_labels = tokens, heat.col_labels = tokens;
    heat.vmin = 0.0, heat.vmax = 1.0;
    const std::string stem = a.out + "/self_attention";
    heat.save(stem + ".png");
    heat.save(stem + ".svg");
    const auto [pw, ph] = heat.canvas_size();
    std::printf("wrote %s.png and .svg (%dx%d px)\n", stem.c_str(), pw, ph);
}

Registration reg([](CLI::App& app) {
    auto a   = std::make_shared<AttentionArgs>();
    auto* sc = app.add_subcommand("attention", "scaled dot-product attention on (2, 10, 8) inputs "
                                               "with dropout, and the 4-token self-attention "
                                               "matrix as a table and a heatmap");
    sc->add_option("--seed", a->seed, "seed of the random inputs and embeddings")
        ->transform(seed_value())
        ->capture_default_str();
    sc->add_option("--out", a->out, "output folder for the heatmap")
        ->check(non_empty_path())
        ->capture_default_str();
    sc->callback([a] { run_attention(*a); });
});

}  // namespace
}  // namespace qkv::cli
