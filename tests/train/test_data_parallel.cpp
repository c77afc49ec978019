// Data-parallel pieces without MPI: how a global batch is shared out, and that the shares'
// gradients, weighted by their tokens over the batch's, sum to the global batch's gradient (the
// identity GradientReducer relies on). The MPI runs themselves are in tests/dist (dist.mpi) and
// tests/cli (train with mpirun).
#include <gtest/gtest.h>

#include <numeric>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/dist/communicator.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/loss.h"
#include "qkv/train/trainer.h"
#include "train/tiny_corpus.h"

namespace qkv {
namespace {

TEST(ShardRows, TilesTheBatchInOrder) {
    const std::vector<int64_t> w{5, 1, 1, 1, 1, 1, 5, 3};
    for (int size = 1; size <= 10; ++size) {
        int64_t next = 0;
        for (int r = 0; r < size; ++r) {
            auto [a, b] = train::shard_rows(w, r, size);
            EXPECT_EQ(a, next) << "size " << size << " rank " << r;
            EXPECT_LE(a, b);
            next = b;
        }
        EXPECT_EQ(next, 8) << "size " << size;
    }
}

TEST(ShardRows, BalancesByWeight) {
    // Total 18: rank 1's share starts where the prefix reaches 9 (5+1+1+1+1 = 9 after row 4).
    const std::vector<int64_t> w{5, 1, 1, 1, 1, 1, 5, 3};
    EXPECT_EQ(train::shard_rows(w, 0, 2), (std::pair<int64_t, int64_t>{0, 5}));
    EXPECT_EQ(train::shard_rows(w, 1, 2), (std::pair<int64_t, int64_t>{5, 8}));
    // More ranks than rows: some shares are empty, none overlaps.
    const std::vector<int64_t> two{3, 3};
    EXPECT_EQ(train::shard_rows(two, 0, 4), (std::pair<int64_t, int64_t>{0, 1}));
    EXPECT_EQ(train::shard_rows(two, 1, 4), (std::pair<int64_t, int64_t>{1, 1}));
    EXPECT_EQ(train::shard_rows(two, 2, 4), (std::pair<int64_t, int64_t>{1, 2}));
    EXPECT_EQ(train::shard_rows(two, 3, 4), (std::pair<int64_t, int64_t>{2, 2}));
    EXPECT_THROW(train::shard_rows(w, 2, 2), Error);
    EXPECT_THROW(train::shard_rows(std::vector<int64_t>{-1}, 0, 1), Error);
}

TEST(ShardBatch, KeepsColumnsAndRows) {
    auto c = test::tiny_corpus();
    data::BatcherOptions bo;
    bo.batch_size = 8;
    bo.shuffle = false;
    data::Batcher batcher(c.arrays, bo);
    batcher.start_epoch(0);
    data::Batch b = batcher.batch(0);
    data::Batch s0 = train::shard_batch(b, 0, 2), s1 = train::shard_batch(b, 1, 2);
    EXPECT_EQ(s0.size + s1.size, b.size);
    EXPECT_GT(s0.size, 0);
    EXPECT_GT(s1.size, 0);
    EXPECT_EQ(s1.num_steps, b.num_steps);
    EXPECT_EQ(s1.src_steps, b.src_steps);
    EXPECT_EQ(s1.rows.front(), b.rows[static_cast<size_t>(s0.size)]);
    EXPECT_EQ(std::vector<int64_t>(s1.label.begin(), s1.label.begin() + b.num_steps),
              std::vector<int64_t>(b.label.begin() + s0.size * b.num_steps, b.label.begin() + (s0.size + 1) * b.num_steps));
    const auto tok = [](const data::Batch& x) {
        return std::accumulate(x.tgt_valid_len.begin(), x.tgt_valid_len.end(), int64_t{0});
    };
    EXPECT_LE(std::abs(tok(s0) - tok(s1)), *std::max_element(b.tgt_valid_len.begin(), b.tgt_valid_len.end()));
}

TEST(RankSeed, RankZeroKeepsTheSeed) {
    EXPECT_EQ(train::rank_seed(17, 0), 17u);
    EXPECT_NE(train::rank_seed(17, 1), train::rank_seed(17, 2));
    EXPECT_NE(train::rank_seed(17, 1), 17u);
}

// Σ_r (tokens_r / tokens) ∇L_r == ∇L: the shares' weighted gradients give the global batch's.
TEST(GradientReducer, WeightedShareGradientsSumToTheGlobalGradient) {
    auto c = test::tiny_corpus();
    data::BatcherOptions bo;
    bo.batch_size = 8;
    bo.shuffle = false;
    data::Batcher batcher(c.arrays, bo);
    batcher.start_epoch(0);
    const data::Batch b = batcher.batch(0);
    default_generator().manual_seed(3);
    models::Transformer m(test::tiny_config(c));
    m.train();
    const auto params = m.parameters();
    train::Seq2SeqLossOptions lo;
    lo.pad = c.tgt_vocab.pad();
    auto grads_of = [&](const data::Batch& x, double weight) {
        for (auto& p : params) Tensor(p).reset_grad();
        train::BatchTensors t = train::to_tensors(x);
        train::Seq2SeqLoss l = train::seq2seq_loss(m, t.src, t.src_valid_len, t.dec_input, t.label, lo);
        l.loss.backward();
        std::vector<std::vector<double>> g;
        for (auto& p : params) {
            auto v = p.grad().contiguous().to_vector<float>();
            g.emplace_back(v.begin(), v.end());
            for (double& e : g.back()) e *= weight;
        }
        return std::make_pair(g, l.tokens);
    };
    auto [full, n] = grads_of(b, 1.0);
    const data::Batch s0 = train::shard_batch(b, 0, 2), s1 = train::shard_batch(b, 1, 2);
    const auto n0 = std::accumulate(s0.tgt_valid_len.begin(), s0.tgt_valid_len.end(), int64_t{0});
    const auto n1 = std::accumulate(s1.tgt_valid_len.begin(), s1.tgt_valid_len.end(), int64_t{0});
    ASSERT_EQ(n0 + n1, n);
    auto g0 = grads_of(s0, double(n0) / double(n)).first;
    auto g1 = grads_of(s1, double(n1) / double(n)).first;
    // fp32 gradients of a sum split two ways: the two orders of summation differ by a few ulp of
    // the largest term; 1e-5 relative to the tensor's largest gradient plus 1e-7 is 100x that.
    for (size_t i = 0; i < full.size(); ++i) {
        double scale = 0;
        for (double e : full[i]) scale = std::max(scale, std::abs(e));
        for (size_t j = 0; j < full[i].size(); ++j)
            ASSERT_NEAR(g0[i][j] + g1[i][j], full[i][j], 1e-5 * scale + 1e-7) << "parameter " << i << " element " << j;
    }
}

TEST(GradientReducer, SingleProcessScalesAndFillsMissingGrads) {
    Tensor a = Tensor::empty({3}), b = Tensor::empty({2});
    for (int i = 0; i < 3; ++i) a.data<float>()[i] = 1.f;
    a.requires_grad_();
    b.requires_grad_();
    Tensor ga = Tensor::empty({3});
    for (int i = 0; i < 3; ++i) ga.data<float>()[i] = float(i + 1);
    a.set_grad(ga);
    train::GradientReducer sync(dist::make_single_process(), {a, b});
    std::vector<double> scalars{2.5};
    sync.sync(1, 4, scalars);
    EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.25f, 0.5f, 0.75f}));
    EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0.f, 0.f}));
    EXPECT_EQ(ga.to_vector<float>(), (std::vector<float>{1.f, 2.f, 3.f}));  // never in place
    EXPECT_EQ(scalars[0], 2.5);
    EXPECT_THROW(sync.sync(1, 0, scalars), Error);
}

}  // namespace
}  // namespace qkv
