// train::run_lm's folder rules that the CLI cannot time reliably: a fresh run stopped before its
// first checkpoint leaves nothing (the folder it created is gone, the same command can run again);
// one stopped after a step keeps a checkpoint that --resume continues; config.json values that
// are not whole numbers, or a sinusoidal max_len below num_steps, are refused naming the key.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "qkv/train/lm.h"
#include "qkv/util/atomic_file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

train::LmConfig tiny(const std::string& text) {
    train::LmConfig c = train::lm_preset("lm-tiny");
    c.path = text;
    c.train.max_steps = 3;
    return c;
}

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
    const train::RunResult r = train::run_lm(tiny(text), o);
    EXPECT_FALSE(r.trained);
    EXPECT_FALSE(fs::exists(out)) << "the folder the run created is left";
    // ... so the same command runs again, to the end.
    o.interrupt = nullptr;
    const train::RunResult again = train::run_lm(tiny(text), o);
    EXPECT_TRUE(again.trained);
    EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoint.safetensors"));
    EXPECT_EQ(again.train.steps, 3);
}

TEST(LmRun, ConfigJsonNumbersMustBeWholeAndPositionsEnough) {
    test::TempDir dir;
    const std::string text = write_text(dir), out = dir / "lm";
    train::RunOptions o;
    o.out_dir = out;
    train::run_lm(tiny(text), o);
    const std::string cfg = util::read_file((fs::path(out) / "config.json").string());
    const auto with = [&](const std::string& from, const std::string& to) {
        std::string s = cfg;
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    std::string e = error_of([&] { train::lm_config_from_json(with("\"window\": -1", "\"window\": 1.5"), "c.json"); });
    EXPECT_NE(e.find("'c.json': key 'model.window' is 1.5, expected an integer"), std::string::npos) << e;
    e = error_of([&] { train::lm_config_from_json(with("\"max_len\": 4096", "\"max_len\": 1e20"), "c.json"); });
    EXPECT_NE(e.find("key 'model.max_len' is 1e+20, expected an integer"), std::string::npos) << e;
    std::string sin = with("\"positions\": \"rope\"", "\"positions\": \"sinusoidal\"");
    const std::string ml = "\"max_len\": 4096";
    sin.replace(sin.find(ml), ml.size(), "\"max_len\": 10");
    e = error_of([&] { train::lm_config_from_json(sin, "c.json"); });
    EXPECT_NE(e.find("key 'model.max_len' is 10, below data.num_steps 16"), std::string::npos) << e;
    e = error_of([&] { train::lm_config_from_json(with("\"seed\": 0", "\"seed\": -1"), "c.json"); });
    EXPECT_NE(e.find("key 'train.seed' is -1"), std::string::npos) << e;
    EXPECT_EQ(error_of([&] { train::lm_config_from_json(cfg, "c.json"); }), "");
}

// The config.json a language-model run writes, byte for byte against the files the hand-written
// writer made (tests/fixtures/run_config/lm*_lm.json: each preset as a fresh run on a text records
// it; lm_folder_v1.json: a folder an earlier qkv trained, with --lr and --max-steps), and each file
// reads back to itself: the LM's config.json must not change when its code does (issue 43).
TEST(LmRun, ConfigJsonIsByteIdenticalToTheGoldenFiles) {
    const fs::path dir = fs::path(QKV_FIXTURE_DIR) / "run_config";
    for (const std::string preset : {"lm", "lm-tiny"}) {
        train::LmConfig c = train::lm_preset(preset);
        c.path = "/data/timemachine.txt", c.model.vocab_size = 29;
        c.fingerprint_chars = 56910, c.fingerprint_fnv1a64 = 0x2a0c38093619cb0fULL;
        const fs::path file = dir / (preset + "_lm.json");
        const std::string written = train::lm_config_json(c);
        if (std::getenv("QKV_WRITE_RUN_CONFIG_GOLDEN")) {
            std::ofstream(file, std::ios::binary) << written;
            ADD_FAILURE() << "wrote " << file << " (QKV_WRITE_RUN_CONFIG_GOLDEN): check its diff";
            continue;
        }
        EXPECT_EQ(written, qkv::util::read_file(file.string())) << file;
    }
    for (const char* name : {"lm_lm.json", "lm-tiny_lm.json", "lm_folder_v1.json"}) {
        const std::string golden = qkv::util::read_file((dir / name).string());
        EXPECT_EQ(train::lm_config_json(train::lm_config_from_json(golden, name)), golden) << name;
    }
}

}  // namespace
