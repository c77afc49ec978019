// Parameter initialisers and SkipInitGuard (nn/module.h).
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/core/generator.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/module.h"

namespace qkv {
namespace {

bool all_zero(const Tensor& t) {
    for (float v : t.contiguous().to_vector<float>())
        if (v != 0.0f) return false;
    return true;
}

TEST(Init, DrawsRandomValuesWithinTheirBounds) {
    default_generator().manual_seed(3);
    nn::Linear lin(16, 8);
    const std::vector<float> w = lin.weight.to_vector<float>();
    ASSERT_EQ(w.size(), 128u);
    const float bound = 1.0f / 4.0f;  // 1/√16
    int64_t distinct = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_LE(std::fabs(w[i]), bound);
        distinct += i > 0 && w[i] != w[i - 1];
    }
    EXPECT_GT(distinct, 100);
    nn::Embedding emb(50, 4);
    EXPECT_FALSE(all_zero(emb.weight));
}

TEST(Init, SkipInitGuardGivesZerosAndLeavesTheGeneratorAlone) {
    default_generator().manual_seed(7);
    const uint64_t before = default_generator().offset();
    {
        nn::SkipInitGuard skip;
        EXPECT_TRUE(nn::SkipInitGuard::active());
        {
            nn::SkipInitGuard nested;
            EXPECT_TRUE(nn::SkipInitGuard::active());
        }
        EXPECT_TRUE(nn::SkipInitGuard::active());  // the outer guard still holds
        nn::Linear lin(16, 8);
        nn::Embedding emb(50, 4);
        EXPECT_TRUE(all_zero(lin.weight));
        EXPECT_TRUE(all_zero(lin.bias));
        EXPECT_TRUE(all_zero(emb.weight));
        EXPECT_TRUE(all_zero(nn::xavier_uniform({3, 5}, 5, 3)));
        EXPECT_EQ(lin.weight.shape(), (Shape{8, 16}));
        EXPECT_EQ(default_generator().offset(), before);
    }
    EXPECT_FALSE(nn::SkipInitGuard::active());
    nn::Linear lin(16, 8);  // random again after the guard
    EXPECT_FALSE(all_zero(lin.weight));
    EXPECT_NE(default_generator().offset(), before);
}

}  // namespace
}  // namespace qkv
