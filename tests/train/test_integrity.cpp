// Model-folder integrity and bounds (issue 28): duplicate JSON keys are refused, config.json is
// checked against the configuration stored with the weights, the parameter estimate equals the
// models' own count, a model that cannot fit in memory is refused before allocating, and a
// subword model encodes a bounded number of characters of a word.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/data/subword.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"
#include "support/test_util.h"
#include "runtime/json_error.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Folder {
    fs::path dir = fs::temp_directory_path() / ("qkv_integrity_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Folder() {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~Folder() { fs::remove_all(dir); }
    std::string operator/(const std::string& f) const { return (dir / f).string(); }
};

/// A tiny Transformer model folder as qkv train writes it (config.json, vocabularies,
/// model.safetensors with "qkv.config" in its metadata unless `store_config` is false).
train::RunConfig write_folder(const Folder& f, bool store_config = true) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = c.model.tgt_vocab_size = 5;
    c.model.num_hiddens = 8, c.model.num_heads = 2, c.model.num_blks = 1, c.model.ffn_num_hiddens = 8;
    const data::Vocab v({"<unk>", "<pad>", "<bos>", "<eos>", "a"});
    train::write_run_files(f.dir.string(), c, v, v);
    auto model = train::build_model(c);
    std::map<std::string, std::string> meta;
    if (store_config) meta["qkv.config"] = train::to_json(c).dump();
    train::save_model(f / "model.safetensors", *model, meta);
    return c;
}

void edit_config(const Folder& f, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(f / "config.json"));
    edit(j);
    std::ofstream(f / "config.json") << j.dump(2);
}

TEST(JsonUniqueKeys, DuplicateKeysAreRefusedWithTheirPath) {
    using detail::parse_json_unique_keys;
    EXPECT_EQ(parse_json_unique_keys<nlohmann::json>(R"({"a": {"b": 1}, "c": [{"b": 2}, {"b": 3}]})")["c"][1]["b"], 3);
    EXPECT_TRUE(has(error_of([] { parse_json_unique_keys<nlohmann::json>(R"({"a": 1, "a": 2})"); }), "duplicate key \"a\""));
    EXPECT_TRUE(has(error_of([] { parse_json_unique_keys<nlohmann::json>(R"({"model": {"num_heads": 4, "x": 1, "num_heads": 8}})"); }),
                    "duplicate key \"model.num_heads\""));
    EXPECT_TRUE(has(error_of([] { parse_json_unique_keys<nlohmann::ordered_json>(R"({"r": [1, {"k": 1, "k": 1}]})"); }),
                    "duplicate key \"r[1].k\""));
    // The same key in two different objects is not a duplicate.
    EXPECT_NO_THROW(parse_json_unique_keys<nlohmann::json>(R"({"a": {"k": 1}, "b": {"k": 1}, "k": 0})"));
    EXPECT_THROW(parse_json_unique_keys<nlohmann::json>("{\"a\": "), nlohmann::json::exception);
}

TEST(JsonUniqueKeys, ConfigJsonWithARepeatedKeyIsRefusedNamingFileAndKey) {
    Folder f;
    write_folder(f);
    std::string text;
    {
        std::ifstream in(f / "config.json");
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto at = text.find("\"num_heads\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at, "\"num_heads\": 1, ");  // nlohmann alone would keep the last value silently
    std::ofstream(f / "config.json") << text;
    const std::string e = error_of([&] { train::load_model_dir_config(f.dir.string()); });
    EXPECT_TRUE(has(e, f / "config.json") && has(e, "duplicate key \"model.num_heads\"")) << e;
}

TEST(Integrity, ConfigEditedAfterTrainingIsRefusedNamingEachKey) {
    Folder f;
    const auto c = write_folder(f);
    EXPECT_NO_THROW(train::load_model_dir(f.dir.string()));
    EXPECT_EQ(train::check_architecture(f / "model.safetensors", c).state, train::Consistency::State::consistent);
    // num_heads 2 -> 4 changes no tensor shape (C = 8 either way): without the check the folder
    // would load and translate with another function.
    edit_config(f, [](nlohmann::json& j) {
        j["model"]["num_heads"] = 4;
        j["model"]["pe_position_zero_at_inference"] = true;
    });
    const std::string e = error_of([&] { train::load_model_dir(f.dir.string()); });
    EXPECT_TRUE(has(e, f / "config.json") && has(e, f / "model.safetensors") && has(e, "model.num_heads: 4 vs 2") &&
                has(e, "model.pe_position_zero_at_inference: true vs false") && has(e, "edited"))
        << e;
    // Training-only settings are not the architecture.
    edit_config(f, [](nlohmann::json& j) {
        j["model"]["num_heads"] = 2;
        j["model"]["pe_position_zero_at_inference"] = false;
        j["model"]["dropout"] = 0.5;
        j["train"]["epochs"] = 7;
    });
    EXPECT_NO_THROW(train::load_model_dir(f.dir.string()));
}

TEST(Integrity, FolderWithoutStoredConfigurationStillLoads) {
    Folder f;
    const auto c = write_folder(f, /*store_config=*/false);
    EXPECT_EQ(train::check_architecture(f / "model.safetensors", c).state, train::Consistency::State::no_record);
    ::testing::internal::CaptureStderr();
    EXPECT_NO_THROW(train::load_model_dir(f.dir.string()));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(has(err, "stores no training configuration") && has(err, "not checked")) << err;
}

TEST(Bounds, ParameterEstimateIsTheModelsCount) {
    std::vector<train::RunConfig> cfgs;
    for (bool tie : {false, true})
        for (int64_t blks : {1, 2}) {
            auto c = train::preset_config("demo");
            c.model.src_vocab_size = tie ? 11 : 13;
            c.model.tgt_vocab_size = 11;
            c.model.num_hiddens = 8, c.model.num_heads = 2, c.model.num_blks = blks, c.model.ffn_num_hiddens = 6;
            c.model.tie_weights = tie;
            cfgs.push_back(c);
        }
    for (bool bi : {false, true})
        for (int64_t layers : {1, 3}) {
            auto c = train::preset_config("demo", train::ModelKind::bahdanau);
            c.model.src_vocab_size = 13, c.model.tgt_vocab_size = 11;
            c.bahdanau.embed_size = 6, c.bahdanau.num_hiddens = 8, c.bahdanau.num_layers = layers;
            c.bahdanau.bidirectional = bi;
            cfgs.push_back(c);
        }
    for (const auto& c : cfgs) {
        auto m = train::build_model(c);
        EXPECT_EQ(train::estimate_parameters(c), double(m->num_parameters())) << train::to_json(c).dump();
    }
}

TEST(Bounds, ModelThatCannotFitInMemoryIsRefusedWithTheEstimate) {
    auto c = train::preset_config("demo");
    c.model.src_vocab_size = c.model.tgt_vocab_size = 1'000'000;
    c.model.num_hiddens = 65536, c.model.num_heads = 1, c.model.num_blks = 64, c.model.ffn_num_hiddens = 262144;
    EXPECT_GT(train::estimate_model_bytes(c), 1e13);  // ~7.9e12 parameters: 32 TB of weights
    const std::string e = error_of([&] { train::build_model(c); });
    EXPECT_TRUE(has(e, "would need about") && has(e, "GiB") && has(e, "parameters") && has(e, "memory") &&
                has(e, "model.num_hiddens 65536"))
        << e;
    const std::string t = error_of([&] { train::check_model_fits_memory(c, train::kTrainingCopies, "--num-hiddens"); });
    EXPECT_TRUE(has(t, "× 4 copies") && has(t, "Adam")) << t;
}

TEST(Bounds, CutToCharsKeepsWholeUtf8Sequences) {
    EXPECT_EQ(train::cut_to_chars("abcdef", 3), "abc");
    EXPECT_EQ(train::cut_to_chars("ab", 3), "ab");
    EXPECT_EQ(train::cut_to_chars("été", 2), "ét");  // é is 2 bytes
    EXPECT_EQ(train::cut_to_chars("€€€", 1), "€");
}

}  // namespace
}  // namespace qkv::test
