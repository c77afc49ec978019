// LeafGradHook: backward reports each leaf once, after its gradient is final (the point where
// data-parallel training may start reducing it).
#include <gtest/gtest.h>

#include <map>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"

namespace qkv {
namespace {

TEST(LeafGradHook, ReportsEachLeafOnceWithItsFinalGradient) {
    Tensor w = full({3}, 2.0).requires_grad_();
    Tensor x = full({3}, 3.0).requires_grad_();
    Tensor unused = full({2}, 1.0).requires_grad_();
    // w is used twice (two edges into it), x once.
    std::map<const TensorImpl*, std::vector<float>> seen;
    std::map<const TensorImpl*, int> calls;
    {
        LeafGradHook hook([&](const TensorImpl& leaf) {
            ++calls[&leaf];
            const Tensor& t = &leaf == w.impl_ptr().get() ? w : x;
            seen[&leaf] = t.grad().to_vector<float>();
        });
        Tensor y = add(sum(mul(w, x)), sum(mul(w, w)));
        y.backward();
    }
    EXPECT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[w.impl_ptr().get()], 1);
    EXPECT_EQ(calls[x.impl_ptr().get()], 1);
    EXPECT_EQ(calls.count(unused.impl_ptr().get()), 0u);
    // d/dw = x + 2w = 7, d/dx = w = 2: what the hook saw is the final gradient.
    EXPECT_EQ(seen[w.impl_ptr().get()], (std::vector<float>{7, 7, 7}));
    EXPECT_EQ(seen[x.impl_ptr().get()], (std::vector<float>{2, 2, 2}));
    EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{7, 7, 7}));
}

TEST(LeafGradHook, IsScopedAndRestoresThePreviousHook) {
    Tensor w = full({2}, 1.0).requires_grad_();
    int outer = 0, inner = 0;
    {
        LeafGradHook a([&](const TensorImpl&) { ++outer; });
        {
            LeafGradHook b([&](const TensorImpl&) { ++inner; });
            sum(w).backward();
        }
        sum(w).backward();
    }
    sum(w).backward();  // no hook: nothing counted
    EXPECT_EQ(inner, 1);
    EXPECT_EQ(outer, 1);
}

}  // namespace
}  // namespace qkv
