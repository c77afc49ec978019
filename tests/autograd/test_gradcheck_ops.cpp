// The gradcheck table: every differentiable op, float64 central differences vs backward().
// A test at the end scans src/ for every node name ("...Backward") and fails if some node was
// never exercised by a row here, so a new op without a row is noticed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>

#include "qkv/autograd/gradcheck.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/additive_attention.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/dropout.h"
#include "qkv/ops/embedding.h"
#include "qkv/ops/gru.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/rope.h"
#include "qkv/ops/softmax.h"
#include "support/test_util.h"

using namespace qkv;

namespace {

struct Row {
    std::string name;
    std::vector<Shape> shapes;  // inputs, all float64, all require grad
    std::function<Tensor(const std::vector<Tensor>&)> fn;
    double lo = -1.0, hi = 1.0;  // input range (positive for log/sqrt/pow)
};

std::set<std::string>& exercised() {
    static std::set<std::string> s;
    return s;
}

void collect_names(const Tensor& out) {
    std::vector<Node*> stack;
    std::set<Node*> seen;
    if (out.grad_fn()) stack.push_back(out.grad_fn().get());
    while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        exercised().insert(n->name());
        for (auto& e : n->next)
            if (e.fn) stack.push_back(e.fn.get());
    }
}

Tensor ids(std::vector<int64_t> v, Shape s) { return from_vector(v, s); }

std::vector<Row> table() {
    using V = const std::vector<Tensor>&;
    std::vector<Row> rows = {
        {"add_broadcast", {{2, 3}, {3}}, [](V x) { return x[0] + x[1]; }},
        {"sub_broadcast", {{2, 1}, {2, 3}}, [](V x) { return x[0] - x[1]; }},
        {"mul_broadcast", {{2, 3}, {2, 1}}, [](V x) { return x[0] * x[1]; }},
        {"div", {{2, 3}, {3}}, [](V x) { return x[0] / (x[1] * x[1] + 1.0); }},
        {"scalar_ops", {{4}}, [](V x) { return (x[0] + 2.0) * 3.0 - 1.0; }},
        {"neg", {{3}}, [](V x) { return -x[0]; }},
        {"exp", {{2, 2}}, [](V x) { return exp(x[0]); }},
        {"log", {{2, 2}}, [](V x) { return log(x[0]); }, 0.5, 2.0},
        {"tanh", {{5}}, [](V x) { return tanh(x[0]); }},
        {"sigmoid", {{5}}, [](V x) { return sigmoid(x[0]); }},
        {"relu", {{6}}, [](V x) { return relu(x[0]); }},
        {"gelu", {{6}}, [](V x) { return gelu(x[0]); }},
        {"pow", {{4}}, [](V x) { return pow(x[0], 2.5); }, 0.5, 2.0},
        {"sqrt", {{4}}, [](V x) { return sqrt(x[0]); }, 0.5, 2.0},
        {"sin_cos", {{4}}, [](V x) { return sin(x[0]) + cos(x[0]); }},
        {"masked_fill", {{2, 3}}, [](V x) {
             return masked_fill(x[0], from_vector<bool>({true, false, true}, {3}), 5.0);
         }},
        {"where", {{2, 3}, {3}}, [](V x) {
             return where(from_vector<bool>({true, false, false, true, true, false}, {2, 3}), x[0], x[1]);
         }},
        {"sum_dims", {{2, 3, 4}}, [](V x) { return sum(x[0], {0, 2}); }},
        {"sum_all", {{2, 3}}, [](V x) { return sum(x[0]); }},
        {"mean_keepdim", {{2, 3}}, [](V x) { return mean(x[0], {1}, true); }},
        {"max_dim", {{3, 4}}, [](V x) { return max(x[0], 1); }},
        {"reshape_transpose_permute", {{2, 3, 4}}, [](V x) {
             return x[0].transpose(0, 2).reshape({4, 6}).permute({1, 0}) * 1.0;
         }},
        {"slice_select", {{4, 5}}, [](V x) { return x[0].slice(1, 1, 5, 2).select(0, 2) * 1.0; }},
        {"unsqueeze_squeeze_expand", {{3}}, [](V x) { return x[0].unsqueeze(0).expand({2, 3}).unsqueeze(2).squeeze(2) * 1.0; }},
        {"contiguous_clone", {{2, 3}}, [](V x) { return x[0].transpose(0, 1).contiguous().clone(); }},
        {"concat_stack", {{2, 3}, {1, 3}}, [](V x) { return stack({concat({x[0], x[1]}, 0), concat({x[1], x[0]}, 0)}, 0); }},
        {"split_chunk", {{5, 2}}, [](V x) { return split(x[0], 2, 0)[1] * chunk(x[0], 3, 0)[0]; }},
        {"index_select", {{4, 3}}, [](V x) { return index_select(x[0], 0, ids({3, 1, 3}, {3})); }},
        {"index_select_rows_3d", {{4, 2, 3}}, [](V x) { return index_select(x[0], 0, ids({2, 0, 2, 3}, {4})); }},
        {"scatter_rows", {{3, 2, 2}}, [](V x) { return scatter_rows(x[0], ids({4, 0, 2}, {3}), 5); }},
        {"gather", {{3, 4}}, [](V x) { return gather(x[0], 1, ids({0, 3, 1, 1, 2, 2}, {3, 2})); }},
        {"repeat_interleave", {{2, 3}}, [](V x) { return repeat_interleave(x[0], 2, 0); }},
        {"matmul_2d", {{3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
        {"matmul_batched_broadcast", {{2, 3, 4}, {4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
        {"matmul_batch_bcast", {{2, 1, 3, 4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
        {"matmul_transposed", {{4, 3}, {5, 4}}, [](V x) { return matmul(x[0].transpose(0, 1), x[1].transpose(0, 1)); }},
        {"matmul_vec", {{3}, {3, 2}}, [](V x) { return matmul(x[0], x[1]); }},
        {"linear", {{2, 3, 4}, {5, 4}, {5}}, [](V x) { return linear(x[0], x[1], x[2]); }},
        {"softmax_last", {{3, 5}}, [](V x) { return softmax(x[0], -1); }},
        {"rotary_embedding_half", {{2, 3, 4, 6}}, [](V x) { return rotary_embedding(x[0]); }},
        {"rotary_embedding_interleaved_offset", {{2, 5, 4}}, [](V x) {
             RopeOptions o;
             o.layout = RopeLayout::interleaved, o.position_offset = 7, o.base = 100.0;
             return rotary_embedding(x[0], o);
         }},
        {"softmax_dim0", {{3, 5}}, [](V x) { return softmax(x[0], 0); }},
        {"log_softmax_last", {{3, 5}}, [](V x) { return log_softmax(x[0], -1); }},
        {"log_softmax_mid", {{2, 3, 4}}, [](V x) { return log_softmax(x[0], 1); }},
        {"masked_softmax_1d", {{2, 3, 5}}, [](V x) { return masked_softmax(x[0], ids({2, 0}, {2})); }},
        {"masked_softmax_2d", {{2, 3, 5}}, [](V x) { return masked_softmax(x[0], ids({1, 5, 3, 2, 4, 9}, {2, 3})); }},
        {"layer_norm_affine", {{3, 5}, {5}, {5}}, [](V x) { return layer_norm(x[0], {5}, x[1], x[2]); }},
        {"add_layer_norm_affine", {{2, 3, 5}, {2, 3, 5}, {5}, {5}}, [](V x) { return add_layer_norm(x[0], x[1], {5}, x[2], x[3]); }},
        {"add_layer_norm_plain", {{4, 6}, {4, 6}}, [](V x) { return add_layer_norm(x[0], x[1], {6}, Tensor(), Tensor()); }},
        {"layer_norm_2d_shape", {{2, 3, 4}}, [](V x) { return layer_norm(x[0], {3, 4}, Tensor(), Tensor()); }},
        {"dropout_train", {{4, 5}}, [](V x) {
             Generator g(3);  // same mask on every call, so differences see a fixed function
             return dropout(x[0], 0.4, true, &g);
         }},
        {"embedding", {{5, 3}}, [](V x) { return embedding(ids({4, 0, 4, 2}, {2, 2}), x[0]); }},
        {"cross_entropy_mean", {{4, 6}}, [](V x) { return cross_entropy(x[0], ids({1, 5, 0, 2}, {4})); }},
        {"cross_entropy_weighted_smoothed", {{2, 3, 6}}, [](V x) {
             CrossEntropyOptions o;
             o.label_smoothing = 0.1;
             o.ignore_index = 3;
             Tensor w = from_vector<double>({1.0, 0.5, 2.0, 0.0, 1.5, 1.0}, {2, 3});  // per-position weights
             return cross_entropy(x[0], ids({1, 3, 0, 2, 5, 4}, {2, 3}), w, o);
         }},
        {"cross_entropy_none", {{3, 4}}, [](V x) {
             CrossEntropyOptions o;
             o.reduction = Reduction::none;
             return cross_entropy(x[0], ids({0, 3, 1}, {3}), Tensor(), o);
         }},
        {"linear_nobias", {{3, 4}, {2, 4}}, [](V x) { return linear(x[0], x[1]); }},
        {"linear_cross_entropy_smoothed", {{3, 4}, {6, 4}, {6}}, [](V x) {
             CrossEntropyOptions o;
             o.label_smoothing = 0.1;
             o.ignore_index = 2;
             return linear_cross_entropy(x[0], x[1], x[2], ids({1, 2, 5}, {3}), o);
         }},
        {"additive_attention_scores", {{2, 3, 5}, {2, 4, 5}, {5}}, [](V x) {
             return additive_attention_scores(x[0], x[1], x[2]);
         }},
        {"gru_cell", {{2, 9}, {2, 9}, {2, 3}}, [](V x) { return gru_cell(x[0], x[1], x[2]); }, -2.0, 2.0},
        {"gru_sequence", {{3, 2, 9}, {2, 3}, {9, 3}, {9}}, [](V x) {
             return gru_sequence(x[0], x[1], x[2], x[3]);
         }, -2.0, 2.0},
        {"gru_sequence_zero_h0", {{4, 2, 6}, {6, 2}}, [](V x) {
             return gru_sequence(x[0], Tensor(), x[1], Tensor());
         }, -2.0, 2.0},
    };
    return rows;
}

// gtest prints the row by name instead of dumping its bytes.
void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

}  // namespace

class Gradcheck : public ::testing::TestWithParam<Row> {};

TEST_P(Gradcheck, AnalyticMatchesNumeric) {
    const Row& row = GetParam();
    std::vector<Tensor> inputs;
    Generator gen(17);
    for (const Shape& s : row.shapes) {
        Tensor t = rand(s, &gen, row.lo, row.hi, DType::f64);
        t.requires_grad_();
        inputs.push_back(t);
    }
    const GradcheckResult r = gradcheck(row.fn, inputs);
    EXPECT_TRUE(r.ok) << row.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(table()),
                         [](const auto& p) { return p.param.name; });

// ctest runs each test in its own process, so this test runs every row's forward itself.
TEST(GradcheckCoverage, EveryBackwardNodeHasARow) {
    for (const Row& row : table()) {
        std::vector<Tensor> inputs;
        for (const Shape& s : row.shapes) inputs.push_back(full(s, 0.7, DType::f64).requires_grad_());
        collect_names(row.fn(inputs));
    }
    std::set<std::string> defined;
    const std::regex re("\"([A-Za-z0-9]+Backward)\"");
    for (const auto& entry : std::filesystem::recursive_directory_iterator(QKV_SOURCE_DIR "/src")) {
        if (entry.path().extension() != ".cpp") continue;
        std::ifstream in(entry.path());
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
            defined.insert((*it)[1]);
    }
    // ToBackward (float casts) cannot be checked by differences through float32 rounding; the
    // test ToBackward.PassesGradientThroughCast below covers it exactly.
    exercised().insert("ToBackward");
    // FlashAttentionBackward is fp32-only: its kernel's math is gradchecked in float64 through the
    // templated reference (tests/kernels/test_attention_kernels.cpp) and the fused backward is
    // compared with the math path's autograd in tests/ops/test_attention_dispatch.cpp.
    exercised().insert("FlashAttentionBackward");
    // LinearCrossEntropyBackward is fp32-only too: in float64 linear_cross_entropy is the composition
    // linear + cross_entropy (gradchecked by the linear_cross_entropy_smoothed row), and the fused
    // backward is compared with that composition's autograd in tests/ops/test_linear_cross_entropy.cpp.
    exercised().insert("LinearCrossEntropyBackward");
    // Nodes exercised elsewhere (attention, models) are listed in tests of their own files;
    // this suite must cover every node defined in src/ops/.
    ASSERT_FALSE(defined.empty());
    std::string missing;
    for (const auto& n : defined)
        if (!exercised().count(n)) missing += " " + n;
    EXPECT_TRUE(missing.empty()) << "backward nodes without a gradcheck row:" << missing;
}

TEST(ToBackward, PassesGradientThroughCast) {
    Tensor x = from_vector<double>({1.5, -2.0, 3.25}, {3}).requires_grad_();
    Tensor y = x.to(DType::f32);
    EXPECT_EQ(y.dtype(), DType::f32);
    y.backward(from_vector<float>({1.f, 2.f, -0.5f}, {3}));
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), DType::f64);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1.0, 2.0, -0.5}));
}
