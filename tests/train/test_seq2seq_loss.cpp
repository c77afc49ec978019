// seq2seq_loss: the masked loss equals hand-computed cross-entropy over non-pad labels and
// gives the gradients of masking full logits; the on-padding variant averages every position.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/ops/cross_entropy.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/loss.h"
#include "support/test_util.h"
#include "train/tiny_corpus.h"

namespace qkv::test {
namespace {

/// Sums of a few hundred fp32 log-probabilities: float rounding, well under 1e-5 relative.
constexpr double kTolLossRtol = 1e-5;
/// Same gradients, summed in another order (the output layer sees fewer rows): fp32 rounding of
/// sums over ~40 positions.
constexpr double kTolGradAtol = 1e-6;
constexpr double kTolGradRtol = 1e-4;

struct LossSetup {
    TinyCorpus c = tiny_corpus();
    std::unique_ptr<models::Transformer> m;
    Tensor src, vl, dec, label;
    LossSetup() {
        manual_seed(2);
        m = std::make_unique<models::Transformer>(tiny_config(c));
        m->eval();
        const auto& a = c.arrays;
        src = from_vector(a.src, {a.n, a.num_steps});
        vl = from_vector(a.src_valid_len, {a.n});
        dec = from_vector(a.dec_input, {a.n, a.num_steps});
        label = from_vector(a.label, {a.n, a.num_steps});
    }
    /// Mean CE by hand: over labels != pad, or over all positions.
    double by_hand(bool all) {
        NoGradGuard ng;
        const Tensor lp = log_softmax(m->forward(src, vl, dec), -1).contiguous();
        const auto v = lp.to_vector<float>();
        const auto lab = c.arrays.label;
        const int64_t V = lp.size(2);
        double s = 0;
        int64_t n = 0;
        for (size_t i = 0; i < lab.size(); ++i) {
            if (!all && lab[i] == c.tgt_vocab.pad()) continue;
            s -= v[i * size_t(V) + size_t(lab[i])];
            ++n;
        }
        return s / double(n);
    }
};

TEST(Seq2SeqLoss, MaskedLossIsMeanCrossEntropyOverRealTokens) {
    LossSetup s;
    train::Seq2SeqLossOptions o;
    o.pad = s.c.tgt_vocab.pad();
    auto l = s.m->forward_hidden(s.src, s.vl, s.dec);
    const auto r = train::seq2seq_loss(*s.m, l, s.label, o);
    int64_t tokens = 0;
    for (int64_t v : s.c.arrays.tgt_valid_len) tokens += v;
    EXPECT_EQ(r.tokens, tokens);
    EXPECT_EQ(r.positions, tokens);
    EXPECT_NEAR(r.loss.item(), s.by_hand(false), kTolLossRtol * s.by_hand(false));
}

TEST(Seq2SeqLoss, OnPaddingAveragesEveryPosition) {
    LossSetup s;
    train::Seq2SeqLossOptions o;
    o.pad = s.c.tgt_vocab.pad();
    o.on_padding = true;
    const auto r = train::seq2seq_loss(*s.m, s.m->forward_hidden(s.src, s.vl, s.dec), s.label, o);
    EXPECT_EQ(r.positions, s.c.arrays.n * s.c.arrays.num_steps);
    EXPECT_NEAR(r.loss.item(), s.by_hand(true), kTolLossRtol * s.by_hand(true));
    EXPECT_LT(r.tokens, r.positions);
}

TEST(Seq2SeqLoss, GatheredRowsGiveTheGradientsOfMaskedFullLogits) {
    LossSetup s;
    train::Seq2SeqLossOptions o;
    o.pad = s.c.tgt_vocab.pad();
    o.label_smoothing = 0.1;
    // (a) the loss as implemented (output layer on non-pad rows only)
    s.m->zero_grad();
    train::seq2seq_loss(*s.m, s.m->forward_hidden(s.src, s.vl, s.dec), s.label, o).loss.backward();
    std::vector<std::vector<float>> ga;
    for (auto& p : s.m->parameters()) ga.push_back(p.grad().to_vector<float>());
    // (b) full logits, pads ignored by the cross-entropy op
    s.m->zero_grad();
    CrossEntropyOptions ce;
    ce.ignore_index = s.c.tgt_vocab.pad();
    ce.label_smoothing = 0.1;
    const int64_t N = s.c.arrays.n * s.c.arrays.num_steps;
    cross_entropy(s.m->forward(s.src, s.vl, s.dec).reshape({N, -1}), s.label.reshape({N}), Tensor(), ce)
        .backward();
    auto params = s.m->parameters();
    for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(all_close(ga[i], params[i].grad().to_vector<float>(), kTolGradAtol, kTolGradRtol)) << i;
}

TEST(Seq2SeqLoss, PadFreeModelPathGivesTheSameLossAndGradients) {
    LossSetup s;
    train::Seq2SeqLossOptions o;
    o.pad = s.c.tgt_vocab.pad();
    // (a) from the hidden states of every position
    s.m->zero_grad();
    const auto ra = train::seq2seq_loss(*s.m, s.m->forward_hidden(s.src, s.vl, s.dec), s.label, o);
    ra.loss.backward();
    std::vector<std::vector<float>> ga;
    for (auto& p : s.m->parameters()) ga.push_back(p.grad().to_vector<float>());
    // (b) from the inputs: the blocks skip <pad> positions (forward_hidden_rows)
    s.m->zero_grad();
    const auto rb = train::seq2seq_loss(*s.m, s.src, s.vl, s.dec, s.label, o);
    rb.loss.backward();
    EXPECT_EQ(rb.tokens, ra.tokens);
    EXPECT_EQ(rb.positions, ra.positions);
    EXPECT_NEAR(rb.loss.item(), ra.loss.item(), kTolLossRtol * ra.loss.item());
    auto params = s.m->parameters();
    for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(all_close(params[i].grad().to_vector<float>(), ga[i], kTolGradAtol, kTolGradRtol)) << i;
    // on_padding: exactly the hidden-state overload
    o.on_padding = true;
    EXPECT_EQ(train::seq2seq_loss(*s.m, s.src, s.vl, s.dec, s.label, o).loss.item(),
              train::seq2seq_loss(*s.m, s.m->forward_hidden(s.src, s.vl, s.dec), s.label, o).loss.item());
    o.on_padding = false;
    const Tensor pads = full(s.label.shape(), double(o.pad), DType::i64);
    EXPECT_EQ(train::seq2seq_loss(*s.m, s.src, s.vl, s.dec, pads, o).loss.item(), 0.0);
    EXPECT_THROW(train::seq2seq_loss(*s.m, s.src, s.vl, s.dec, s.label.slice(1, 0, 3), o), Error);
}

TEST(Seq2SeqLoss, AllPadBatchGivesZeroAndChecksArguments) {
    LossSetup s;
    train::Seq2SeqLossOptions o;
    o.pad = s.c.tgt_vocab.pad();
    const Tensor h = s.m->forward_hidden(s.src, s.vl, s.dec);
    const Tensor pads = full(s.label.shape(), double(o.pad), DType::i64);
    EXPECT_EQ(train::seq2seq_loss(*s.m, h, pads, o).loss.item(), 0.0);
    EXPECT_THROW(train::seq2seq_loss(*s.m, h, s.label.slice(1, 0, 3), o), Error);
    o.pad = -1;
    EXPECT_THROW(train::seq2seq_loss(*s.m, h, s.label, o), Error);
}

}  // namespace
}  // namespace qkv::test
