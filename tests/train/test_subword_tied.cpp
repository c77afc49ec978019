// Subword vocabularies and weight tying end to end: a tiny shared-BPE Transformer with tied
// embeddings/output memorises eight pairs and translates them back to words; the tied gradient is
// the sum of the three untied ones; tying survives optimizer steps and model files; model
// folders with spm.model translate identically after loading; load_translation_data with
// subwords; the bad combinations are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "support/temp_dir.h"
#include "support/test_util.h"
#include "qkv/core/generator.h"
#include "qkv/data/subword.h"
#include "qkv/ops/elementwise.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/atomic_file.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

/// The tiny corpus in shared BPE pieces (60 pieces learned from its 16 sentences).
struct TinyPieces {
    TinyCorpus words;
    std::shared_ptr<const data::SubwordModel> sp;
    data::Vocab vocab;
    data::NmtArrays arrays;
};

TinyPieces tiny_pieces(int64_t num_steps = 16) {
    TinyPieces t;
    t.words = tiny_corpus();
    std::vector<std::string> lines;
    for (const auto* side : {&t.words.src, &t.words.tgt})
        for (const auto& s : *side) lines.push_back(train::join_tokens(s));
    data::SubwordOptions o;
    o.kind = data::SubwordKind::bpe;
    o.vocab_size = 60;
    t.sp = std::make_shared<const data::SubwordModel>(data::SubwordModel::train(lines, o));
    t.vocab = t.sp->vocab();
    t.arrays = data::build_nmt_arrays(t.sp->encode(t.words.src), t.sp->encode(t.words.tgt), t.vocab, t.vocab,
                                      num_steps);
    return t;
}

models::TransformerConfig tied_config(const TinyPieces& t) {
    models::TransformerConfig cfg = tiny_config(t.words);
    cfg.src_vocab_size = cfg.tgt_vocab_size = t.vocab.size();
    cfg.tie_weights = true;
    return cfg;
}

train::TrainRuntime quiet() {
    train::TrainRuntime rt;
    rt.progress = false;
    rt.log = nullptr;
    return rt;
}

const char* kTiedNames[] = {"encoder.embedding.weight", "decoder.embedding.weight", "decoder.dense.weight"};

void expect_tied(const models::Transformer& m) {
    const Tensor w = m.encoder->embedding->weight;
    EXPECT_TRUE(m.decoder->embedding->weight.is_same(w));
    EXPECT_TRUE(m.decoder->dense->weight.is_same(w));
    const auto sd = m.state_dict();
    for (const char* n : kTiedNames) {
        ASSERT_TRUE(sd.count(n)) << n;
        EXPECT_TRUE(sd.at(n).is_same(w)) << n;
    }
}

TEST(WeightTying, OneParameterUnderThreeNames) {
    const TinyPieces t = tiny_pieces();
    manual_seed(0);
    models::Transformer tied(tied_config(t));
    models::TransformerConfig ucfg = tied_config(t);
    ucfg.tie_weights = false;
    manual_seed(0);
    models::Transformer untied(ucfg);
    expect_tied(tied);
    // named_parameters lists it once (PyTorch's remove_duplicate), under its first name
    int count = 0;
    for (auto& [n, p] : tied.named_parameters()) count += p.is_same(tied.encoder->embedding->weight);
    EXPECT_EQ(count, 1);
    EXPECT_EQ(tied.named_parameters().size() + 2, untied.named_parameters().size());
    const int64_t VC = t.vocab.size() * 32;
    EXPECT_EQ(tied.num_parameters() + 2 * VC, untied.num_parameters());
    EXPECT_EQ(tied.state_dict().size(), untied.state_dict().size());
    // init N(0, 1/C): sample std within 15% of 1/√32 over V·C = 1,920 draws (the standard error of
    // a sample std is σ/√(2n) ≈ 1.6%, so 15% is ~9 standard errors)
    const auto w = tied.encoder->embedding->weight.to_vector<float>();
    double ss = 0;
    for (float x : w) ss += double(x) * x;
    EXPECT_NEAR(std::sqrt(ss / double(w.size())), 1.0 / std::sqrt(32.0), 0.15 / std::sqrt(32.0));
}

TEST(WeightTying, GradientIsTheSumOfTheUntiedGradients) {
    const TinyPieces t = tiny_pieces();
    manual_seed(1);
    models::Transformer tied(tied_config(t));
    models::TransformerConfig ucfg = tied_config(t);
    ucfg.tie_weights = false;
    models::Transformer untied(ucfg);
    untied.load_state_dict(tied.state_dict());  // all three names carry the tied values
    const auto& a = t.arrays;
    const Tensor src = from_vector(a.src, {a.n, a.num_steps}), svl = from_vector(a.src_valid_len, {a.n});
    const Tensor dec = from_vector(a.dec_input, {a.n, a.num_steps}), lab = from_vector(a.label, {a.n, a.num_steps});
    train::Seq2SeqLossOptions lo;
    lo.pad = t.vocab.pad();
    train::seq2seq_loss(tied, src, svl, dec, lab, lo).loss.backward();
    train::seq2seq_loss(untied, src, svl, dec, lab, lo).loss.backward();
    const auto g = tied.encoder->embedding->weight.grad().to_vector<float>();
    const auto g1 = untied.encoder->embedding->weight.grad().to_vector<float>();
    const auto g2 = untied.decoder->embedding->weight.grad().to_vector<float>();
    const auto g3 = untied.decoder->dense->weight.grad().to_vector<float>();
    double gmax = 0, diff = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        gmax = std::max(gmax, std::abs(double(g[i])));
        diff = std::max(diff, std::abs(double(g[i]) - (double(g1[i]) + g2[i] + g3[i])));
    }
    ASSERT_GT(gmax, 0.0);
    // float32 sums of the same terms in another order: 1e-5 of the largest entry
    EXPECT_LE(diff, 1e-5 * gmax);
}

TEST(WeightTying, TinyBpeTiedModelMemorisesEightPairsAndStaysTied) {
    test::TempDir dir;
    const TinyPieces t = tiny_pieces();
    manual_seed(0);
    auto model = std::make_shared<models::Transformer>(tied_config(t));
    train::TrainOptions o;
    o.epochs = 150;
    o.batch_size = 8;
    o.lr = 0.005;
    train::Trainer tr(*model, t.arrays, t.arrays, t.vocab.pad(), o, quiet());
    const train::TrainResult r = tr.fit();
    EXPECT_EQ(r.steps, 150);
    EXPECT_LT(r.epochs.back().val_loss, 0.05);
    expect_tied(*model);  // Adam updated one tensor, still shared by the three modules

    // a model folder with spm.model, loaded back: identical translations, all eight exact (words)
    train::RunConfig cfg;
    cfg.data.subword = data::SubwordKind::bpe;
    cfg.data.subword_vocab_size = 60;
    cfg.data.shared_vocab = true;
    cfg.data.num_steps = 16;
    cfg.model = tied_config(t);
    cfg.decode.max_len = 20;
    train::SubwordModels sw{t.sp, t.sp};
    train::write_run_files(dir / "run", cfg, t.vocab, t.vocab, sw);
    train::save_model(dir / "run/model.safetensors", *model);
    ASSERT_TRUE(std::filesystem::exists(dir / "run/spm.model"));

    train::ModelDir mem;
    mem.config = cfg;
    mem.src_vocab = mem.tgt_vocab = t.vocab;
    mem.subwords = sw;
    mem.model = model;
    train::ModelDir disk = train::load_model_dir(dir / "run");
    ASSERT_TRUE(disk.subwords.active());
    EXPECT_EQ(disk.subwords.src, disk.subwords.tgt);  // one model for both sides
    EXPECT_TRUE(*disk.subwords.src == *t.sp);
    expect_tied(*disk.transformer());
    train::TranslateOptions to;
    to.max_len = 20;
    const auto hyp_mem = train::translate_tokens(mem, t.words.src, to);
    const auto hyp_disk = train::translate_tokens(disk, t.words.src, to);
    EXPECT_EQ(hyp_disk, hyp_mem);
    for (size_t i = 0; i < t.words.tgt.size(); ++i) EXPECT_EQ(hyp_disk[i], t.words.tgt[i]) << "pair " << i;
    to.beam = 3;
    EXPECT_EQ(train::translate_tokens(disk, t.words.src, to), hyp_mem);
}

TEST(WeightTying, ModelFileHasAllNamesAndLoadingReTies) {
    test::TempDir dir;
    const TinyPieces t = tiny_pieces();
    manual_seed(2);
    models::Transformer a(tied_config(t));
    train::save_model(dir / "m.safetensors", a);
    manual_seed(3);
    models::Transformer b(tied_config(t));
    train::load_model(dir / "m.safetensors", b);
    expect_tied(b);
    EXPECT_EQ(b.decoder->dense->weight.to_vector<float>(), a.encoder->embedding->weight.to_vector<float>());
    // a file with one of the names only loads (strict) and fills the shared tensor
    auto sd = a.state_dict();
    sd.erase("encoder.embedding.weight");
    sd.erase("decoder.embedding.weight");
    manual_seed(4);
    models::Transformer c(tied_config(t));
    c.load_state_dict(sd);
    EXPECT_EQ(c.encoder->embedding->weight.to_vector<float>(), a.encoder->embedding->weight.to_vector<float>());
    // different values under two tied names: refused, naming both
    sd = a.state_dict();
    sd["decoder.dense.weight"] = mul(sd["decoder.dense.weight"], 2.0).detach();
    try {
        c.load_state_dict(sd);
        FAIL() << "differing tied values accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("decoder.dense.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("tied"), std::string::npos) << e.what();
    }
    // tying needs one vocabulary size for both sides
    models::TransformerConfig bad = tied_config(t);
    bad.tgt_vocab_size += 1;
    EXPECT_THROW(models::Transformer m(bad), Error);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// A shared-BPE model folder (untrained weights) whose files are then made to disagree: every
/// mismatch is an error naming the file and what disagrees, never a model that translates garbage.
TEST(ModelFolder, FilesThatDisagreeAreNamed) {
    test::TempDir tmp;
    const std::string dir = tmp / "run";
    const TinyPieces t = tiny_pieces();
    train::RunConfig cfg;
    cfg.data.subword = data::SubwordKind::bpe;
    cfg.data.subword_vocab_size = 60;
    cfg.data.shared_vocab = true;
    cfg.data.num_steps = 16;
    cfg.model = tied_config(t);
    manual_seed(0);
    models::Transformer model(cfg.model);
    const train::SubwordModels sw{t.sp, t.sp};
    auto write_all = [&] {
        train::write_run_files(dir, cfg, t.vocab, t.vocab, sw);
        train::save_model(dir + "/model.safetensors", model);
    };
    auto write_config = [&](const train::RunConfig& c) {
        util::write_file_atomic(dir + "/config.json", train::to_json(c).dump(2));
    };
    auto load_error = [&] { return error_of([&] { train::load_model_dir(dir); }); };
    write_all();
    ASSERT_EQ(load_error(), "(no error)");
    const std::string spm = dir + "/spm.model";

    // config.json says words, the folder holds spm.model (and a piece vocabulary)
    train::RunConfig words = cfg;
    words.data.subword = data::SubwordKind::none;
    words.data.shared_vocab = false;
    write_config(words);
    std::string e = load_error();
    EXPECT_TRUE(has(e, dir + "/config.json") && has(e, "\"none\"") && has(e, spm)) << e;
    // ... and without spm.model: the vocabulary lists pieces
    std::filesystem::remove(spm);
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/src_vocab.txt lists SentencePiece pieces") && has(e, "\"none\"")) << e;
    // config.json says bpe, spm.model is missing
    write_config(cfg);
    e = load_error();
    EXPECT_TRUE(has(e, "\"bpe\"") && has(e, spm + " is missing")) << e;
    // config.json says one model per side, the folder holds the shared one
    write_all();
    train::RunConfig per_side = cfg;
    per_side.data.shared_vocab = false;
    write_config(per_side);
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/spm_src.model is missing") && has(e, "data.shared_vocab")) << e;
    write_all();

    // a truncated spm.model is reported as such, never blamed on the vocabulary files
    const std::string bytes = t.sp->bytes();
    for (size_t n : {size_t(0), size_t(10), bytes.size() / 2, bytes.size() - 1}) {
        util::write_file_atomic(spm, std::string_view(bytes).substr(0, n));
        e = load_error();
        EXPECT_TRUE(has(e, spm + " is corrupt or truncated (")) << n << " bytes: " << e;
        EXPECT_FALSE(has(e, "vocab")) << n << " bytes: " << e;
    }
    write_all();

    // a vocabulary file that does not list spm.model's pieces: count, then the first difference
    std::vector<std::string> toks = t.vocab.tokens();
    toks.pop_back();
    data::Vocab(toks).save(dir + "/tgt_vocab.txt");
    train::RunConfig fewer = cfg;
    fewer.model.tgt_vocab_size -= 1;
    fewer.model.tie_weights = false;
    write_config(fewer);
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/tgt_vocab.txt has 59 tokens") && has(e, spm + " has 60 pieces")) << e;
    write_all();
    toks = t.vocab.tokens();
    std::swap(toks[10], toks[11]);
    data::Vocab(toks).save(dir + "/tgt_vocab.txt");
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/tgt_vocab.txt: token 10 is '" + toks[10] + "'") && has(e, "piece 10 of " + spm)) << e;
    write_all();

    // a vocabulary file against config.json
    toks = t.vocab.tokens();
    toks.push_back("extra");
    data::Vocab(toks).save(dir + "/src_vocab.txt");
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/src_vocab.txt has 61 tokens") && has(e, "model.src_vocab_size 60")) << e;
    write_all();

    // model.safetensors from a run with another vocabulary size
    models::TransformerConfig other = cfg.model;
    other.src_vocab_size = other.tgt_vocab_size = 61;
    train::save_model(dir + "/model.safetensors", models::Transformer(other));
    e = load_error();
    EXPECT_TRUE(has(e, dir + "/model.safetensors does not fit") && has(e, "(61, 32) in the file") &&
                has(e, "(60, 32) for this folder"))
        << e;
    write_all();
    ASSERT_EQ(load_error(), "(no error)");

    // writing a word run's files into the folder removes the subword run's spm.model
    train::write_run_files(dir, words, t.vocab, t.vocab);
    EXPECT_FALSE(std::filesystem::exists(spm));
    // and a per-side subword run's files remove the shared one
    write_all();
    train::write_run_files(dir, per_side, t.vocab, t.vocab, sw);
    EXPECT_FALSE(std::filesystem::exists(spm));
    EXPECT_TRUE(std::filesystem::exists(dir + "/spm_src.model") && std::filesystem::exists(dir + "/spm_tgt.model"));
}

/// 60 pairs over a handful of words, one per line as fra.txt.
std::string write_small_fra(const test::TempDir& dir) {
    const char* pairs[] = {"Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.",
                           "I'm home.\tJe suis chez moi.", "We won.\tNous avons gagné.", "Thank you.\tMerci."};
    std::ofstream f(dir / "fra.txt");
    for (int i = 0; i < 60; ++i) f << pairs[i % 6] << "\n";
    return dir / "fra.txt";
}

TEST(SubwordData, SharedBpeVocabularyPiecesInArraysWordsInReferences) {
    test::TempDir dir;
    train::DataConfig dc;
    dc.path = write_small_fra(dir);
    dc.subword = data::SubwordKind::bpe;
    dc.subword_vocab_size = 40;
    dc.shared_vocab = true;
    dc.num_steps = 16;
    const train::TranslationData d = train::load_translation_data(dc);
    ASSERT_TRUE(d.subwords.active());
    EXPECT_EQ(d.subwords.src, d.subwords.tgt);
    EXPECT_EQ(d.src_vocab.size(), 40);
    EXPECT_EQ(d.src_vocab, d.tgt_vocab);
    EXPECT_NE(d.summary.find("pieces per word"), std::string::npos) << d.summary;
    EXPECT_DOUBLE_EQ(d.truncated_src, 0.0);
    for (int64_t id : d.train.label) EXPECT_TRUE(id >= 0 && id < 40);
    // references are D2L words: no piece marker, and they decode from the arrays' pieces
    ASSERT_FALSE(d.test_ref.empty());
    for (const auto& ref : d.test_ref)
        for (const auto& w : ref) EXPECT_EQ(w.find("\xE2\x96\x81"), std::string::npos) << w;
    std::vector<std::string> label_pieces;
    for (int64_t j = 0; j < d.test.tgt_valid_len[0] - 1; ++j) label_pieces.push_back(d.tgt_vocab.idx_to_token(d.test.label[size_t(j)]));
    EXPECT_EQ(d.subwords.tgt->decode(label_pieces), d.test_ref[0]);
    // deterministic: the same data gives the same pieces; given models are reused as they are
    const train::TranslationData again = train::load_translation_data(dc, d.subwords);
    EXPECT_EQ(again.subwords.src, d.subwords.src);
    EXPECT_EQ(again.train.label, d.train.label);
    EXPECT_TRUE(*train::load_translation_data(dc).subwords.src == *d.subwords.src);
    // per-side models
    dc.shared_vocab = false;
    dc.subword_vocab_size = 35;
    const train::TranslationData p = train::load_translation_data(dc);
    EXPECT_NE(p.subwords.src, p.subwords.tgt);
    EXPECT_EQ(p.src_vocab.size(), 35);
    EXPECT_NE(p.src_vocab, p.tgt_vocab);
}

TEST(SubwordData, SharedWordVocabulary) {
    test::TempDir dir;
    train::DataConfig dc;
    dc.path = write_small_fra(dir);
    dc.shared_vocab = true;
    const train::TranslationData d = train::load_translation_data(dc);
    EXPECT_FALSE(d.subwords.active());
    EXPECT_EQ(d.src_vocab, d.tgt_vocab);
    EXPECT_TRUE(d.src_vocab.contains("home"));
    EXPECT_TRUE(d.src_vocab.contains("maison") || d.src_vocab.contains("chez"));
}

TEST(SubwordData, BadSettingsNameTheFlag) {
    test::TempDir dir;
    train::DataConfig dc;
    dc.path = write_small_fra(dir);
    dc.subword = data::SubwordKind::bpe;
    for (int64_t v : {int64_t(100000), int64_t(8)}) {
        dc.subword_vocab_size = v;
        try {
            train::load_translation_data(dc);
            FAIL() << "vocab size " << v << " accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--vocab-size"), std::string::npos) << e.what();
        }
    }
    // the error says which vocabulary the size does not fit: the source one (trained first) or the
    // shared one
    for (bool shared : {false, true}) {
        dc.subword_vocab_size = 100000;
        dc.shared_vocab = shared;
        const std::string side = shared ? "shared (en + fr)" : "source (en)";
        try {
            train::load_translation_data(dc);
            ADD_FAILURE() << "vocab size 100000 accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--vocab-size) 100000 does not fit the " + side + " vocabulary"),
                      std::string::npos)
                << e.what();
        }
    }
    {
        // rich English, poor French: 40 pieces fit the source side, not the target side
        std::ofstream f(dir / "fra2.txt");
        const char* en[] = {"The quick brown fox jumps over the lazy dog.", "Pack my box with five dozen jugs.",
                            "How vexingly quick daft zebras jump!", "Sphinx of black quartz, judge my vow."};
        for (int i = 0; i < 60; ++i) f << en[i % 4] << "\tOui.\n";
    }
    dc.path = dir / "fra2.txt";
    dc.shared_vocab = false;
    dc.subword_vocab_size = 40;
    try {
        train::load_translation_data(dc);
        ADD_FAILURE() << "40 French pieces from 'oui .' accepted";
    } catch (const Error& e) {
        // fra2.txt reads as a TSV corpus: its languages are unknown
        EXPECT_NE(std::string(e.what()).find("does not fit the target vocabulary"), std::string::npos)
            << e.what();
    }
    dc.path = dir / "fra.txt";
    dc.subword_vocab_size = 40;
    dc.pipeline = train::DataPipeline::d2l_en;
    EXPECT_THROW(train::load_translation_data(dc), Error);
}

TEST(SubwordData, ConfigJsonRoundTrip) {
    train::RunConfig c = train::preset_config("full");
    c.model.src_vocab_size = c.model.tgt_vocab_size = 8000;  // (config.json holds the real sizes)
    c.data.subword = data::SubwordKind::unigram;
    c.data.subword_vocab_size = 8000;
    c.data.shared_vocab = true;
    c.model.tie_weights = true;
    const nlohmann::json j = train::to_json(c);
    EXPECT_EQ(j["data"]["subword"], "unigram");
    EXPECT_EQ(j["data"]["subword_files"]["target"], "spm.model");
    const train::RunConfig r = train::run_config_from_json(j);
    EXPECT_EQ(r.data.subword, data::SubwordKind::unigram);
    EXPECT_EQ(r.data.subword_vocab_size, 8000);
    EXPECT_TRUE(r.data.shared_vocab);
    EXPECT_TRUE(r.model.tie_weights);
    // old files: words, untied
    nlohmann::json old = j;
    old["data"].erase("subword");
    old["data"].erase("shared_vocab");
    old["model"].erase("tie_weights");
    const train::RunConfig o = train::run_config_from_json(old);
    EXPECT_EQ(o.data.subword, data::SubwordKind::none);
    EXPECT_FALSE(o.data.shared_vocab);
    EXPECT_FALSE(o.model.tie_weights);
    old["data"]["subword"] = "wordpiece";
    EXPECT_THROW(train::run_config_from_json(old), Error);
    EXPECT_EQ(train::subword_files(c.data), std::make_pair(std::string("spm.model"), std::string("spm.model")));
    c.data.shared_vocab = false;
    EXPECT_EQ(train::subword_files(c.data).first, "spm_src.model");
}

}  // namespace
}  // namespace qkv::test
