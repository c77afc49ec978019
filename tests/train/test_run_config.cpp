// Presets, config.json round trip, durations, and the data setup on small files (split sizes,
// disjointness, malformed lines, --strict, the missing-file message).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/runtime/run_config_fields.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run.h"
#include "qkv/train/run_config.h"
#include "qkv/train/translation_data.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

// The language model's presets are preset_config's too, of kind lm; a preset of the other kind is a
// ConfigError naming --model lm; a language model writes and reads its own rows only.
TEST(RunConfig, LanguageModelPresetsAndRows) {
    const auto lm = train::preset_config("lm", train::ModelKind::lm);
    EXPECT_EQ(lm.architecture, train::ModelKind::lm);
    EXPECT_EQ(lm.lm.num_hiddens, 128);
    EXPECT_EQ(lm.data.num_steps, 64);
    EXPECT_EQ(lm.train.schedule, optim::LrSchedule::warmup_inv_sqrt);
    EXPECT_EQ(train::preset_config("lm-tiny", train::ModelKind::lm).lm.num_blks, 1);
    EXPECT_NE(error_of([] { train::preset_config("demo", train::ModelKind::lm); })
                  .find("--preset demo is a translation preset; --model lm takes lm or lm-tiny"), std::string::npos);
    EXPECT_THROW(train::preset_config("lm-tiny", train::ModelKind::transformer), train::ConfigError);
    auto c = lm;
    c.lm.vocab_size = 29;
    const nlohmann::json j = train::to_json(c);
    EXPECT_EQ(j["model_kind"], "lm");
    EXPECT_FALSE(j.contains("preset") || j["model"].contains("architecture") || j["train"].contains("schedule"));
    train::RunOverrides o;
    o.set("data.subword", "bpe");
    EXPECT_NE(error_of([&] { train::configure_run("lm-tiny", train::ModelKind::lm, o); })
                  .find("--subword does not apply to --model lm"), std::string::npos);
    train::RunOverrides kv;
    kv.set("model.num_kv_heads", 2);
    EXPECT_NE(error_of([&] { train::configure_run("demo", train::ModelKind::transformer, kv); })
                  .find("--num-kv-heads applies to --model lm only"), std::string::npos);
    EXPECT_EQ(train::configure_run("lm-tiny", train::ModelKind::lm, kv).lm.num_kv_heads, 2);
}

TEST(RunConfig, PresetsMatchTheirSpecification) {
    const auto d2l = train::preset_config("d2l");
    EXPECT_EQ(d2l.data.pipeline, train::DataPipeline::d2l_en);
    EXPECT_EQ(d2l.data.num_steps, 9);
    EXPECT_EQ(d2l.model.num_hiddens, 256);
    EXPECT_EQ(d2l.model.ffn_num_hiddens, 64);
    EXPECT_DOUBLE_EQ(d2l.model.dropout, 0.2);
    EXPECT_EQ(d2l.train.epochs, 30);
    EXPECT_EQ(d2l.train.batch_size, 128);
    EXPECT_DOUBLE_EQ(d2l.train.lr, 1e-3);
    const auto anchor = train::preset_config("anchor");
    EXPECT_EQ(anchor.data.num_steps, 12);
    EXPECT_EQ(anchor.data.n_test, 5000);
    EXPECT_EQ(anchor.model.ffn_num_hiddens, 1024);
    EXPECT_DOUBLE_EQ(anchor.train.lr, 5e-4);
    EXPECT_DOUBLE_EQ(anchor.train.adam_beta2, 0.98);
    EXPECT_DOUBLE_EQ(anchor.train.adam_eps, 1e-9);
    EXPECT_DOUBLE_EQ(anchor.train.time_budget_s, 1200);
    EXPECT_EQ(anchor.decode.max_len, 20);
    EXPECT_DOUBLE_EQ(anchor.train.val_every_s, 300);
    EXPECT_EQ(anchor.train.bucket_pool, 0);  // the anchor's batches: random, fixed 12 columns
    // full: the anchor's data, model and budget with qkv's recipe (issue 7).
    const auto full = train::preset_config("full");
    EXPECT_EQ(full.data.n_test, 5000);
    EXPECT_EQ(full.data.split_seed, 0u);
    EXPECT_EQ(full.model.num_hiddens, 256);
    EXPECT_DOUBLE_EQ(full.train.time_budget_s, 1200);
    EXPECT_EQ(full.train.bucket_pool, 50);
    EXPECT_TRUE(full.train.trim_batches);
    EXPECT_DOUBLE_EQ(full.train.label_smoothing, 0.1);
    EXPECT_EQ(full.train.schedule, optim::LrSchedule::warmup_inv_sqrt);
    EXPECT_EQ(full.data.subword, data::SubwordKind::bpe);  // shared BPE 8k, tied (issue 7)
    EXPECT_EQ(full.data.subword_vocab_size, 8000);
    EXPECT_TRUE(full.data.shared_vocab);
    EXPECT_TRUE(full.model.tie_weights);
    EXPECT_EQ(full.data.num_steps, 20);
    EXPECT_EQ(full.decode.max_len, 30);
    EXPECT_EQ(anchor.data.subword, data::SubwordKind::none);
    EXPECT_FALSE(anchor.model.tie_weights);
    EXPECT_FALSE(train::preset_config("full", train::ModelKind::bahdanau).model.tie_weights);
    // demo: the small, fast configuration tuned for the 210 s budget on 2 cores (docs/training.md, presets)
    const auto demo = train::preset_config("demo");
    EXPECT_DOUBLE_EQ(demo.train.time_budget_s, 210);
    EXPECT_EQ(demo.model.num_hiddens, 128);
    EXPECT_EQ(demo.model.ffn_num_hiddens, 256);
    EXPECT_EQ(demo.model.num_hiddens % demo.model.num_heads, 0);
    EXPECT_EQ(demo.train.batch_size, 64);
    EXPECT_DOUBLE_EQ(demo.train.lr, 2e-3);
    EXPECT_DOUBLE_EQ(demo.train.label_smoothing, 0.1);
    EXPECT_EQ(demo.train.schedule, optim::LrSchedule::warmup_inv_sqrt);
    EXPECT_EQ(demo.train.warmup_steps, 200);
    try {
        train::preset_config("huge");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("d2l, demo, full, anchor"), std::string::npos) << e.what();
    }
}

TEST(RunConfig, JsonRoundTrip) {
    auto c = train::preset_config("demo");
    c.data.path = "x/fra.txt";
    c.model.src_vocab_size = 77, c.model.tgt_vocab_size = 88;
    c.model.pe_position_zero_at_inference = true;
    c.train.schedule = optim::LrSchedule::warmup_inv_sqrt;
    c.train.warmup_steps = 123;
    c.train.loss_on_padding = true;
    c.train.seed = 42;
    c.decode.beam = 4;
    c.train.bucket_pool = 17, c.train.trim_batches = true, c.train.val_every_s = 45;
    c.log_every = 7;
    const auto j = train::to_json(c);
    const auto r = train::run_config_from_json(nlohmann::json::parse(j.dump()));
    EXPECT_EQ(train::to_json(r), j);
    EXPECT_EQ(r.train.schedule, optim::LrSchedule::warmup_inv_sqrt);
    EXPECT_EQ(r.model.tgt_vocab_size, 88);
    EXPECT_TRUE(r.model.pe_position_zero_at_inference);
    EXPECT_EQ(r.train.bucket_pool, 17);
    EXPECT_TRUE(r.train.trim_batches);
    EXPECT_DOUBLE_EQ(r.train.val_every_s, 45);
    EXPECT_EQ(j["train"]["log_every"], 7);  // --resume keeps it
    EXPECT_EQ(r.log_every, 7);
    nlohmann::json older = j;  // before "train.log_every": the default
    older["train"].erase("log_every");
    EXPECT_EQ(train::run_config_from_json(older).log_every, 50);
    nlohmann::json bad = j;
    bad["data"]["pipeline"] = "zh";
    EXPECT_THROW(train::run_config_from_json(bad), Error);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(RunConfig, JsonTypeErrorsAndMissingShapeKeysNameTheKey) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = 77, c.model.tgt_vocab_size = 88;
    const nlohmann::json good = train::to_json(c);
    nlohmann::json j = good;
    j["model"]["num_hiddens"] = "abc";
    std::string e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.num_hiddens'") && has(e, "\"abc\"")) << e;
    EXPECT_FALSE(has(e, "json.exception")) << e;
    j = good;
    j["train"]["seed"] = -3;  // uint64
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'train.seed'") && has(e, "integer >= 0")) << e;
    j = good;
    j["data"]["strict"] = 1;
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'data.strict'") && has(e, "true or false")) << e;
    j = good;
    j["model"].erase("num_blks");
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.num_blks' is missing")) << e;
    j = good;
    j.erase("model");
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "section 'model' is missing")) << e;
    j = good;
    j["decode"] = 5;
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "section 'decode' must be an object")) << e;
    // Keys added later keep their defaults when absent (older files).
    j = good;
    j["train"].erase("bucket_pool");
    j["model"].erase("architecture");
    EXPECT_EQ(train::run_config_from_json(j).train.bucket_pool, 0);
    EXPECT_EQ(train::run_config_from_json(j).architecture, train::ModelKind::transformer);
    // Bahdanau: its own shape keys are required.
    auto b = train::preset_config("d2l", train::ModelKind::bahdanau);
    b.model.src_vocab_size = 7, b.model.tgt_vocab_size = 9;
    j = train::to_json(b);
    EXPECT_EQ(train::to_json(train::run_config_from_json(j)), j);
    j["model"].erase("embed_size");
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.embed_size' is missing")) << e;
}

TEST(RunConfig, RangeErrorsNameTheKeyTheValueAndTheRange) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = 77, c.model.tgt_vocab_size = 88;
    const nlohmann::json good = train::to_json(c);
    EXPECT_NO_THROW(train::run_config_from_json(good));
    // {section, key, bad value, text of the allowed range}
    struct Case {
        const char *section, *key;
        nlohmann::json value;
        const char* range;
    };
    const Case cases[] = {
        {"data", "num_steps", 0, "an integer from 2 to 1000"},
        {"data", "num_steps", 1001, "an integer from 2 to 1000"},
        {"data", "n_test", 0, "an integer >= 1"},
        {"data", "max_pairs", -1, "an integer >= 0"},
        {"model", "num_hiddens", -5, "an integer from 1 to 65536"},
        {"model", "num_heads", 0, "an integer from 1 to 1024"},
        {"model", "num_blks", 0, "an integer from 1 to 64"},
        {"model", "ffn_num_hiddens", 0, "an integer from 1 to 262144"},
        {"model", "dropout", 1, "a number >= 0 and < 1"},
        {"model", "dropout", -0.1, "a number >= 0 and < 1"},
        {"model", "src_vocab_size", 3, "an integer >= 4"},
        {"model", "tgt_vocab_size", 0, "an integer >= 4"},
        {"model", "max_len", 5, "an integer from 12 to 1000000"},  // decode.max_len 12 (demo)
        {"train", "epochs", 0, "an integer from 1 to 1000000"},
        {"train", "batch_size", 0, "an integer from 1 to 100000"},
        {"train", "lr", 0, "a number > 0 and <= 10"},
        {"train", "label_smoothing", 1, "a number >= 0 and < 1"},
        {"train", "adam_eps", 0, "a number > 0"},
        {"train", "time_budget_s", -1, "a number from 0 to 1e+08"},
        {"train", "val_every_s", -0.5, "a number from 0 to 1e+08"},
        {"train", "log_every", -1, "an integer from 0 to 1000000000"},
        {"decode", "beam", 0, "an integer from 1 to 100"},
        {"decode", "max_len", 0, "an integer from 1 to 1000"},
        {"decode", "length_penalty", -0.5, "a number from 0 to 10"},
    };
    for (const auto& k : cases) {
        nlohmann::json j = good;
        j[k.section][k.key] = k.value;
        const std::string e = error_of([&] { train::run_config_from_json(j); });
        const std::string key = std::string("'") + k.section + "." + k.key + "' is " + k.value.dump();
        EXPECT_TRUE(has(e, key) && has(e, k.range)) << "want \"" << key << "\" and \"" << k.range << "\" in: " << e;
    }
    // num_heads must divide num_hiddens (128 / 3)
    nlohmann::json j = good;
    j["model"]["num_heads"] = 3;
    std::string e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.num_heads' is 3") && has(e, "divisor of model.num_hiddens (128)")) << e;
    // subword: its vocabulary size is checked
    j = good;
    j["data"]["subword"] = "bpe";
    j["data"]["subword_vocab_size"] = 4;
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'data.subword_vocab_size' is 4") && has(e, "from 5 to 16777216")) << e;
    // tying needs equal vocabulary sizes (77 / 88)
    j = good;
    j["model"]["tie_weights"] = true;
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.tie_weights'") && has(e, "(77)") && has(e, "(88)")) << e;
    // Bahdanau: its own keys
    auto b = train::preset_config("d2l", train::ModelKind::bahdanau);
    b.model.src_vocab_size = 7, b.model.tgt_vocab_size = 9;
    j = train::to_json(b);
    j["model"]["num_layers"] = 0;
    e = error_of([&] { train::run_config_from_json(j); });
    EXPECT_TRUE(has(e, "'model.num_layers' is 0") && has(e, "from 1 to 64")) << e;
}

// model.bidirectional (bahdanau): written, read back, absent in older files = false, a non-bool
// value or an odd num_hiddens with it are errors naming the key.
TEST(RunConfig, BahdanauBidirectionalKey) {
    auto b = train::preset_config("d2l", train::ModelKind::bahdanau);
    b.model.src_vocab_size = 7, b.model.tgt_vocab_size = 9;
    EXPECT_FALSE(b.bahdanau.bidirectional);  // d2l keeps D2L's encoder
    // demo: the bidirectional encoder and the longer pairs under which the attention aligns
    // (bench/RESULTS_gru.md §7); the Transformer's demo keeps its own short pairs.
    const auto demo = train::preset_config("demo", train::ModelKind::bahdanau);
    EXPECT_TRUE(demo.bahdanau.bidirectional);
    EXPECT_EQ(demo.bahdanau.num_layers, 1);
    EXPECT_EQ(b.bahdanau.num_layers, 2);
    EXPECT_EQ(demo.data.max_src_tokens, 10);
    EXPECT_EQ(demo.data.max_tgt_tokens, 12);
    EXPECT_EQ(demo.data.num_steps, 14);
    EXPECT_EQ(demo.decode.max_len, 16);
    EXPECT_EQ(train::preset_config("demo").data.max_tgt_tokens, 7);
    for (const char* p : {"full", "anchor"})
        EXPECT_FALSE(train::preset_config(p, train::ModelKind::bahdanau).bahdanau.bidirectional) << p;
    EXPECT_EQ(train::to_json(b)["model"]["bidirectional"], false);
    b.bahdanau.bidirectional = true;
    const nlohmann::json j = train::to_json(b);
    EXPECT_EQ(j["model"]["bidirectional"], true);
    const auto r = train::run_config_from_json(nlohmann::json::parse(j.dump()));
    EXPECT_TRUE(r.bahdanau.bidirectional);
    EXPECT_EQ(train::to_json(r), j);
    nlohmann::json older = j;  // a model folder from before the key: unidirectional
    older["model"].erase("bidirectional");
    EXPECT_FALSE(train::run_config_from_json(older).bahdanau.bidirectional);
    nlohmann::json bad = j;
    bad["model"]["bidirectional"] = 1;
    std::string e = error_of([&] { train::run_config_from_json(bad); });
    EXPECT_TRUE(has(e, "'model.bidirectional'") && has(e, "true or false")) << e;
    bad = j;
    bad["model"]["num_hiddens"] = 255;
    e = error_of([&] { train::run_config_from_json(bad); });
    EXPECT_TRUE(has(e, "'model.num_hiddens' is 255") && has(e, "even") && has(e, "model.bidirectional")) << e;
    bad["model"]["bidirectional"] = false;  // odd widths are fine for D2L's encoder
    EXPECT_NO_THROW(train::run_config_from_json(bad));
    // The Transformer's config.json has no such key.
    auto t = train::preset_config("demo");
    t.model.src_vocab_size = 7, t.model.tgt_vocab_size = 9;
    EXPECT_FALSE(train::to_json(t)["model"].contains("bidirectional"));
}

TEST(RunConfig, WordConfigsHaveNoSubwordVocabSize) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = 77, c.model.tgt_vocab_size = 88;
    nlohmann::json j = train::to_json(c);
    EXPECT_FALSE(j["data"].contains("subword_vocab_size")) << j["data"].dump();
    // an old word config that records it (any value) still reads, and the value is not checked
    j["data"]["subword_vocab_size"] = 0;
    EXPECT_EQ(train::run_config_from_json(j).data.subword, data::SubwordKind::none);
    // a subword config keeps it
    c.data.subword = data::SubwordKind::unigram, c.data.subword_vocab_size = 300;
    j = train::to_json(c);
    EXPECT_EQ(j["data"]["subword_vocab_size"], 300);
    EXPECT_EQ(train::run_config_from_json(j).data.subword_vocab_size, 300);
}

struct ModelFolder {
    TempDir tmp{"modeldir"};
    fs::path dir = tmp.path();
    std::string cfg_file = (dir / "config.json").string();
    explicit ModelFolder(const std::string& config_text) { std::ofstream(cfg_file) << config_text; }
};

TEST(ModelDir, ConfigErrorsNameTheFileAndTheKey) {
    auto c = train::preset_config("demo");
    nlohmann::json j = train::to_json(c);
    j["model"]["num_hiddens"] = "abc";
    {
        ModelFolder m(j.dump());
        const std::string e = error_of([&] { train::load_model_dir_config(m.dir.string()); });
        EXPECT_TRUE(has(e, m.cfg_file) && has(e, "'model.num_hiddens'")) << e;
    }
    {
        ModelFolder m("{\"model\": ");
        const std::string e = error_of([&] { train::load_model_dir_config(m.dir.string()); });
        EXPECT_TRUE(has(e, m.cfg_file) && has(e, "not valid JSON") && !has(e, "[json.exception")) << e;
    }
}

TEST(ModelDir, MissingModelFileSaysNotFound) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = c.model.tgt_vocab_size = 5;
    ModelFolder m(train::to_json(c).dump());
    const data::Vocab v({"<unk>", "<pad>", "<bos>", "<eos>", "a"});
    train::write_run_files(m.dir.string(), c, v, v);
    const std::string e = error_of([&] { train::load_model_dir(m.dir.string()); });
    EXPECT_TRUE(has(e, "not found") && has(e, (m.dir / "model.safetensors").string()) && has(e, "qkv train") &&
                has(e, "--model"))
        << e;
    EXPECT_FALSE(has(e, "truncated")) << e;
}

TEST(ModelDir, RelativeDataPathIsTriedFromTheWorkingDirectoryAndNamedWhenMissing) {
    auto c = train::preset_config("demo");
    ModelFolder m("{}");
    const std::string dir = m.dir.string();
    std::ofstream((m.dir / "fra.txt").string()) << "Go.\tVa !\n";
    // --data wins over the recorded path; an empty recorded path stays empty (QKV_DATA, default).
    c.data.path = "nowhere/fra.txt";
    EXPECT_EQ(train::model_data_config(dir, c, "x.zip").path, "x.zip");
    c.data.path = "";
    EXPECT_EQ(train::model_data_config(dir, c, "").path, "");
    // A relative path that exists from the working directory is used as it is.
    const fs::path cwd = fs::current_path();
    fs::current_path(m.dir);
    c.data.path = "fra.txt";
    EXPECT_EQ(train::model_data_config(dir, c, "").path, "fra.txt");
    fs::current_path(cwd);
    // From elsewhere: the error names config.json, the path tried and --data.
    const std::string e = error_of([&] { train::model_data_config(dir, c, ""); });
    EXPECT_TRUE(has(e, m.cfg_file) && has(e, "'fra.txt'") && has(e, (cwd / "fra.txt").string()) &&
                has(e, "--data"))
        << e;
    c.data.path = (m.dir / "gone.zip").string();
    const std::string e2 = error_of([&] { train::model_data_config(dir, c, ""); });
    EXPECT_TRUE(has(e2, "gone.zip' in " + m.cfg_file + " does not exist") && has(e2, "--data")) << e2;
}

TEST(RunConfig, ParsesDurations) {
    EXPECT_DOUBLE_EQ(train::parse_duration("90"), 90);
    EXPECT_DOUBLE_EQ(train::parse_duration("90s"), 90);
    EXPECT_DOUBLE_EQ(train::parse_duration("20m"), 1200);
    EXPECT_DOUBLE_EQ(train::parse_duration("1.5h"), 5400);
    EXPECT_DOUBLE_EQ(train::parse_duration("1e2s"), 100);
    EXPECT_DOUBLE_EQ(train::parse_duration(".5m"), 30);
    for (const char* s : {"", "m", "20 m", "-3s", "abc", "5d", "0x10", " 5", "inf", "nan", "1e999", "+5", "5e"})
        EXPECT_THROW(train::parse_duration(s), Error) << s;
    // The flags' and qkv.train's rules: "none"/"off" is 0 (no limit); "0" and under a second refused.
    EXPECT_EQ(train::parse_duration_or_off("none"), 0);
    EXPECT_EQ(train::parse_duration_or_off("off"), 0);
    EXPECT_DOUBLE_EQ(train::parse_duration_or_off("1s"), 1);
    for (const char* s : {"0", "0.5s", "0m"}) EXPECT_THROW(train::parse_duration_or_off(s), Error) << s;
    EXPECT_EQ(train::check_duration_seconds(0, "time_budget"), 0);
    EXPECT_EQ(train::check_duration_seconds(90, "time_budget"), 90);
    EXPECT_EQ(std::signbit(train::check_duration_seconds(-0.0, "time_budget")), false);
    EXPECT_THROW(train::parse_duration_or_off("1e20s"), Error);
    for (const double v : {-1.0, 0.5, 2e8, std::numeric_limits<double>::infinity(), std::nan("")})
        EXPECT_THROW(train::check_duration_seconds(v, "time_budget"), Error) << v;
}

struct DataFile {
    TempDir tmp{"data"};
    fs::path dir = tmp.path();
    std::string path;
    explicit DataFile(const std::string& text) {
        path = (dir / "fra.txt").string();
        std::ofstream(path) << text;
    }
};

std::string corpus(int n, const std::string& extra = "") {
    std::string s;
    for (int i = 0; i < n; ++i)
        s += "I see " + std::to_string(i % 7) + " cats.\tJe vois " + std::to_string(i % 7) + " chats.\n";
    return s + extra;
}

TEST(TranslationData, SmallCorpusSplitsDisjointAndCountsMalformedLines) {
    DataFile f(corpus(50, "no tab here\n"));
    train::DataConfig c;
    c.path = f.path;
    c.num_steps = 6;
    const auto d = train::load_translation_data(c);
    EXPECT_EQ(d.malformed, 1);
    EXPECT_EQ(d.pairs, 50);
    EXPECT_EQ(d.valid.n, 5);  // 10 % each for a small corpus
    EXPECT_EQ(d.test.n, 5);
    EXPECT_EQ(d.train.n, 40);
    EXPECT_EQ(int64_t(d.test_src.size()), d.test.n);
    EXPECT_EQ(d.test_ref[0].back(), ".");  // full references, no <eos>
    EXPECT_NE(d.summary.find("malformed"), std::string::npos) << d.summary;
    EXPECT_EQ(d.src_vocab.tokens()[0], "<unk>");
    EXPECT_EQ(d.tgt_vocab.pad(), 1);
    c.strict = true;
    EXPECT_THROW(train::load_translation_data(c), Error);
}

TEST(TranslationData, FiltersKeepShortPairs) {
    DataFile f(corpus(30) + "This sentence is much too long for the filter.\tCette phrase est trop longue.\n");
    train::DataConfig c;
    c.path = f.path;
    c.max_src_tokens = 4;  // "i see 3 cats ." is 5 tokens
    EXPECT_THROW(train::load_translation_data(c), Error);  // nothing left
    c.max_src_tokens = 5;
    c.max_pairs = 20;
    const auto d = train::load_translation_data(c);
    EXPECT_EQ(d.pairs, 20);
}

TEST(TranslationData, MissingFileNamesTheDownloadAddress) {
    train::DataConfig c;
    c.path = "/nonexistent/fra-eng.zip";
    try {
        train::load_translation_data(c);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("d2l-data.s3-accelerate.amazonaws.com"), std::string::npos) << e.what();
    }
}


// ---- data fingerprint (config.json data.fingerprint; eval and --resume refuse other data)

TEST(TranslationData, FingerprintIsFnv1a64OverThePairsInOrder) {
    // FNV-1a 64 of "Go.\tVa !\nHi.\tSalut.\n" (Python: h = 0xcbf29ce484222325; per byte
    // h = ((h ^ b) * 0x100000001b3) mod 2^64); the empty input gives the offset basis.
    const auto fp = train::fingerprint_pairs({"Go.", "Hi."}, {"Va !", "Salut."});
    EXPECT_EQ(fp.pairs, 2);
    EXPECT_EQ(train::fingerprint_hex(fp.fnv1a64), "b48aca3731547271");
    EXPECT_EQ(train::fingerprint_hex(train::fingerprint_pairs({}, {}).fnv1a64), "cbf29ce484222325");
    // order and the pairing of the sides count
    EXPECT_NE(train::fingerprint_pairs({"Hi.", "Go."}, {"Salut.", "Va !"}).fnv1a64, fp.fnv1a64);
    EXPECT_NE(train::fingerprint_pairs({"Go.", "Hi."}, {"Salut.", "Va !"}).fnv1a64, fp.fnv1a64);
    EXPECT_NE(train::fingerprint_pairs({"Go.\tVa", "Hi."}, {"!", "Salut."}).fnv1a64, fp.fnv1a64);
    EXPECT_THROW(train::fingerprint_pairs({"Go."}, {}), Error);
}

TEST(TranslationData, FingerprintCountsThePairsAfterTheFilters) {
    std::string rev;  // corpus(50) with its lines in reverse order
    {
        std::vector<std::string> lines;
        std::string c = corpus(50), line;
        for (char ch : c) {
            line += ch;
            if (ch == '\n') lines.push_back(std::move(line)), line.clear();
        }
        for (auto it = lines.rbegin(); it != lines.rend(); ++it) rev += *it;
    }
    train::DataConfig c;
    c.num_steps = 6;
    train::DataFingerprint fwd, bwd;
    {
        DataFile f(corpus(50));
        c.path = f.path;
        const auto d = train::load_translation_data(c);
        fwd = d.fingerprint;
        EXPECT_EQ(fwd.pairs, 50);
        c.max_pairs = 20;
        EXPECT_EQ(train::load_translation_data(c).fingerprint.pairs, 20);
        c.max_pairs = 0;
    }
    {
        DataFile f(rev);
        c.path = f.path;
        const auto d = train::load_translation_data(c);
        bwd = d.fingerprint;
        // the same pairs and (here) the same vocabularies, but another order: another split
        EXPECT_EQ(bwd.pairs, 50);
        EXPECT_NE(bwd.fnv1a64, fwd.fnv1a64);
    }
}

TEST(RunConfig, FingerprintRoundTripsAndOlderFilesHaveNone) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = 77, c.model.tgt_vocab_size = 88;
    nlohmann::json j = train::to_json(c);
    EXPECT_FALSE(j["data"].contains("fingerprint"));  // none known: none written
    EXPECT_FALSE(train::run_config_from_json(j).data.fingerprint.known());
    c.data.fingerprint = {40594, 0x00ff00ff00ff00ffULL};
    j = train::to_json(c);
    EXPECT_EQ(j["data"]["fingerprint"]["pairs"], 40594);
    EXPECT_EQ(j["data"]["fingerprint"]["fnv1a64"], "00ff00ff00ff00ff");
    const auto r = train::run_config_from_json(nlohmann::json::parse(j.dump()));
    EXPECT_EQ(r.data.fingerprint.pairs, 40594);
    EXPECT_EQ(r.data.fingerprint.fnv1a64, 0x00ff00ff00ff00ffULL);
    auto bad = j;
    bad["data"]["fingerprint"]["fnv1a64"] = "xyz";
    EXPECT_TRUE(has(error_of([&] { train::run_config_from_json(bad); }), "'data.fingerprint.fnv1a64'"));
    bad = j;
    bad["data"]["fingerprint"]["pairs"] = 0;
    EXPECT_TRUE(has(error_of([&] { train::run_config_from_json(bad); }), "'data.fingerprint.pairs' is 0"));
    bad = j;
    bad["data"]["fingerprint"] = 5;
    EXPECT_TRUE(has(error_of([&] { train::run_config_from_json(bad); }), "'data.fingerprint' must be an object"));
}

TEST(ModelDir, OtherDataThanTheRecordedFingerprintIsRefusedNamingFileFolderAndDifference) {
    auto cfg = train::preset_config("demo");
    train::TranslationData d;
    d.origin = "/data/other.txt";
    d.fingerprint = {100, 0x1234};
    // an older config.json: no fingerprint, no check
    EXPECT_FALSE(train::check_data_fingerprint("runs/m", cfg, d));
    cfg.data.fingerprint = {100, 0x1234};
    EXPECT_TRUE(train::check_data_fingerprint("runs/m", cfg, d));
    cfg.data.fingerprint = {90, 0x1234};
    std::string e = error_of([&] { train::check_data_fingerprint("runs/m", cfg, d); });
    for (const char* part : {"'/data/other.txt'", "'runs/m'", "gives 100 pairs", "records 90", "--data"})
        EXPECT_TRUE(has(e, part)) << part << " not in: " << e;
    cfg.data.fingerprint = {100, 0x4321};
    e = error_of([&] { train::check_data_fingerprint("runs/m", cfg, d); });
    for (const char* part : {"'/data/other.txt'", "'runs/m'", "same number of pairs (100)", "contents or order",
                             "0000000000001234", "0000000000004321", "held-out"})
        EXPECT_TRUE(has(e, part)) << part << " not in: " << e;
}

// config.json as written (to_json(...).dump(2) + "\n", model_dir.cpp) for every preset and model
// kind, as a preset gives it and with every field that is written only when set (data files,
// fingerprint, applied record, subword files, vocabulary sizes), byte for byte against files made by
// the writer before the field table (issue 43): the table must write what the hand-written code did.
train::RunConfig filled_config(train::RunConfig c, int variant) {
    c.model.src_vocab_size = 4321;
    c.model.tgt_vocab_size = c.data.shared_vocab ? 4321 : 5678;
    c.data.src_file = "corpus/train.en", c.data.tgt_file = "corpus/train.fr";
    c.data.src_lang = "en-GB", c.data.tgt_lang = "fr";
    c.data.fingerprint = {1234, 0x0123456789abcdefULL};
    auto& r = c.data.applied;
    r.pipeline = "anchor: seeded shuffle split (seed 0)";
    r.pairs_read = 2000, r.malformed = 3, r.source_too_long = 11, r.target_too_long = 12, r.beyond_max_pairs = 13;
    r.over_length_cap = 14, r.held_out_duplicates = 15, r.concatenated = 16, r.pairs_kept = 1900;
    r.train = 1700, r.valid = 100, r.test = 100;
    if (c.data.subword == data::SubwordKind::none) {  // separate SentencePiece models
        c.data.subword = variant % 2 ? data::SubwordKind::unigram : data::SubwordKind::bpe;
        c.data.subword_vocab_size = 3000;
    }
    c.model.pe_position_zero_at_inference = variant % 2 == 1;
    c.bahdanau.init = variant % 3 == 0 ? models::BahdanauInit::pytorch : models::BahdanauInit::d2l_zh;
    c.train.seed = 42, c.train.max_steps = 999, c.train.loss_on_padding = true;
    c.train.schedule = optim::LrSchedule::warmup_linear_decay, c.train.warmup_steps = 77;
    c.train.precision = MatmulPrecision::bf16;
    c.train.time_budget_s = 90.5, c.train.val_every_s = 30;
    c.log_every = 7, c.keep_checkpoints = 3, c.world_size = 2;
    c.decode.beam = 5, c.decode.length_penalty = 0.75;
    return c;
}

TEST(RunConfig, ToJsonIsByteIdenticalToTheGoldenFiles) {
    const fs::path dir = fs::path(QKV_FIXTURE_DIR) / "run_config";
    int variant = 0;
    for (const auto& preset : train::preset_names())
        for (const auto kind : {train::ModelKind::transformer, train::ModelKind::bahdanau}) {
            const auto c = train::preset_config(preset, kind);
            for (const auto& [suffix, cfg] :
                 {std::pair<std::string, train::RunConfig>{"", c}, {"_filled", filled_config(c, variant++)}}) {
                const fs::path file = dir / (preset + "_" + train::model_kind_name(kind) + suffix + ".json");
                const std::string written = train::to_json(cfg).dump(2) + "\n";
                if (std::getenv("QKV_WRITE_RUN_CONFIG_GOLDEN")) {  // a new key: docs/architecture.md
                    std::ofstream(file, std::ios::binary) << written;
                    ADD_FAILURE() << "wrote " << file << " (QKV_WRITE_RUN_CONFIG_GOLDEN): check its diff";
                    continue;
                }
                std::ifstream in(file, std::ios::binary);
                ASSERT_TRUE(in) << file << " is missing";
                const std::string golden((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                EXPECT_EQ(written, golden) << file;
                // and a trained run's file reads back to itself (the goldens stay loadable)
                if (!suffix.empty()) {
                    EXPECT_EQ(train::to_json(train::run_config_from_json(nlohmann::json::parse(golden))).dump(2) + "\n",
                              golden) << file;
                }
            }
        }
}

// The field table (runtime/run_config_fields.h) is consistent: a row added without its uses fails here
// (config.json) or in python/tests/test_train.py (the flag on `qkv train`, the qkv.train keyword).
TEST(ConfigFields, RowsAreWellFormed) {
    std::set<std::string> keys, flags, keywords;
    for (const auto& f : runtime::config_fields()) {
        EXPECT_TRUE(keys.insert(f.key).second) << f.key << " twice";
        EXPECT_EQ(f.type == runtime::FieldType::choice, f.choice != nullptr) << f.key;
        EXPECT_EQ(f.type == runtime::FieldType::choice, f.member == nullptr) << f.key;
        EXPECT_EQ(&runtime::config_field(f.key), &f);
        if (*f.flag) {
            EXPECT_TRUE(flags.insert(runtime::field_flag_name(f)).second) << f.flag << " twice";
            EXPECT_EQ(runtime::config_field_by_flag(runtime::field_flag_name(f)), &f);
            EXPECT_TRUE(*f.help && *f.group) << f.key << ": a flag needs its help text and --help group";
            const auto r = f.flag_range.value_or(f.range);
            if (f.type == runtime::FieldType::integer) {
                EXPECT_TRUE(std::isfinite(r.lo) && std::isfinite(r.hi)) << f.key << ": an integer flag needs bounds";
            }
        }
        std::istringstream names(f.python);
        for (std::string k; names >> k;) {
            EXPECT_TRUE(keywords.insert(k).second) << k << " twice";
            EXPECT_EQ(runtime::config_field_by_python(k), &f) << k;
        }
        if (f.scope == runtime::FieldScope::bahdanau && *f.flag) {
            EXPECT_TRUE(*f.other_lacks) << f.key << ": check_architecture_overrides words what the Transformer lacks";
        }
    }
    EXPECT_THROW(runtime::config_field("train.no_such_key"), Error);
    train::RunOverrides o;
    EXPECT_THROW(o.set("train.no_such_key", 1), Error);
    EXPECT_THROW(o.has("train.lrr"), Error);
    EXPECT_THROW(o.set("train.lr", "fast"), Error);  // a value of another type
    EXPECT_THROW(o.set("train.schedule", "cosine"), Error);  // a choice's unknown name
}

/// A valid configuration of `kind` with the vocabulary sizes known (a subword run, so that
/// data.subword_vocab_size is written and checked).
train::RunConfig full_config(train::ModelKind kind) {
    if (kind == train::ModelKind::lm) {  // the language model: its preset, the vocabulary known
        auto c = train::preset_config("lm-tiny", kind);
        c.lm.vocab_size = 30;
        c.data.path = "text.txt";
        return c;
    }
    auto c = train::preset_config("demo", kind);
    c.model.src_vocab_size = c.model.tgt_vocab_size = 500;
    c.data.subword = data::SubwordKind::bpe;
    c.data.src_file = "a.en", c.data.tgt_file = "a.fr";
    c.train.warmup_steps = 10;  // so that any schedule is valid
    return c;
}

/// Values to try for a row: in range and different from `now` (the first that the rules between
/// fields accept is used).
std::vector<runtime::FieldValue> candidates(const runtime::ConfigField& f, const runtime::FieldValue& now) {
    using runtime::FieldType;
    const auto& r = f.range;
    std::vector<runtime::FieldValue> out;
    switch (f.type) {
        case FieldType::integer: {
            const int64_t v = std::get<int64_t>(now);
            for (int64_t x : {v + 1, v * 2, v - 1, v / 2, int64_t(std::isinf(r.lo) ? 0 : r.lo) + 2})
                if (x != v && runtime::field_in_range(x, r)) out.push_back(x);
            break;
        }
        case FieldType::unsigned_integer: out.push_back(std::get<uint64_t>(now) + 12345); break;
        case FieldType::real:
        case FieldType::duration: {
            const double v = std::get<double>(now);
            for (double x : {v * 0.5, v + 0.25, std::isinf(r.hi) ? v + 1 : r.hi * 0.75, 30.0})
                if (x != v && runtime::field_in_range(x, r)) out.push_back(x);
            break;
        }
        case FieldType::boolean: out.push_back(!std::get<bool>(now)); break;
        case FieldType::text: out.push_back(std::get<std::string>(now) == "de" ? std::string("nl") : std::string("de"));
            break;
        case FieldType::choice:
            for (const auto& n : f.choice->names)
                if (n != std::get<std::string>(now)) out.push_back(n);
            break;
    }
    return out;
}

TEST(ConfigFields, EveryRowRoundTripsThroughConfigJson) {
    for (const auto kind : {train::ModelKind::transformer, train::ModelKind::bahdanau, train::ModelKind::lm}) {
        const train::RunConfig base = full_config(kind);
        ASSERT_NO_THROW(base.validate());
        for (const auto& f : runtime::config_fields()) {
            // (model.architecture changes which rows there are: the golden files cover both)
            if (!runtime::field_in_scope(f, kind) || std::string(f.key) == "model.architecture" ||
                std::string(f.key) == "model_kind")
                continue;
            bool tried = false;
            for (const auto& v : candidates(f, runtime::get_field(f, base))) {
                train::RunConfig c = base;
                runtime::set_field(f, c, v);
                if (std::string(f.key) == "data.src_file") c.data.tgt_file = "b.fr";
                if (std::string(f.key) == "data.tgt_file") c.data.src_file = "b.en";
                try {
                    c.validate();
                } catch (const Error&) {
                    continue;  // a rule between fields (heads dividing the width, ...): the next value
                }
                tried = true;
                const nlohmann::json j = train::to_json(c);
                const auto r = train::run_config_from_json(nlohmann::json::parse(j.dump()));
                EXPECT_EQ(runtime::get_field(f, r), v) << f.key << " = " << runtime::field_value_text(v)
                                                       << " did not come back from config.json";
                EXPECT_EQ(train::to_json(r), j) << f.key;
                break;
            }
            EXPECT_TRUE(tried) << f.key << ": no value to try (" << train::model_kind_name(kind) << ")";
        }
    }
}

TEST(ConfigFields, RangesAreEnforcedAtBothEnds) {
    int checked = 0;
    for (const auto kind : {train::ModelKind::transformer, train::ModelKind::bahdanau, train::ModelKind::lm})
        for (const auto& f : runtime::config_fields()) {
            if (!runtime::field_in_scope(f, kind)) continue;
            const auto& r = f.range;
            for (const bool low : {true, false}) {
                const double bound = low ? r.lo : r.hi;
                if (std::isinf(bound)) continue;
                runtime::FieldValue bad;
                if (f.type == runtime::FieldType::integer) bad = int64_t(bound) + (low ? -1 : 1);
                else if ((low && r.lo_open) || (!low && r.hi_open)) bad = bound;
                else bad = std::nextafter(bound, low ? -1e300 : 1e300);
                train::RunConfig c = full_config(kind);
                runtime::set_field(f, c, bad);
                const std::string e = error_of([&] { c.validate(); });
                EXPECT_TRUE(has(e, std::string("'") + f.key + "' is " + runtime::field_value_text(bad)) &&
                            has(e, runtime::field_range_text(f.type, r)))
                    << f.key << (low ? " below " : " above ") << "its range: " << e;
                // and through config.json
                nlohmann::json j = train::to_json(full_config(kind));
                (runtime::field_section(f).empty() ? j : j[runtime::field_section(f)])[runtime::field_name(f)] =
                    std::visit([](const auto& x) { return nlohmann::json(x); }, bad);
                EXPECT_THROW(train::run_config_from_json(j), Error) << f.key;
                ++checked;
            }
        }
    EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace qkv::test
