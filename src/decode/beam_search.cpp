// Batched beam search over the model's incremental cache: B sources × K beams as one decoder
// batch of B·K rows, reordered after each step to follow the surviving parents.
#include "qkv/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/softmax.h"

namespace qkv::decode {

namespace {

constexpr double kDead = -std::numeric_limits<double>::infinity();

double length_penalty(int64_t n, double alpha) {
    return alpha == 0.0 ? 1.0 : std::pow((5.0 + double(n)) / 6.0, alpha);
}

struct Beam {
    std::vector<int64_t> tokens;
    double log_prob = kDead;
};

struct Candidate {
    double s;
    int64_t k, v;
};

}  // namespace

std::vector<std::vector<Hypothesis>> beam_search(models::EncoderDecoder& model, const Tensor& src,
                                                 const Tensor& src_valid_len,
                                                 const BeamOptions& opt) {
    const int64_t V = model.tgt_vocab_size();
    const int64_t K = opt.beam_size;
    QKV_CHECK(K >= 1, "beam_search: beam_size must be >= 1, got ", K);
    QKV_CHECK(opt.num_return >= 1 && opt.num_return <= K, "beam_search: num_return must be in [1, ",
              K, "], got ", opt.num_return);
    QKV_CHECK(opt.bos >= 0 && opt.bos < V && opt.eos >= 0 && opt.eos < V,
              "beam_search: bos and eos must be target ids in [0, ", V, "), got ", opt.bos, ", ",
              opt.eos);
    QKV_CHECK(opt.max_len >= 1, "beam_search: max_len must be >= 1, got ", opt.max_len);
    QKV_CHECK(std::isfinite(opt.length_penalty), "beam_search: length_penalty must be finite");
    QKV_CHECK(src.defined() && src.dim() == 2, "beam_search: src must be (B, Ts)");
    std::vector<char> banned(static_cast<size_t>(V), 0);
    for (int64_t id : opt.banned) {
        QKV_CHECK(id >= 0 && id < V && id != opt.eos, "beam_search: banned id ", id, " is outside [0, ",
                  V, ") or is <eos>");
        banned[size_t(id)] = 1;
    }
    const int64_t B = src.size(0);
    NoGradGuard ng;

    auto state = model.init_state(src, src_valid_len);
    std::vector<int64_t> rows(static_cast<size_t>(B * K));
    for (int64_t i = 0; i < B * K; ++i) rows[size_t(i)] = i / K;
    state->reorder(from_vector(rows, {B * K}));

    // Only beam 0 of each source is live at the start, so the first step does not pick K copies
    // of the same token.
    std::vector<Beam> beams(static_cast<size_t>(B * K));
    for (int64_t b = 0; b < B; ++b) beams[size_t(b * K)].log_prob = 0.0;
    std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(B));
    std::vector<char> done(size_t(B), 0);
    std::vector<int64_t> last(size_t(B * K), opt.bos);
    std::vector<Candidate> cand;
    std::vector<Candidate> top;

    for (int64_t t = 0; t < opt.max_len; ++t) {
        Tensor logp_t = log_softmax(model.decode_step(from_vector(last, {B * K}), *state), 1);
        const std::vector<float> logp = logp_t.to_vector<float>();
        std::vector<Beam> next(static_cast<size_t>(B * K));
        std::vector<int64_t> parent(static_cast<size_t>(B * K));
        for (int64_t i = 0; i < B * K; ++i) parent[size_t(i)] = i;
        bool all_done = true;
        for (int64_t b = 0; b < B; ++b) {
            if (done[size_t(b)]) continue;
            cand.clear();
            for (int64_t k = 0; k < K; ++k) {
                const Beam& bm = beams[size_t(b * K + k)];
                if (bm.log_prob == kDead) continue;
                const float* row = logp.data() + (b * K + k) * V;
                for (int64_t v = 0; v < V; ++v)
                    if (!banned[size_t(v)]) cand.push_back({bm.log_prob + double(row[v]), k, v});
            }
            // Best 2K candidates, ties broken by (beam, token) order so that K = 1 is argmax.
            const size_t n_top = std::min(cand.size(), size_t(2 * K));
            auto better = [](const Candidate& x, const Candidate& y) {
                if (x.s != y.s) return x.s > y.s;
                if (x.k != y.k) return x.k < y.k;
                return x.v < y.v;
            };
            std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(n_top), cand.end(), better);
            int64_t n_live = 0;
            for (size_t r = 0; r < n_top && n_live < K; ++r) {
                const Candidate& c = cand[r];
                const Beam& from = beams[size_t(b * K + c.k)];
                if (c.v == opt.eos) {
                    if (int64_t(r) < K) {
                        Hypothesis h;
                        h.tokens   = from.tokens;
                        h.log_prob = c.s;
                        h.score    = c.s / length_penalty(int64_t(from.tokens.size()) + 1, opt.length_penalty);
                        h.finished = true;
                        finished[size_t(b)].push_back(std::move(h));
                    }
                    continue;
                }
                Beam& nb = next[size_t(b * K + n_live)];
                nb.tokens = from.tokens;
                nb.tokens.push_back(c.v);
                nb.log_prob = c.s;
                parent[size_t(b * K + n_live)] = b * K + c.k;
                last[size_t(b * K + n_live)] = c.v;
                ++n_live;
            }
            // Done when K hypotheses are finished and no live beam, scored at its current length,
            // beats the K-th best of them.
            auto& fin = finished[size_t(b)];
            if (int64_t(fin.size()) >= K) {
                std::vector<double> sc;
                for (auto& h : fin) sc.push_back(h.score);
                std::nth_element(sc.begin(), sc.begin() + (K - 1), sc.end(), std::greater<double>());
                const double kth = sc[size_t(K - 1)];
                const double best_live =
                    n_live > 0 ? next[size_t(b * K)].log_prob / length_penalty(t + 1, opt.length_penalty)
                               : kDead;
                if (best_live <= kth) done[size_t(b)] = 1;
            }
            if (n_live == 0) done[size_t(b)] = 1;
            if (done[size_t(b)])
                for (int64_t k = 0; k < K; ++k) next[size_t(b * K + k)].log_prob = kDead;
            all_done = all_done && done[size_t(b)];
        }
        beams.swap(next);
        if (all_done) break;
        state->reorder(from_vector(parent, {B * K}));
    }
    // Sources cut at max_len: their live beams become unfinished hypotheses.
    std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
        auto& fin = finished[size_t(b)];
        if (!done[size_t(b)]) {
            for (int64_t k = 0; k < K; ++k) {
                const Beam& bm = beams[size_t(b * K + k)];
                if (bm.log_prob == kDead) continue;
                Hypothesis h;
                h.tokens   = bm.tokens;
                h.log_prob = bm.log_prob;
                h.score    = bm.log_prob / length_penalty(int64_t(bm.tokens.size()), opt.length_penalty);
                fin.push_back(std::move(h));
            }
        }
        std::stable_sort(fin.begin(), fin.end(),
                         [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
        if (int64_t(fin.size()) > opt.num_return) fin.resize(size_t(opt.num_return));
        out[size_t(b)] = std::move(fin);
    }
    return out;
}

std::vector<std::vector<int64_t>> beam_decode(models::EncoderDecoder& model, const Tensor& src,
                                              const Tensor& src_valid_len, const BeamOptions& opt) {
    BeamOptions o = opt;
    o.num_return = 1;
    auto hyps = beam_search(model, src, src_valid_len, o);
    std::vector<std::vector<int64_t>> out;
    out.reserve(hyps.size());
    for (auto& h : hyps) out.push_back(h.empty() ? std::vector<int64_t>{} : h.front().tokens);
    return out;
}

}  // namespace qkv::decode
