// Links against an installed libqkv.a and calls into every part that needs a third-party library
// (oneDNN GEMMs and OpenMP in attention, utf8proc in the tokenizer, nlohmann_json in run configs,
// cairo in plots, libzip in the data reader, SentencePiece in subword models), so a dependency the
// package config fails to re-find shows up as a link error. Prints "consumer: ok" and exits 0.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/data/fra_eng.h"
#include "qkv/data/subword.h"
#include "qkv/data/tokenizer.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/reduce.h"
#include "qkv/train/run_config.h"
#include "qkv/util/plot.h"

#include <nlohmann/json.hpp>

namespace {
int failures = 0;
void check(bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "consumer: FAILED: %s\n", what);
    failures += ok ? 0 : 1;
}
// True when f() throws qkv::Error.
template <class F> bool throws(F f) {
    try {
        f();
    } catch (const qkv::Error&) {
        return true;
    }
    return false;
}
}  // namespace

int main() {
    namespace fs = std::filesystem;
    qkv::manual_seed(0);

    // Attention (OpenMP kernels, oneDNN GEMMs in the projections).
    const qkv::Tensor w = qkv::masked_softmax(qkv::ones({1, 2, 4}), qkv::from_vector<int64_t>({2}, {1}));
    check(w.to_vector<float>() == std::vector<float>({0.5f, 0.5f, 0, 0, 0.5f, 0.5f, 0, 0}), "masked_softmax");
    qkv::nn::MultiHeadAttentionConfig cfg;
    cfg.num_hiddens = 8;
    cfg.num_heads = 2;
    qkv::nn::MultiHeadAttention mha(cfg);
    const qkv::Tensor x = qkv::randn({2, 3, 8});
    const qkv::Tensor y = mha.forward(x, x, x, qkv::from_vector<int64_t>({2, 3}, {2}));
    check(y.shape() == qkv::Shape({2, 3, 8}) && std::isfinite(qkv::sum(y).item()), "MultiHeadAttention");

    // utf8proc, nlohmann_json.
    check(qkv::data::tokenize_nmt("Go.") == std::vector<std::string>({"go", "."}), "tokenize_nmt");
    check(qkv::train::to_json(qkv::train::preset_config("d2l")).dump().find("num_hiddens") != std::string::npos,
          "run config JSON");

    // cairo: a heatmap PNG.
    const fs::path png = fs::temp_directory_path() / ("qkv_consumer_" + std::to_string(::getpid()) + ".png");
    qkv::util::Heatmap({0.0, 0.5, 0.5, 1.0}, 2, 2).save(png.string());
    check(fs::exists(png) && fs::file_size(png) > 0, "heatmap PNG written");
    fs::remove(png);

    // libzip and SentencePiece: their readers refuse bad input with qkv::Error.
    check(throws([] { qkv::data::read_fra_eng_text("/nonexistent/qkv_consumer/fra-eng.zip"); }), "libzip reader");
    check(throws([] { qkv::data::SubwordModel::from_bytes("not a model"); }), "SentencePiece model");

    std::puts(failures ? "consumer: FAILED" : "consumer: ok");
    return failures ? 1 : 0;
}
