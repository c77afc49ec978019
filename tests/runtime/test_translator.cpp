// runtime::Translator (issue 43): the model pool lends one copy per caller and loads another only
// when all are lent; reload swaps in a new model only when it loads, and copies of the older one
// are dropped as they come back; translate and score equal the free functions on a model loaded
// by hand. And the one parser of compute types.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/runtime/checkpoint.h"
#include "qkv/runtime/compute_type.h"
#include "qkv/runtime/translator.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::test {
namespace {

/// A tiny Transformer model folder (random weights) as qkv train writes it.
void write_folder(const TempDir& d, uint64_t seed = 1) {
    auto c = runtime::preset_config("demo");
    const data::Vocab v({"<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "."});
    c.model.src_vocab_size = c.model.tgt_vocab_size = v.size();
    c.model.num_hiddens = 8, c.model.num_heads = 2, c.model.num_blks = 1, c.model.ffn_num_hiddens = 8;
    c.data.num_steps = 6, c.decode.max_len = 5;
    runtime::write_run_files(d.path().string(), c, v, v);
    manual_seed(seed);
    auto model = runtime::build_model(c);
    runtime::save_model(d / "model.safetensors", *model, {{"qkv.config", runtime::to_json(c).dump()}});
}

const std::vector<std::vector<std::string>> kSources = {{"a", "b", "."}, {"b", "."}, {"a", "a", "zzz", "."}};

TEST(ComputeType, OneParserForEveryFrontEnd) {
    for (auto t : {runtime::ComputeType::fp32, runtime::ComputeType::bf16, runtime::ComputeType::int8})
        EXPECT_EQ(runtime::parse_compute_type(runtime::compute_type_name(t)), t);
    EXPECT_EQ(error_of([] { runtime::parse_compute_type("fp16"); }),
              "compute_type: expected 'fp32', 'bf16' or 'int8', got 'fp16'");
    EXPECT_EQ(runtime::matmul_precision(runtime::ComputeType::bf16), MatmulPrecision::bf16);
    EXPECT_EQ(runtime::matmul_precision(runtime::ComputeType::int8), MatmulPrecision::fp32);
}

TEST(Translator, TranslatesAsTheFreeFunctionsDo) {
    TempDir d;
    write_folder(d);
    runtime::Translator tr(d.path().string());
    EXPECT_EQ(tr.get(), nullptr);
    EXPECT_EQ(error_of([&] { tr.borrow(); }), "no model loaded");  // names no folder (serve's answers)
    tr.load();
    EXPECT_EQ(tr.generation(), 1);
    runtime::ModelDir m = runtime::load_model_dir(d.path().string());
    runtime::TranslateOptions o;
    o.beam = 2, o.num_hypotheses = 2, o.max_len = 5;
    const auto want = runtime::translate_nbest(m, kSources, o);
    const auto got  = tr.translate(kSources, o);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), 2u);
        for (size_t k = 0; k < got[i].size(); ++k) {
            EXPECT_EQ(got[i][k].words, want[i][k].words);
            EXPECT_EQ(got[i][k].ids, want[i][k].ids);
            EXPECT_EQ(got[i][k].score, want[i][k].score);
        }
    }
    // score: the teacher-forced log-probabilities of each target, <eos> last.
    const auto s = tr.score(kSources, {{"a", "."}, {}, {"b"}});
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].tokens, (std::vector<std::string>{"a", ".", "<eos>"}));
    EXPECT_EQ(s[1].tokens, (std::vector<std::string>{"<eos>"}));
    const auto row = runtime::encode_source_row(m, kSources[0]);
    const auto lp  = runtime::teacher_force(m, row.ids, row.valid_len, {4, 6, 3});
    EXPECT_EQ(s[0].log_probs, lp);
    EXPECT_DOUBLE_EQ(s[0].sum, lp[0] + lp[1] + lp[2]);
    EXPECT_LT(s[0].sum, 0);
    EXPECT_EQ(error_of([&] { tr.score(kSources, {}); }), "score: 3 sources but 0 targets");
}

TEST(Translator, LendsOneCopyPerCallerAndLoadsMoreOnlyWhenAllAreLent) {
    TempDir d;
    write_folder(d);
    runtime::Translator tr(d.path().string());
    tr.load();
    EXPECT_EQ(tr.copies(), 1);
    {
        auto a = tr.borrow();
        auto b = tr.borrow();  // the first is lent: one more copy
        EXPECT_NE(&*a, &*b);
        EXPECT_EQ(tr.copies(), 2);
    }
    {
        auto a = tr.borrow();
        auto b = tr.borrow();  // both came back: no load
        EXPECT_EQ(tr.copies(), 2);
    }
    // Threads translating at once each get their own copy and the serial result.
    runtime::TranslateOptions o;
    const auto want = tr.translate(kSources, o);
    std::vector<std::vector<std::vector<runtime::Translation>>> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = tr.translate(kSources, o); });
    for (auto& t : threads) t.join();
    for (const auto& g : got)
        for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(g[i].front().words, want[i].front().words);
    EXPECT_LE(tr.copies(), 4);
}

TEST(Translator, ReloadKeepsTheServedModelWhenTheFolderIsDamaged) {
    TempDir d;
    write_folder(d);
    runtime::Translator tr(d.path().string());
    EXPECT_EQ(tr.reload(), "");
    const auto first = tr.get();
    auto old_lease   = tr.borrow();  // a call in flight on the first model
    const std::string config = [&] {
        std::ifstream f(d / "config.json");
        return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    std::ofstream(d / "config.json") << "{";
    const std::string err = tr.reload();
    EXPECT_NE(err.find("config.json"), std::string::npos) << err;
    EXPECT_EQ(tr.generation(), 1);
    EXPECT_EQ(tr.get(), first);
    std::ofstream(d / "config.json") << config;
    EXPECT_EQ(tr.reload(), "");
    EXPECT_EQ(tr.generation(), 2);
    EXPECT_NE(tr.get(), first);
    EXPECT_EQ(tr.copies(), 1);
    { auto drop = std::move(old_lease); }  // the older model's copy comes back: dropped
    auto a = tr.borrow();
    EXPECT_EQ(&*a, tr.get().get());  // the one copy of the new model, not the old one
    EXPECT_EQ(tr.copies(), 1);
}

}  // namespace
}  // namespace qkv::test
