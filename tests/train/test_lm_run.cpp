// train::run's language-model folder rules that the CLI cannot time reliably: a fresh run stopped before its
// first checkpoint leaves nothing (the folder it created is gone, the same command can run again);
// one stopped after a step keeps a checkpoint that --resume continues; config.json values that
// are not whole numbers, or a sinusoidal max_len below num_steps, are refused naming the key.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/train/lm.h"
#include "qkv/train/run.h"
#include "qkv/util/atomic_file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

train::RunConfig tiny(const std::string& text) {
    train::RunConfig c = train::preset_config("lm-tiny", train::ModelKind::lm);
    c.data.path = text;
    c.train.max_steps = 3;
    return c;
}

/// An LM's config.json text as written and read back (run_config_from_json, to_json), as
/// load_model_dir_config reads a folder's (naming the file in its errors).
train::RunConfig from_json(const std::string& text, const std::string& origin) {
    try {
        return train::run_config_from_json(nlohmann::json::parse(text));
    } catch (const Error& e) {
        throw Error("'" + origin + "': " + e.what());
    }
}
std::string json_text(const train::RunConfig& c) { return train::to_json(c).dump(2) + "\n"; }

std::string write_text(const test::TempDir& dir) {
    const std::string p = dir / "text.txt";
    std::ofstream f(p);
    for (int i = 0; i < 100; ++i) f << "The Time Traveller (for so it will be convenient to speak of him) was expounding.\n";
    return p;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

TEST(LmRun, StoppedBeforeTheFirstCheckpointLeavesNothing) {
    test::TempDir dir;
    const std::string text = write_text(dir), out = dir / "lm";
    volatile std::sig_atomic_t stop = SIGINT;  // set before the first step
    train::RunOptions o;
    o.out_dir = out;
    o.interrupt = &stop;
    const train::RunResult r = train::run(tiny(text), o);
    EXPECT_FALSE(r.trained);
    EXPECT_FALSE(fs::exists(out)) << "the folder the run created is left";
    // ... so the same command runs again, to the end.
    o.interrupt = nullptr;
    const train::RunResult again = train::run(tiny(text), o);
    EXPECT_TRUE(again.trained);
    EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoint.safetensors"));
    EXPECT_EQ(again.train.steps, 3);
}

TEST(LmRun, ConfigJsonNumbersMustBeWholeAndPositionsEnough) {
    test::TempDir dir;
    const std::string text = write_text(dir), out = dir / "lm";
    train::RunOptions o;
    o.out_dir = out;
    train::run(tiny(text), o);
    const std::string cfg = util::read_file((fs::path(out) / "config.json").string());
    const auto with = [&](const std::string& from, const std::string& to) {
        std::string s = cfg;
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    std::string e = error_of([&] { from_json(with("\"window\": -1", "\"window\": 1.5"), "c.json"); });
    EXPECT_NE(e.find("'c.json': key 'model.window' must be an integer, got 1.5"), std::string::npos) << e;
    e = error_of([&] { from_json(with("\"max_len\": 4096", "\"max_len\": 1e20"), "c.json"); });
    EXPECT_NE(e.find("key 'model.max_len' must be an integer, got 1e+20"), std::string::npos) << e;
    e = error_of([&] { from_json(with("\"window\": -1", "\"window\": 0"), "c.json"); });
    EXPECT_NE(e.find("key 'model.window' is 0, expected -1 (all positions) or >= 1"), std::string::npos) << e;
    std::string sin = with("\"positions\": \"rope\"", "\"positions\": \"sinusoidal\"");
    const std::string ml = "\"max_len\": 4096";
    sin.replace(sin.find(ml), ml.size(), "\"max_len\": 10");
    e = error_of([&] { from_json(sin, "c.json"); });
    EXPECT_NE(e.find("key 'model.max_len' is 10, below data.num_steps 16"), std::string::npos) << e;
    e = error_of([&] { from_json(with("\"seed\": 0", "\"seed\": -1"), "c.json"); });
    EXPECT_NE(e.find("key 'train.seed' must be an integer >= 0, got -1"), std::string::npos) << e;
    EXPECT_EQ(error_of([&] { from_json(cfg, "c.json"); }), "");
    EXPECT_EQ(from_json(cfg, "c.json").architecture, train::ModelKind::lm);
}

// The config.json a language-model run writes, byte for byte against the files the hand-written
// writer made (tests/fixtures/run_config/lm*_lm.json: each preset as a fresh run on a text records
// it; lm_folder_v1.json: a folder an earlier qkv trained, with --lr and --max-steps), and each file
// reads back to itself: the LM's config.json must not change when its code does (issue 43).
TEST(LmRun, ConfigJsonIsByteIdenticalToTheGoldenFiles) {
    const fs::path dir = fs::path(QKV_FIXTURE_DIR) / "run_config";
    for (const std::string preset : {"lm", "lm-tiny"}) {
        train::RunConfig c = train::preset_config(preset, train::ModelKind::lm);
        c.data.path = "/data/timemachine.txt", c.lm.vocab_size = 29;
        c.data.fingerprint.characters = 56910, c.data.fingerprint.fnv1a64 = 0x2a0c38093619cb0fULL;
        const fs::path file = dir / (preset + "_lm.json");
        const std::string written = json_text(c);
        if (std::getenv("QKV_WRITE_RUN_CONFIG_GOLDEN")) {
            std::ofstream(file, std::ios::binary) << written;
            ADD_FAILURE() << "wrote " << file << " (QKV_WRITE_RUN_CONFIG_GOLDEN): check its diff";
            continue;
        }
        EXPECT_EQ(written, qkv::util::read_file(file.string())) << file;
    }
    for (const char* name : {"lm_lm.json", "lm-tiny_lm.json", "lm_folder_v1.json"}) {
        const std::string golden = qkv::util::read_file((dir / name).string());
        EXPECT_EQ(json_text(from_json(golden, name)), golden) << name;
    }
}

}  // namespace
