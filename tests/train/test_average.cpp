// Checkpoint averaging (train/average.h): the mean of the parameters, the checks before writing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/average.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run.h"
#include "qkv/util/atomic_file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

/// A tiny model folder trained 2 steps from `dir`/fra.txt (same data: same vocabularies).
std::string train_folder(const TempDir& dir, const std::string& name, uint64_t seed, int64_t num_hiddens = 16,
                         int64_t keep_checkpoints = 0, int64_t max_steps = 2) {
    if (!fs::exists(dir / "fra.txt")) {
        std::ofstream f(dir / "fra.txt");
        const char* pairs[] = {"Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.",
                               "I'm home.\tJe suis chez moi.", "We won.\tNous avons gagné.", "Thank you.\tMerci."};
        for (int i = 0; i < 60; ++i) f << pairs[i % 6] << "\n";
    }
    train::RunOverrides o;
    o.set("data.path", dir / "fra.txt");
    o.set("model.num_hiddens", int64_t(num_hiddens)).set("model.num_heads", 2).set("model.num_blks", 1);
    o.set("model.ffn_num_hiddens", 16).set("train.batch_size", 8).set("data.num_steps", 6);
    o.set("train.max_steps", int64_t(max_steps)).set("train.time_budget_s", 0).set("train.seed", uint64_t(seed));
    if (keep_checkpoints > 0) o.set("train.keep_checkpoints", int64_t(keep_checkpoints));
    o.set("train.val_every_s", 0);
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
    // Another average into the same name, still running (its process is alive), keeps its own.
    const std::string live = "avg.tmp." + std::to_string(::getppid());
    fs::create_directories(dir / live);
    const train::AverageResult r = train::average_models({a, b, c}, dir / "avg");
    EXPECT_FALSE(fs::exists(dir / "avg.tmp.999999"));
    EXPECT_TRUE(fs::exists(dir / live));
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

// bf16 storage (qkv average --dtype bf16): the float64 mean rounded ONCE to bf16, stored as BF16 (about
// half the file), loading back widened exactly. One element is set so that rounding via float32
// would differ: the mean of 1 + 2^-8 and 1 + 2^-8 + 2^-23 is 1 + 2^-8 + 2^-24, which float32 rounds
// to 1 + 2^-8 (a tie, to even) and bf16 then to 1 (a tie, to even); once from float64 it is 1 + 2^-7.
TEST(Average, Bf16StorageRoundsTheMeanOnce) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1), b = train_folder(dir, "b", 2);
    for (const auto& [d, x] : {std::pair{a, 1.0f + 0x1p-8f}, std::pair{b, 1.0f + 0x1p-8f + 0x1p-23f}}) {
        train::ModelDir m = train::load_model_dir(d);
        m.model->named_parameters()[0].second.data<float>()[0] = x;
        train::save_model(d + "/model.safetensors", *m.model);
    }
    const train::AverageResult r = train::average_models({a, b}, dir / "avg16", DType::bf16);
    EXPECT_EQ(r.models, 2);
    const io::SafeTensorsFile f(dir / "avg16/model.safetensors");
    for (const auto& e : f.entries()) EXPECT_EQ(e.dtype, "BF16") << e.name;
    const auto pa = params_of(a), pb = params_of(b), pm = params_of(dir / "avg16");
    ASSERT_EQ(pm.size(), pa.size());
    EXPECT_EQ(pm[0].second.data<float>()[0], 1.0f + 0x1p-7f);
    for (size_t i = 0; i < pa.size(); ++i) {
        const float *x = pa[i].second.data<float>(), *y = pb[i].second.data<float>(), *m = pm[i].second.data<float>();
        for (int64_t k = 0; k < pa[i].second.numel(); ++k)
            ASSERT_EQ(m[k], bf16_to_float(bf16_bits((double(x[k]) + double(y[k])) / 2.0))) << pa[i].first << "[" << k << "]";
    }
    const auto size32 = fs::file_size(a + "/model.safetensors"), size16 = fs::file_size(dir / "avg16/model.safetensors");
    EXPECT_LT(double(size16), 0.6 * double(size32)) << size16 << " vs " << size32;
    // One folder in converts it.
    train::average_models({a}, dir / "conv16", DType::bf16);
    const auto pc = params_of(dir / "conv16");
    for (size_t i = 0; i < pa.size(); ++i)
        for (int64_t k = 0; k < pa[i].second.numel(); ++k)
            ASSERT_EQ(pc[i].second.data<float>()[k], round_to_bf16(pa[i].second.data<float>()[k]));
    EXPECT_THROW(train::average_models({a}, dir / "bad", DType::i64), Error);
}

// --keep-checkpoints 3 over 32 steps (epochs of 6 batches: checkpoints at every epoch end and the
// stop) keeps the model files of the last 3 checkpoints, oldest first; average_last_checkpoints(K) is the float64 mean of the newest K
// rounded once, and more than kept is refused naming the count.
TEST(Average, LastKeptCheckpoints) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1, 16, /*keep_checkpoints=*/3, /*max_steps=*/32);
    const auto kept = train::kept_checkpoints(a);
    ASSERT_EQ(kept.size(), 3u);
    EXPECT_EQ(kept.back(), train::kept_checkpoint_path(a, 32));
    EXPECT_EQ(kept.front(), train::kept_checkpoint_path(a, 24));
    EXPECT_EQ(kept[1], train::kept_checkpoint_path(a, 30));
    train::average_last_checkpoints(a, 2, dir / "avg2");
    auto load = [&](const std::string& f) {
        train::ModelDir m = train::load_model_dir(a);
        train::load_model(f, *m.model);
        return m.model->named_parameters();
    };
    const auto p1 = load(kept[1]), p2 = load(kept[2]), pm = params_of(dir / "avg2");
    ASSERT_EQ(pm.size(), p1.size());
    int64_t differ = 0;
    for (size_t i = 0; i < p1.size(); ++i) {
        const float *x = p1[i].second.data<float>(), *y = p2[i].second.data<float>(), *m = pm[i].second.data<float>();
        for (int64_t k = 0; k < p1[i].second.numel(); ++k) {
            ASSERT_EQ(m[k], float((double(x[k]) + double(y[k])) / 2.0)) << p1[i].first << "[" << k << "]";
            differ += x[k] != y[k];
        }
    }
    EXPECT_GT(differ, 0);  // two different steps
    // The newest kept checkpoint is the final model.
    const auto pf = params_of(a);
    for (size_t i = 0; i < pf.size(); ++i)
        ASSERT_EQ(0, std::memcmp(pf[i].second.data<float>(), p2[i].second.data<float>(),
                                 size_t(pf[i].second.numel()) * sizeof(float)));
    const std::string e = error_of([&] { train::average_last_checkpoints(a, 4, dir / "avg4"); });
    EXPECT_NE(e.find("--last 4 but '" + a + "' keeps 3 checkpoints"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir / "avg4"));
    // A fresh run into the folder (overwrite) starts its own list; pruning keeps the newest.
    train::prune_kept_checkpoints(a, 1);
    EXPECT_EQ(train::kept_checkpoints(a), std::vector<std::string>{kept.back()});
}

TEST(Average, OfAModelWithItsCopyIsTheModelBitwise) {
    TempDir dir;
    const std::string a = train_folder(dir, "a", 1), copy = dir / "copy";
    fs::copy(a, copy, fs::copy_options::recursive);
    train::average_models({a, copy}, dir / "same");
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
    // One folder twice (weighting it double is not an average of runs), or an output inside an input.
    std::string twice = error_of([&] { train::average_models({a, wide, a + "/."}, dir / "out"); });
    EXPECT_NE(twice.find("is the folder '" + a + "' again (arguments 1 and 3)"), std::string::npos) << twice;
    std::string inside = error_of([&] { train::average_models({a}, a + "/checkpoints/avg"); });
    EXPECT_NE(inside.find("is inside the input folder '" + a + "'"), std::string::npos) << inside;
    EXPECT_FALSE(fs::exists(a + "/checkpoints/avg"));
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
