// Model files and training checkpoints: round trips give identical parameters and translations;
// truncated, corrupted, foreign or mismatched files give clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/decode/greedy.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// How many times `part` occurs in `s` (non-overlapping).
int occurrences(const std::string& s, const std::string& part) {
    int n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + part.size())) ++n;
    return n;
}

/// Replaces the first `was` in the file's bytes by `now` (the same length keeps a safetensors
/// header valid); false when `was` is not there.
bool replace_bytes(const std::string& path, const std::string& was, const std::string& now) {
    std::ostringstream ss;
    ss << std::ifstream(path, std::ios::binary).rdbuf();
    std::string bytes = ss.str();
    const size_t at = bytes.find(was);
    if (at == std::string::npos) return false;
    bytes.replace(at, was.size(), now);
    std::ofstream(path, std::ios::binary) << bytes;
    return true;
}

struct Trained {
    TinyCorpus c = tiny_corpus();
    std::unique_ptr<models::Transformer> m;
    std::unique_ptr<optim::Adam> adam;
    Trained() {
        manual_seed(0);
        m = std::make_unique<models::Transformer>(tiny_config(c));
        train::TrainOptions o;
        o.epochs = 30;
        o.batch_size = 8;
        o.lr = 0.005;
        train::TrainRuntime rt;
        rt.progress = false;
        rt.log = nullptr;
        train::Trainer(*m, c.arrays, c.arrays, c.tgt_vocab.pad(), o, rt).fit();
        // An optimizer with state, for checkpoint tests.
        adam = std::make_unique<optim::Adam>(m->parameters(), 1e-3);
        for (auto& p : m->parameters()) p.set_grad(ones(p.shape()));
        adam->step();
    }
    std::vector<std::vector<int64_t>> translate(models::Transformer& model) const {
        decode::GreedyOptions g;
        g.bos = c.tgt_vocab.bos(), g.eos = c.tgt_vocab.eos(), g.max_len = 10;
        return decode::greedy_decode(model, from_vector(c.arrays.src, {c.arrays.n, c.arrays.num_steps}),
                                     from_vector(c.arrays.src_valid_len, {c.arrays.n}), g);
    }
};

void expect_same_params(const nn::Module& a, const nn::Module& b) {
    auto pa = a.named_parameters(), pb = b.named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
        EXPECT_EQ(pa[i].first, pb[i].first);
        EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
    }
}

TEST(Checkpoint, ModelFileRoundTripGivesIdenticalTranslations) {
    Trained t;
    TempDir d;
    train::save_model(d / "model.safetensors", *t.m, {{"note", "test"}});
    manual_seed(123);  // a different init, overwritten by the load
    models::Transformer fresh(tiny_config(t.c));
    train::load_model(d / "model.safetensors", fresh);
    expect_same_params(*t.m, fresh);
    fresh.eval();
    t.m->eval();
    EXPECT_EQ(t.translate(fresh), t.translate(*t.m));
    // PyTorch names, F32, "format": "pt" for safetensors.torch.
    io::SafeTensorsFile f(d / "model.safetensors");
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("note"), "test");
    EXPECT_EQ(f.info("decoder.dense.weight").dtype, "F32");
    EXPECT_EQ(f.names().front(), "encoder.embedding.weight");
}

TEST(Checkpoint, NonFiniteWeightsAreRefusedNamingTheParameter) {
    // A model file with a valid checksum over a NaN (or inf) weight: translating with it gave
    // <unk>s and exit 0. Loading must say which parameter is broken.
    Trained t;
    TempDir d;
    for (float bad : {NAN, INFINITY}) {
        models::Transformer broken(tiny_config(t.c));
        Tensor w = broken.named_parameters().back().second;
        const std::string name = broken.named_parameters().back().first;
        w.data<float>()[3] = bad;
        train::save_model(d / "model.safetensors", broken);
        models::Transformer fresh(tiny_config(t.c));
        const std::string msg = error_of([&] { train::load_model(d / "model.safetensors", fresh); });
        EXPECT_TRUE(contains(msg, "model file '" + d / "model.safetensors" + "': parameter '" + name + "' holds"))
            << msg;
        EXPECT_TRUE(contains(msg, "at element 3")) << msg;
        train::TrainingProgress prog;
        train::save_checkpoint(d / "checkpoint.safetensors", broken, *t.adam, prog);
        const std::string cmsg =
            error_of([&] { train::load_checkpoint(d / "checkpoint.safetensors", fresh, nullptr); });
        EXPECT_TRUE(contains(cmsg, "parameter '" + name + "' holds")) << cmsg;
    }
}

TEST(Checkpoint, TrainingCheckpointRoundTrip) {
    Trained t;
    TempDir d;
    train::TrainingProgress p;
    p.epoch = 3, p.batch = 2, p.step = 17, p.rng_seed = 5, p.rng_offset = 123456789012ULL;
    p.train_seconds = 7261.123456789012;  // more digits than printing with 6 significant keeps
    p.pending_records = R"([{"kind":"epoch","step":17,"val_loss":null}])";
    p.epoch_sums  = {0.1 + 0.2 + 1.0 / 3.0, 0.123456789012345678, 2, 37};  // exact, not printed
    p.log_sums    = {5.0e-17, 1e300, 1, 9};
    p.window_sums = {42.0 / 11.0, 0, 11, 0};
    train::save_checkpoint(d / "c.safetensors", *t.m, *t.adam, p, {{"qkv.config", "{}"}});
    manual_seed(9);
    models::Transformer fresh(tiny_config(t.c));
    optim::Adam adam2(fresh.parameters(), 1e-3);
    const train::TrainingProgress q = train::load_checkpoint(d / "c.safetensors", fresh, &adam2);
    EXPECT_EQ(q.epoch, 3);
    EXPECT_EQ(q.batch, 2);
    EXPECT_EQ(q.step, 17);
    EXPECT_EQ(q.rng_seed, 5u);
    EXPECT_EQ(q.rng_offset, 123456789012ULL);
    EXPECT_EQ(q.train_seconds, 7261.123456789012);  // exact: a resumed --time-budget run loses nothing
    EXPECT_EQ(q.pending_records, p.pending_records);
    EXPECT_TRUE(q.has_running_sums);
    EXPECT_EQ(q.epoch_sums, p.epoch_sums);  // bit for bit
    EXPECT_EQ(q.log_sums, p.log_sums);
    EXPECT_EQ(q.window_sums, p.window_sums);
    expect_same_params(*t.m, fresh);
    auto s1 = t.adam->state_dict(), s2 = adam2.state_dict();
    ASSERT_EQ(s1.size(), s2.size());
    for (auto& [k, v] : s1) {
        ASSERT_TRUE(s2.count(k)) << k;
        if (v.dtype() == DType::f32) EXPECT_EQ(v.to_vector<float>(), s2[k].to_vector<float>()) << k;
        else EXPECT_EQ(v.to_vector<int64_t>(), s2[k].to_vector<int64_t>()) << k;
    }
}

/// Rewrites the checkpoint at `path` with `edit` applied to its metadata (the tensors as they were).
void edit_metadata(const std::string& path, const std::function<void(std::map<std::string, std::string>&)>& edit) {
    std::map<std::string, std::string> meta;
    std::vector<std::vector<uint8_t>> data;
    std::vector<io::SafeTensorView> views;
    {
        io::SafeTensorsFile f(path);
        meta = f.metadata();
        for (const auto& e : f.entries()) {
            auto b = f.bytes(e.name);
            data.emplace_back(b.begin(), b.end());
            views.push_back({e.name, e.dtype, e.shape, nullptr, b.size()});
        }
    }
    for (size_t i = 0; i < views.size(); ++i) views[i].data = data[i].data();
    edit(meta);
    io::write_safetensors(path, views, meta);
}

TEST(Checkpoint, ACheckpointWithoutRunningSumsLoadsWithZeroSums) {
    // Written by a qkv before "qkv.running_sums" (same format version): it loads, with zero sums
    // and has_running_sums false (Trainer::fit then says its first records cover the resumed
    // steps only). A malformed entry is an error naming it.
    Trained t;
    TempDir d;
    const std::string path = d / "c.safetensors";
    train::TrainingProgress p;
    p.step = 4;
    p.epoch_sums = {1.5, 0.25, 2, 30};
    train::save_checkpoint(path, *t.m, *t.adam, p);
    ASSERT_TRUE(train::read_checkpoint_metadata(path).count("qkv.running_sums"));
    edit_metadata(path, [](auto& m) { m.erase("qkv.running_sums"); });
    train::TrainingProgress q = train::read_checkpoint_progress(path);
    EXPECT_EQ(q.step, 4);
    EXPECT_FALSE(q.has_running_sums);
    EXPECT_EQ(q.epoch_sums, train::RunningSums{});
    for (const char* bad : {"{", R"({"epoch":{"loss":1},"log":{},"window":{}})", "[]"}) {
        edit_metadata(path, [&](auto& m) { m["qkv.running_sums"] = bad; });
        const std::string e = error_of([&] { train::read_checkpoint_progress(path); });
        EXPECT_TRUE(contains(e, "'qkv.running_sums'")) << e;
        EXPECT_EQ(e.rfind("checkpoint '" + path + "': ", 0), 0u) << e;
    }
}

TEST(Checkpoint, Bf16ModelFileLoadsWidenedExactly) {
    // A model file whose float tensors are BF16 (e.g. exported from a bf16 run) loads into the
    // f32 model, widened exactly; save_model itself still writes F32 only.
    const TinyCorpus c = tiny_corpus();
    manual_seed(5);
    models::Transformer m(tiny_config(c));
    std::vector<std::pair<std::string, Tensor>> bf;
    for (const auto& [n, t] : m.state_dict()) bf.emplace_back(n, is_floating(t.dtype()) ? t.detach().to(DType::bf16) : t);
    TempDir d;
    io::save_safetensors(d / "bf16.safetensors", bf);
    EXPECT_EQ(io::SafeTensorsFile(d / "bf16.safetensors").info("decoder.dense.weight").dtype, "BF16");
    manual_seed(6);
    models::Transformer fresh(tiny_config(c));
    train::load_model(d / "bf16.safetensors", fresh);
    for (const auto& [n, t] : fresh.named_parameters()) {
        EXPECT_EQ(t.dtype(), DType::f32) << n;
        const Tensor want = m.state_dict().at(n).detach().to(DType::bf16).to(DType::f32);
        EXPECT_EQ(t.to_vector<float>(), want.to_vector<float>()) << n;
    }
    train::save_model(d / "m.safetensors", fresh);
    EXPECT_EQ(io::SafeTensorsFile(d / "m.safetensors").info("decoder.dense.weight").dtype, "F32");
}

TEST(Checkpoint, TruncatedFileGivesAClearError) {
    Trained t;
    TempDir d;
    const std::string path = d / "c.safetensors";
    train::save_checkpoint(path, *t.m, *t.adam, {});
    const auto size = fs::file_size(path);
    for (uintmax_t keep : {uintmax_t(4), uintmax_t(100), size / 2, size - 1}) {
        fs::copy_file(path, d / "t.safetensors", fs::copy_options::overwrite_existing);
        fs::resize_file(d / "t.safetensors", keep);
        models::Transformer fresh(tiny_config(t.c));
        const std::string e = error_of([&] { train::load_checkpoint(d / "t.safetensors", fresh, nullptr); });
        EXPECT_EQ(e.rfind("checkpoint '" + d / "t.safetensors" + "': ", 0), 0u) << e;
        EXPECT_EQ(occurrences(e, d / "t.safetensors"), 1) << e;  // the path once
        // One explanation, with the sizes: not "(file truncated?) (the file is truncated, corrupt ...)".
        EXPECT_TRUE(contains(e, "': the file is truncated: expected ")) << e;
        EXPECT_TRUE(contains(e, " bytes (") && contains(e, "8-byte header length")) << e;
        EXPECT_TRUE(contains(e, ", found " + std::to_string(keep))) << e;
        EXPECT_EQ(occurrences(e, "truncated"), 1) << e;
    }
}

TEST(Checkpoint, CorruptedByteIsCaughtByTheChecksum) {
    Trained t;
    TempDir d;
    const std::string path = d / "m.safetensors";
    train::save_model(path, *t.m);
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-20, std::ios::end);  // inside the last tensor's bytes
        char ch;
        f.read(&ch, 1);
        f.seekp(-20, std::ios::end);
        ch = char(ch ^ 0x10);
        f.write(&ch, 1);
    }
    models::Transformer fresh(tiny_config(t.c));
    const std::string e = error_of([&] { train::load_model(path, fresh); });
    EXPECT_TRUE(contains(e, "checksum mismatch")) << e;
    // One explanation, once: not "the file is corrupt (the file is truncated, corrupt or ...)".
    EXPECT_TRUE(contains(e, ": the file is corrupt (changed after it was written)")) << e;
    EXPECT_FALSE(contains(e, "truncated")) << e;
}

// The checksum covers the tensors, not the metadata. A damaged number there said "stod" (no file,
// no key); JSON text that does not parse is named with the file and key, without the parser's tag.
TEST(Checkpoint, DamagedMetadataValuesNameTheFileAndKey) {
    Trained t;
    TempDir d;
    const std::string path = d / "c.safetensors";
    train::TrainingProgress p;
    p.train_seconds = 12.5;
    train::save_checkpoint(path, *t.m, *t.adam, p);
    ASSERT_TRUE(replace_bytes(path, R"("qkv.train_seconds":"12.5")", R"("qkv.train_seconds":"1x.5")"));
    EXPECT_EQ(error_of([&] { train::read_checkpoint_progress(path); }),
              "checkpoint '" + path + "': metadata entry 'qkv.train_seconds' is not a number: '1x.5'");

    // A counter written as "-1" (same length as "10"): std::stoull alone wrapped it to 2^64 − 1.
    for (const char* bad : {"-1", " 9"}) {
        p.step = 10;
        train::save_checkpoint(path, *t.m, *t.adam, p);
        ASSERT_TRUE(replace_bytes(path, R"("qkv.step":"10")", std::string(R"("qkv.step":")") + bad + "\""));
        EXPECT_EQ(error_of([&] { train::read_checkpoint_progress(path); }),
                  "checkpoint '" + path + "': metadata entry 'qkv.step' is not a number: '" + bad + "'");
    }

    const std::string e =
        error_of([&] { train::parse_metadata_json<nlohmann::json>(path, "qkv.config", R"({"model": )"); });
    EXPECT_EQ(e.rfind("checkpoint '" + path + "': metadata 'qkv.config' is not valid JSON (parse error at line 1", 0),
              0u)
        << e;
    EXPECT_FALSE(contains(e, "[json.exception")) << e;
    const auto records = train::parse_metadata_json<nlohmann::ordered_json>(path, "qkv.pending_records",
                                                                             R"([{"kind":"val","step":3}])");
    EXPECT_EQ(records.dump(), R"([{"kind":"val","step":3}])");  // key order kept
}

TEST(Checkpoint, WrongKindOrShapeOrMissingFileIsReported) {
    Trained t;
    TempDir d;
    train::save_model(d / "m.safetensors", *t.m);
    models::Transformer fresh(tiny_config(t.c));
    std::string e = error_of([&] { train::load_checkpoint(d / "m.safetensors", fresh, nullptr); });
    EXPECT_TRUE(contains(e, "not a qkv training checkpoint")) << e;
    auto other = tiny_config(t.c);
    other.ffn_num_hiddens = 48;
    models::Transformer wrong(other);
    e = error_of([&] { train::load_model(d / "m.safetensors", wrong); });
    EXPECT_TRUE(contains(e, "ffn.dense1.weight")) << e;
    e = error_of([&] { train::load_model(d / "m.safetensors", wrong); });
    EXPECT_EQ(occurrences(e, d / "m.safetensors"), 1) << e;
    e = error_of([&] { train::load_model(d / "nope.safetensors", fresh); });
    EXPECT_EQ(occurrences(e, d / "nope.safetensors"), 1) << e;
    EXPECT_TRUE(contains(e, "nope.safetensors' not found")) << e;
    EXPECT_FALSE(contains(e, "truncated")) << e;  // a missing file is not a damaged one
}

}  // namespace
}  // namespace qkv::test
