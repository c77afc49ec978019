// Arrays and the three setups. Synthetic data always; the real fra-eng checks (anchor vocab sizes
// and checksums, D2L EN 194/214, D2L ZH 184/201 and the book's ids) run when the data file is
// found (QKV_DATA, else ../shared/data/fra-eng.zip next to the source tree) and skip otherwise.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/sha256.h"
#include "qkv/core/error.h"
#include "qkv/data/nmt_data.h"
#include "qkv/data/tokenizer.h"

namespace qkv::data {
namespace {

using Toks = std::vector<std::string>;
using Ids  = std::vector<int64_t>;

Vocab small_vocab() {  // <unk>0 <pad>1 <bos>2 <eos>3 a4 b5 c6
    return Vocab(Toks{"<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c"});
}

TEST(NmtArrays, EosTruncationPaddingValidLen) {
    const Vocab v = small_vocab();
    const SeqArray a = build_array_nmt({{"a", "b"}, {"a", "b", "c", "a"}, {"c", "zz", "b"}, {}}, v, 4);
    EXPECT_EQ(a.rows, 4);
    EXPECT_EQ(a.ids, (Ids{4, 5, 3, 1,    // a b <eos> <pad>
                          4, 5, 6, 4,    // 4 tokens = num_steps: <eos> cut
                          6, 0, 5, 3,    // unknown -> <unk>; exactly fits with <eos>
                          3, 1, 1, 1})); // empty sentence: just <eos>
    EXPECT_EQ(a.valid_len, (Ids{3, 4, 4, 1}));
    EXPECT_EQ(decoder_input(a, 2), (Ids{2, 4, 5, 3, 2, 4, 5, 6, 2, 6, 0, 5, 2, 3, 1, 1}));
    EXPECT_THROW(build_array_nmt({{"a"}}, v, 0), Error);
    EXPECT_THROW(build_array_nmt({{"a"}}, Vocab(), 3), Error);  // no <eos>/<pad>
}

TEST(NmtArrays, BuildAndSubset) {
    const Vocab v = small_vocab();
    const NmtArrays a = build_nmt_arrays({{"a"}, {"b", "c"}}, {{"c", "c", "c"}, {"a"}}, v, v, 3);
    EXPECT_EQ(a.n, 2);
    EXPECT_EQ(a.src, (Ids{4, 3, 1, 5, 6, 3}));
    EXPECT_EQ(a.src_valid_len, (Ids{2, 3}));
    EXPECT_EQ(a.label, (Ids{6, 6, 6, 4, 3, 1}));
    EXPECT_EQ(a.tgt_valid_len, (Ids{3, 2}));
    EXPECT_EQ(a.dec_input, (Ids{2, 6, 6, 2, 4, 3}));
    const NmtArrays s = a.subset({1, 1, 0});
    EXPECT_EQ(s.n, 3);
    EXPECT_EQ(s.src, (Ids{5, 6, 3, 5, 6, 3, 4, 3, 1}));
    EXPECT_EQ(s.tgt_valid_len, (Ids{2, 2, 3}));
    EXPECT_THROW(a.subset({2}), Error);
    EXPECT_THROW(build_nmt_arrays({{"a"}}, {}, v, v, 3), Error);
}

ParallelCorpus synthetic_corpus(int n) {
    ParallelCorpus c;
    c.origin = "synthetic";
    const char* en[] = {"I run.", "You run!", "He is calm.", "We won.", "Hi."};
    const char* fr[] = {"Je cours.", "Tu cours !", "Il est calme.", "Nous avons gagné.", "Salut."};
    for (int i = 0; i < n; ++i) {
        c.src.push_back(en[i % 5]);
        c.tgt.push_back(fr[(i * 3) % 5 == 0 ? 0 : i % 5]);
        c.line.push_back(i);
    }
    c.lines_read = n;
    return c;
}

TEST(NmtSetups, AnchorPipelineOnSyntheticData) {
    const ParallelCorpus c = synthetic_corpus(40);
    AnchorConfig cfg;
    cfg.n_valid   = 4;
    cfg.n_test    = 6;
    cfg.num_steps = 5;
    const AnchorData d = prepare_anchor_data(c, cfg);
    EXPECT_EQ(d.train.n, 30);
    EXPECT_EQ(d.valid.n, 4);
    EXPECT_EQ(d.test.n, 6);
    const Ids idx = shuffled_indices(40, 0);
    EXPECT_EQ(d.split.test, Ids(idx.end() - 6, idx.end()));
    EXPECT_EQ(d.src_tokens[2], (Toks{"he", "is", "calm", "."}));
    // Vocabulary from the train split only; every token of these sentences repeats.
    EXPECT_EQ(d.src_vocab.idx_to_token(4), ".");  // the most frequent
    // The first test row is pair d.split.test[0].
    const int64_t p = d.split.test[0];
    const Ids want = d.src_vocab.encode(d.src_tokens[size_t(p)]);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(d.test.src[k], want[k]);
}

TEST(NmtSetups, D2lEnOnSyntheticData) {
    const ParallelCorpus c = synthetic_corpus(12);
    const D2lEnData d = prepare_d2l_en(c, 6, 8, 3);  // lines 0..11: 12 pairs -> 8 + 4
    EXPECT_EQ(d.train.n, 8);
    EXPECT_EQ(d.valid.n, 4);
    // Alphabetical with no reserved tokens: '!' '.' '<eos>' '<pad>' '<unk>' ...
    EXPECT_EQ(d.src_vocab.idx_to_token(0), "!");
    EXPECT_EQ(d.src_vocab.idx_to_token(1), ".");
    EXPECT_EQ(d.src_vocab.idx_to_token(2), "<eos>");
    EXPECT_FALSE(d.src_vocab.contains("<bos>"));
    EXPECT_TRUE(d.tgt_vocab.contains("<bos>"));
    // Row 0: "I run." -> i run . <eos> <pad> <pad>
    const auto& sv = d.src_vocab;
    EXPECT_EQ(Ids(d.train.src.begin(), d.train.src.begin() + 6),
              (Ids{sv.token_to_idx("i"), sv.token_to_idx("run"), sv.token_to_idx("."),
                   sv.token_to_idx("<eos>"), sv.pad(), sv.pad()}));
    EXPECT_EQ(d.train.src_valid_len[0], 4);
    const NmtArrays b = d2l_en_build({"We won."}, {"Nous avons gagné."}, d.src_vocab, d.tgt_vocab, 6);
    const auto& tv = d.tgt_vocab;
    EXPECT_EQ(b.dec_input, (Ids{tv.bos(), tv.token_to_idx("nous"), tv.token_to_idx("avons"),
                                tv.token_to_idx("gagné"), tv.token_to_idx("."), tv.eos()}));
    EXPECT_EQ(b.label, (Ids{tv.token_to_idx("nous"), tv.token_to_idx("avons"),
                            tv.token_to_idx("gagné"), tv.token_to_idx("."), tv.eos(), tv.pad()}));
    EXPECT_EQ(b.tgt_valid_len, (Ids{5}));
    EXPECT_THROW(prepare_d2l_en(c, 6, 20, 3), Error);  // only 12 pairs
}

// ---- the real data ------------------------------------------------------------------------------

std::string real_data_path() {
    if (const char* env = std::getenv("QKV_DATA"); env && *env) return env;
    const std::string p = std::string(QKV_SOURCE_DIR) + "/../shared/data/fra-eng.zip";
    return std::filesystem::exists(p) ? p : "";
}

class RealData : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        const std::string p = real_data_path();
        if (!p.empty()) corpus_ = new ParallelCorpus(load_fra_eng(p));
    }
    static void TearDownTestSuite() {
        delete corpus_;
        corpus_ = nullptr;
    }
    void SetUp() override {
        if (!corpus_)
            GTEST_SKIP() << "fra-eng data not found (set QKV_DATA or put fra-eng.zip in "
                            "../shared/data next to the source tree)";
    }
    static ParallelCorpus* corpus_;
};
ParallelCorpus* RealData::corpus_ = nullptr;

TEST_F(RealData, AnchorPairsVocabulariesAndChecksums) {
    const ParallelCorpus& c = *corpus_;
    EXPECT_EQ(c.size(), 167130);
    EXPECT_EQ(c.malformed, 0);
    EXPECT_EQ(c.src[0], "Go.");
    EXPECT_EQ(c.tgt[0], "Va !");
    const AnchorData d = prepare_anchor_data(c);
    EXPECT_EQ(d.src_vocab.size(), 9850);
    EXPECT_EQ(d.tgt_vocab.size(), 17496);
    EXPECT_EQ(qkv::test::sha256_lines(d.src_vocab.tokens()),
              "fc836e80c11fbeb52e87cd938deb7be85ab952a28023100b7afa3d201cf96eea");
    EXPECT_EQ(qkv::test::sha256_lines(d.tgt_vocab.tokens()),
              "36c4992f49bfce58b30441e4cfaaa4b7c0b54bceca02cd2b2d6b2ca7c4baa18e");
    EXPECT_EQ(Toks(d.src_vocab.tokens().begin() + 4, d.src_vocab.tokens().begin() + 16),
              (Toks{".", "i", "you", "to", "the", "?", "a", "is", "tom", "that", "he", "of"}));
    EXPECT_EQ(Toks(d.tgt_vocab.tokens().begin() + 4, d.tgt_vocab.tokens().begin() + 16),
              (Toks{".", "je", "de", "?", "pas", "que", "à", "ne", "le", "la", "vous", "il"}));
    EXPECT_EQ(d.train.n, 160130);
    EXPECT_EQ(d.valid.n, 2000);
    EXPECT_EQ(d.test.n, 5000);
    // quality_anchor.md §2.1 step 6: 9,784 train sources and 14,527 train targets lose <eos>;
    // mean target valid length 8.31; 0.83 % of train target tokens are <unk> (counted over the
    // label arrays: non-pad positions, <eos> included).
    int64_t src_cut = 0, tgt_cut = 0, tgt_valid = 0, unk = 0;
    for (int64_t r = 0; r < d.train.n; ++r) {
        src_cut += d.src_tokens[size_t(d.split.train[size_t(r)])].size() >= 12;
        tgt_cut += d.tgt_tokens[size_t(d.split.train[size_t(r)])].size() >= 12;
        tgt_valid += d.train.tgt_valid_len[size_t(r)];
        for (int64_t t = 0; t < 12; ++t) unk += d.train.label[size_t(r * 12 + t)] == 0;
    }
    const int64_t tokens = tgt_valid;
    EXPECT_EQ(src_cut, 9784);
    EXPECT_EQ(tgt_cut, 14527);
    EXPECT_NEAR(double(tgt_valid) / double(d.train.n), 8.31, 0.005);  // printed to 2 decimals
    EXPECT_NEAR(100.0 * double(unk) / double(tokens), 0.83, 0.005);
    // The first test pair of the anchor's table (§3.2).
    EXPECT_EQ(d.src_tokens[size_t(d.split.test[0])], (Toks{"he's", "too", "drunk", "."}));
    EXPECT_EQ(d.tgt_tokens[size_t(d.split.test[0])], (Toks{"il", "est", "trop", "saoul", "."}));
}

TEST_F(RealData, D2lEnVocabulariesAndIndices) {
    const D2lEnData d = prepare_d2l_en(*corpus_);
    EXPECT_EQ(d.src_vocab.size(), 194);
    EXPECT_EQ(d.tgt_vocab.size(), 214);
    EXPECT_EQ(d.train.n, 512);
    EXPECT_EQ(d.valid.n, 129);
    EXPECT_EQ(Toks(d.src_vocab.tokens().begin(), d.src_vocab.tokens().begin() + 7),
              (Toks{"!", ",", ".", "<eos>", "<pad>", "<unk>", "?"}));
    EXPECT_EQ(Toks(d.tgt_vocab.tokens().begin(), d.tgt_vocab.tokens().begin() + 8),
              (Toks{"!", ",", ".", "<bos>", "<eos>", "<pad>", "<unk>", "?"}));
    const std::vector<std::pair<const char*, int64_t>> src = {
        {"go", 59}, {"i", 84}, {"lost", 105}, {"he's", 67}, {"calm", 22}, {"i'm", 86}, {"home", 76}};
    for (const auto& [t, i] : src) EXPECT_EQ(d.src_vocab.token_to_idx(t), i) << t;
    const std::vector<std::pair<const char*, int64_t>> tgt = {
        {"va", 201},  {"j'ai", 105}, {"perdu", 148}, {"il", 102},   {"est", 77},
        {"calme", 38}, {"je", 108},  {"suis", 183},  {"chez", 47},  {"moi", 129},
        {"court", 56}, {"elle", 69}, {"mouillé", 131}};
    for (const auto& [t, i] : tgt) EXPECT_EQ(d.tgt_vocab.token_to_idx(t), i) << t;
    // No pair exceeds 9 tokens: every label row ends its sentence with <eos>.
    for (int64_t r = 0; r < d.train.n; ++r) {
        const int64_t len = d.train.tgt_valid_len[size_t(r)];
        EXPECT_EQ(d.train.label[size_t(r * 9 + len - 1)], d.tgt_vocab.eos());
    }
    // Book: build(['hi .'], ['salut .']).
    const NmtArrays b = d2l_en_build({"hi ."}, {"salut ."}, d.src_vocab, d.tgt_vocab);
    EXPECT_EQ(d.src_vocab.decode(b.src),
              (Toks{"hi", ".", "<eos>", "<pad>", "<pad>", "<pad>", "<pad>", "<pad>", "<pad>"}));
    EXPECT_EQ(d.tgt_vocab.decode(b.dec_input),
              (Toks{"<bos>", "salut", ".", "<eos>", "<pad>", "<pad>", "<pad>", "<pad>", "<pad>"}));
}

TEST_F(RealData, D2lZhVocabulariesAndBookIds) {
    const D2lZhData z = prepare_d2l_zh(*corpus_, 8);
    EXPECT_EQ(z.data.n, 601);
    EXPECT_EQ(z.src_vocab.size(), 184);
    EXPECT_EQ(z.tgt_vocab.size(), 201);
    EXPECT_EQ(Toks(z.src_vocab.tokens().begin() + 4, z.src_vocab.tokens().begin() + 15),
              (Toks{".", "!", "i", "i'm", "it", "go", "tom", "?", "me", "get", "be"}));
    EXPECT_EQ(Toks(z.tgt_vocab.tokens().begin() + 4, z.tgt_vocab.tokens().begin() + 15),
              (Toks{".", "!", "je", "suis", "tom", "?", "j'ai", "nous", "ça", "c'est", "est"}));
    // Book check (num_steps 8): "i'm calm ." and "je suis calme .".
    const SeqArray x = build_array_nmt({{"i'm", "calm", "."}}, z.src_vocab, 8);
    const SeqArray y = build_array_nmt({{"je", "suis", "calme", "."}}, z.tgt_vocab, 8);
    EXPECT_EQ(x.ids, (Ids{7, 43, 4, 3, 1, 1, 1, 1}));
    EXPECT_EQ(y.ids, (Ids{6, 7, 40, 4, 3, 1, 1, 1}));
    EXPECT_EQ(x.valid_len, (Ids{4}));
}

}  // namespace
}  // namespace qkv::data
