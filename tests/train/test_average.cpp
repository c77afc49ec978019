// Checkpoint averaging (train/average.h): the mean of the parameters, the checks before writing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/train/average.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run.h"
#include "qkv/util/atomic_file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

/// A tiny model folder trained 2 steps from `dir`/fra.txt (same data: same vocabularies).
std::string train_folder(const TempDir& dir, const std::string& name, uint64_t seed, int64_t num_hiddens = 16) {
    if (!fs::exists(dir / "fra.txt")) {
        std::ofstream f(dir / "fra.txt");
        const char* pairs[] = {"Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.",
                               "I'm home.\tJe suis chez moi.", "We won.\tNous avons gagné.", "Thank you.\tMerci."};
        for (int i = 0; i < 60; ++i) f << pairs[i % 6] << "\n";
    }
    train::RunOverrides o;
    o.data_path = dir / "fra.txt";
    o.num_hiddens = num_hiddens, o.num_heads = 2, o.num_blks = 1, o.ffn_num_hiddens = 16, o.batch_size = 8;
    o.num_steps = 6, o.max_steps = 2, o.time_budget_s = 0, o.seed = seed;
    const train::RunConfig cfg = train::configure_run("demo", train::ModelKind::transformer, o);
    train::RunOptions ro;
    ro.out_dir  = dir / name;
    ro.progress = false;
    ro.log      = nullptr;
    train::run(cfg, ro);
    return ro.out_dir;
}

std::vector<std::pair<std::string, Tensor>> params_of(const std::string& dir) {
    return train::load_model_dir(dir).model->named_parameters();
}

TEST(Average, IsTheMeanRoundedOnceAndLoads) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1), b = train_folder(dir, "b", 2), c = train_folder(dir, "c", 3);
    fs::create_directories(dir / "avg.tmp.999999");  // left by an average that was killed
    std::ofstream(dir / "avg.tmp.999999/model.safetensors") << "half";
    const train::AverageResult r = train::average_models({a, b, c}, dir / "avg");
    EXPECT_FALSE(fs::exists(dir / "avg.tmp.999999"));
    EXPECT_EQ(r.models, 3);
    const auto pa = params_of(a), pb = params_of(b), pc = params_of(c), pm = params_of(dir / "avg");
    ASSERT_EQ(pm.size(), pa.size());
    EXPECT_EQ(r.tensors, int64_t(pa.size()));
    int64_t differ = 0;
    for (size_t i = 0; i < pa.size(); ++i) {
        ASSERT_EQ(pm[i].first, pa[i].first);
        const float *x = pa[i].second.data<float>(), *y = pb[i].second.data<float>(), *z = pc[i].second.data<float>(),
                    *m = pm[i].second.data<float>();
        for (int64_t k = 0; k < pa[i].second.numel(); ++k) {
            // The float64 mean rounded once to float32: exactly what the file must hold.
            ASSERT_EQ(m[k], float((double(x[k]) + double(y[k]) + double(z[k])) / 3.0)) << pa[i].first << "[" << k << "]";
            differ += x[k] != y[k];
        }
    }
    EXPECT_GT(differ, 0);  // the seeds gave different models, so the mean is not a copy
    for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt", "model.safetensors"})
        EXPECT_TRUE(fs::exists(dir / ("avg/" + std::string(f)))) << f;
    EXPECT_FALSE(fs::exists(dir / "avg/checkpoint.safetensors"));
}

TEST(Average, OfAModelWithItselfIsTheModelBitwise) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1);
    train::average_models({a, a}, dir / "same");
    const auto pa = params_of(a), ps = params_of(dir / "same");
    ASSERT_EQ(ps.size(), pa.size());
    for (size_t i = 0; i < pa.size(); ++i)
        ASSERT_EQ(0, std::memcmp(pa[i].second.data<float>(), ps[i].second.data<float>(),
                                 size_t(pa[i].second.numel()) * sizeof(float)))
            << pa[i].first;
}

TEST(Average, RefusesIncompatibleFoldersBeforeWriting) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1), wide = train_folder(dir, "wide", 1, 24);
    std::string e = error_of([&] { train::average_models({a, wide}, dir / "out"); });
    EXPECT_NE(e.find("cannot average '" + wide + "' with '" + a + "': different architecture"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir / "out"));

    // The same architecture with another target vocabulary (two words swapped: same size).
    const std::string v = dir / "vocab";
    fs::copy(a, v);
    std::string text = util::read_file(v + "/tgt_vocab.txt");
    std::vector<std::string> lines;
    for (size_t p = 0, q; p < text.size(); p = q + 1) lines.push_back(text.substr(p, (q = text.find('\n', p)) - p));
    ASSERT_GT(lines.size(), 7u);
    std::swap(lines[5], lines[6]);
    text.clear();
    for (const auto& l : lines) text += l + "\n";
    util::write_file_atomic(v + "/tgt_vocab.txt", text);
    e = error_of([&] { train::average_models({a, v}, dir / "out"); });
    EXPECT_NE(e.find("different vocabularies: '" + v + "/tgt_vocab.txt' differs from '" + a + "/tgt_vocab.txt'"),
              std::string::npos)
        << e;

    e = error_of([&] { train::average_models({a, a}, a); });
    EXPECT_NE(e.find("is one of the inputs"), std::string::npos) << e;
    fs::create_directories(dir / "full");
    std::ofstream(dir / "full/x") << "x";
    e = error_of([&] { train::average_models({a}, dir / "full"); });
    EXPECT_NE(e.find("exists and is not empty"), std::string::npos) << e;
    e = error_of([&] { train::average_models({a, dir / "missing"}, dir / "out"); });
    EXPECT_NE(e.find("missing"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir / "out"));
    e = error_of([&] { train::average_models({}, dir / "out"); });
    EXPECT_NE(e.find("no model folder given"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv::test
