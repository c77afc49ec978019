// ZeRO stage 1 in one process: the shard layout, the sharded collectives' checks and fallbacks,
// and ZeroRedundancyAdam against optim::Adam (the 2- and 3-rank runs are test_mpi.sh's).
#include <gtest/gtest.h>

#include <cstdlib>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/dist/communicator.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/data_parallel.h"
#include "support/test_util.h"

namespace qkv {
namespace {

TEST(ZeroShardBounds, BalancedAlignedAndTiling) {
    const std::vector<int64_t> numels{100, 37, 1000, 5, 0, 64};
    int64_t total = 0;
    std::vector<int64_t> start{0};
    for (int64_t n : numels) start.push_back(total += n);
    for (int size : {1, 2, 3, 4, 7}) {
        const auto b = train::zero_shard_bounds(numels, size);
        ASSERT_EQ(b.size(), size_t(size) + 1);
        EXPECT_EQ(b.front(), 0);
        EXPECT_EQ(b.back(), total);
        for (int r = 1; r < size; ++r) {
            const int64_t x = b[size_t(r)], even = total * r / size;
            EXPECT_LE(b[size_t(r) - 1], x);
            EXPECT_LE(x, even) << "size " << size << " boundary " << r;
            EXPECT_LT(even - x, 16) << "size " << size << " boundary " << r;
            // aligned from the start of the tensor it falls in
            size_t i = 0;
            while (start[i + 1] <= x) ++i;
            EXPECT_EQ((x - start[i]) % 16, 0) << "size " << size << " boundary " << r;
        }
    }
    // Fewer elements than ranks · 16: leading shards empty, the elements with the last rank.
    EXPECT_EQ(train::zero_shard_bounds(std::vector<int64_t>{5}, 4), (std::vector<int64_t>{0, 0, 0, 0, 5}));
    EXPECT_EQ(train::zero_shard_bounds(std::vector<int64_t>{32, 32}, 2, 1), (std::vector<int64_t>{0, 32, 64}));
    EXPECT_THROW(train::zero_shard_bounds(numels, 0), Error);
    EXPECT_THROW(train::zero_shard_bounds(numels, 2, 0), Error);
    EXPECT_THROW(train::zero_shard_bounds(std::vector<int64_t>{3, -1}, 2), Error);
}

// A communicator of `n` ranks (this one is `rank`) whose sums are the identity: the base class's
// reduce_scatter_sum / allgather_blocks fallbacks over allreduce_sum, seen from one rank.
class IdentityWorld final : public dist::Communicator {
public:
    IdentityWorld(int rank, int n) : rank_(rank), n_(n) {}
    int rank() const override { return rank_; }
    int size() const override { return n_; }
    std::string backend() const override { return "identity"; }
    void broadcast(std::span<std::byte>, int) override {}
    void allreduce_sum(std::span<float>) override { ++allreduces; }
    void allreduce_sum(std::span<double>) override {}
    void allreduce_sum(std::span<int64_t>) override {}
    std::vector<std::string> allgather(const std::string& s) override { return std::vector<std::string>(size_t(n_), s); }
    void barrier() override {}
    [[noreturn]] void abort(const std::string&, int code) override { std::_Exit(code); }
    int allreduces = 0;

private:
    int rank_, n_;
};

TEST(ShardedCollectives, FallbacksAndChecks) {
    IdentityWorld w(1, 3);
    std::vector<float> d{1, 2, 3, 4, 5, 6};
    const std::vector<int64_t> counts{1, 3, 2};  // rank 1's block: elements 1..3
    w.allgather_blocks(d, counts);
    EXPECT_EQ(d, (std::vector<float>{0, 2, 3, 4, 0, 0}));  // the others' blocks zeroed, then summed
    w.reduce_scatter_sum(d, counts);
    EXPECT_EQ(w.allreduces, 2);
    EXPECT_THROW(w.reduce_scatter_sum(d, std::vector<int64_t>{1, 3}), Error);          // one count per rank
    EXPECT_THROW(w.allgather_blocks(d, std::vector<int64_t>{1, 3, 1}), Error);         // sums to 5, not 6
    EXPECT_THROW(w.allgather_blocks(d, std::vector<int64_t>{-1, 5, 2}), Error);        // negative
    auto one = dist::make_single_process();
    std::vector<float> e{1.5f, -2.f};
    one->reduce_scatter_sum(e, std::vector<int64_t>{2});
    one->allgather_blocks(e, std::vector<int64_t>{2});
    EXPECT_EQ(e, (std::vector<float>{1.5f, -2.f}));
    EXPECT_THROW(one->allgather_blocks(e, std::vector<int64_t>{3}), Error);
}

std::vector<Tensor> make_params(uint64_t seed) {
    manual_seed(seed);
    // Sizes around the kernel's vector width and its tail, and one empty tensor.
    std::vector<Tensor> ps;
    for (Shape s : {Shape{7, 5}, Shape{16}, Shape{0}, Shape{33, 3}, Shape{1}})
        ps.push_back(randn(s));
    return ps;
}

void set_grads(std::vector<Tensor>& ps, int step) {
    manual_seed(100 + uint64_t(step));
    for (Tensor& p : ps) p.set_grad(randn(p.shape()));
}

std::vector<float> flat(const std::vector<Tensor>& ts) {
    std::vector<float> out;
    for (const Tensor& t : ts) {
        const auto v = t.contiguous().to_vector<float>();
        out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

TEST(ZeroRedundancyAdam, OneRankIsAdamBitwiseWithClipping) {
    auto a = make_params(3), z = make_params(3);
    optim::AdamOptions ao;
    ao.weight_decay = 0.01;
    optim::Adam adam(a, 2e-3, ao);
    train::ZeroRedundancyAdam zero(z, dist::make_single_process(), 2e-3, ao);
    EXPECT_EQ(zero.bounds(), (std::vector<int64_t>{0, 35 + 16 + 99 + 1}));
    EXPECT_EQ(zero.state_bytes(), 8 * (35 + 16 + 99 + 1));
    EXPECT_EQ(zero.total_state_bytes(), zero.state_bytes());
    for (int step = 1; step <= 4; ++step) {
        set_grads(a, step);
        set_grads(z, step);
        const auto ca = adam.clip_factor(1.0), cz = zero.clip_factor(1.0);
        EXPECT_LT(ca.scale, 1.0);  // the clipping is exercised
        EXPECT_EQ(ca.norm, cz.norm);  // one rank: the same chunks summed in the same order
        adam.step(ca.scale);
        // A consolidation leaves the shard as a view of the whole state, which the step copies out.
        if (step == 2) zero.consolidate_state_dict(0);
        zero.step(cz.scale);
        EXPECT_EQ(flat(a), flat(z)) << "step " << step;
    }
    EXPECT_THROW(zero.state_dict(), Error);  // not consolidated
    zero.consolidate_state_dict(0);
    const auto sa = adam.state_dict(), sz = zero.state_dict();
    ASSERT_EQ(sa.size(), sz.size());
    for (const auto& [k, t] : sa) {
        ASSERT_TRUE(sz.count(k)) << k;
        if (k == "step") EXPECT_EQ(t.item(), sz.at(k).item());
        else EXPECT_EQ(t.contiguous().to_vector<float>(), sz.at(k).contiguous().to_vector<float>()) << k;
    }
    EXPECT_THROW(zero.consolidate_state_dict(1), Error);  // no rank 1
    zero.consolidate_state_dict(0);
    zero.release_state_dict();
    EXPECT_THROW(zero.state_dict(), Error);
    // Adam's state loads into a sharded optimizer and continues bit for bit.
    std::vector<Tensor> z2;
    for (const Tensor& t : a) z2.push_back(t.detach().clone());
    train::ZeroRedundancyAdam resumed(z2, dist::make_single_process(), 2e-3, ao);
    resumed.load_state_dict(sa);
    EXPECT_EQ(resumed.steps(), 4);
    set_grads(a, 5);
    set_grads(z2, 5);
    adam.step();
    resumed.step();
    EXPECT_EQ(flat(a), flat(z2));
    EXPECT_THROW(resumed.state_dict(), Error);  // a step since the (absent) consolidation
}

TEST(ZeroRedundancyAdam, ShardOfOneRankAmongSeveral) {
    // Rank 1 of 3 (sums are the identity; elements 0..150 cut at 35 and 99, aligned in tensors 1
    // and 3, below the even 50 and 100): it keeps state for its third of the elements only and
    // updates only them; the all-gather fallback then zeroes the others' blocks (their ranks would
    // fill them).
    auto z = make_params(5);
    const auto before = flat(z);
    auto w = std::make_shared<IdentityWorld>(1, 3);
    train::ZeroRedundancyAdam zero(z, w, 1e-3);
    const auto& b = zero.bounds();
    ASSERT_EQ(b, (std::vector<int64_t>{0, 35, 99, 151}));
    EXPECT_EQ(zero.state_bytes(), 8 * (b[2] - b[1]));
    EXPECT_EQ(zero.total_state_bytes(), 8 * b[3]);
    set_grads(z, 1);
    zero.step();
    const auto after = flat(z);
    for (int64_t i = 0; i < int64_t(after.size()); ++i) {
        if (i >= b[1] && i < b[2]) EXPECT_NE(after[size_t(i)], before[size_t(i)]) << i;  // Adam's first step moves by ~lr
        else EXPECT_EQ(after[size_t(i)], 0.f) << i;
    }
    // A whole state with a mis-shaped moment is refused, naming it.
    std::map<std::string, Tensor> sd{{"step", from_vector<int64_t>({1}, {1})}, {"exp_avg.0", zeros({3})}};
    try {
        zero.load_state_dict(sd);
        ADD_FAILURE() << "a mis-shaped state was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("exp_avg.0"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace qkv
