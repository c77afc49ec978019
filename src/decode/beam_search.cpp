// Batched beam search over the model's incremental cache: the searching sources × K beams form one
// decoder batch, reordered after each step to follow the surviving parents; a source that is done
// leaves the batch. Each beam row contributes only its best 2K tokens to the ranking.
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

/// ids of the n largest entries of row[0, V) that are not banned, best first; ties go to the
/// smaller id (the order the full sort of candidates uses). O(V·n) with n = 2K small.
void row_top(const float* row, int64_t V, const std::vector<char>& banned, int64_t n,
             std::vector<int64_t>& ids) {
    ids.clear();
    for (int64_t v = 0; v < V; ++v) {
        if (banned[size_t(v)]) continue;
        const float x = row[v];
        if (int64_t(ids.size()) == n && !(x > row[ids.back()])) continue;  // not better than the n-th
        if (int64_t(ids.size()) < n) ids.push_back(v);
        else ids.back() = v;
        // bubble up: strictly larger values move ahead; equal values keep the smaller id first
        for (size_t i = ids.size() - 1; i > 0 && x > row[ids[i - 1]]; --i) std::swap(ids[i], ids[i - 1]);
    }
}

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

    // Sources still searching, in state order: the decoder batch holds act.size()·K rows, row
    // a·K + k being beam k of source act[a]. A finished source leaves the batch (with its cache
    // rows) at the next reorder, so the step cost follows the sources still searching.
    std::vector<int64_t> act(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) act[size_t(b)] = b;
    for (int64_t t = 0; t < opt.max_len; ++t) {
        const int64_t A = int64_t(act.size());
        // Read in place: a (A·K, V) copy per step would be fresh memory every time (page faults).
        const Tensor logp_t = log_softmax(model.decode_step(from_vector(last, {A * K}), *state), 1).contiguous();
        QKV_CHECK(logp_t.dtype() == DType::f32, "beam_search: the model's logits must be float32, got ",
                  dtype_name(logp_t.dtype()));
        const float* logp = logp_t.data<float>();
        // Each live row's best 2K tokens, rows spread over the threads (the scan is O(V) per row).
        const int64_t n_top_row = 2 * K;
        std::vector<int64_t> tops(static_cast<size_t>(A * K * n_top_row), -1);
#pragma omp parallel
        {
            std::vector<int64_t> ids;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < A * K; ++r) {
                if (beams[size_t(act[size_t(r / K)] * K + r % K)].log_prob == kDead) continue;
                row_top(logp + r * V, V, banned, n_top_row, ids);
                std::copy(ids.begin(), ids.end(), tops.begin() + r * n_top_row);
            }
        }
        std::vector<int64_t> parent(static_cast<size_t>(A * K));
        for (int64_t i = 0; i < A * K; ++i) parent[size_t(i)] = i;
        std::vector<int64_t> next_last = last;
        bool all_done = true;
        for (int64_t a = 0; a < A; ++a) {
            const int64_t b = act[size_t(a)];
            std::vector<Beam> next(static_cast<size_t>(K));
            // The best 2K candidates overall are among each live beam's best 2K tokens (the
            // beam's log-probability is a constant shift of its row), so only those are ranked.
            cand.clear();
            for (int64_t k = 0; k < K; ++k) {
                const Beam& bm = beams[size_t(b * K + k)];
                if (bm.log_prob == kDead) continue;
                const float* row = logp + (a * K + k) * V;
                const int64_t* top = tops.data() + (a * K + k) * n_top_row;
                for (int64_t j = 0; j < n_top_row && top[j] >= 0; ++j)
                    cand.push_back({bm.log_prob + double(row[top[j]]), k, top[j]});
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
                Beam& nb = next[size_t(n_live)];
                nb.tokens = from.tokens;
                nb.tokens.push_back(c.v);
                nb.log_prob = c.s;
                parent[size_t(a * K + n_live)] = a * K + c.k;
                next_last[size_t(a * K + n_live)] = c.v;
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
                    n_live > 0 ? next[0].log_prob / length_penalty(t + 1, opt.length_penalty) : kDead;
                if (best_live <= kth) done[size_t(b)] = 1;
            }
            if (n_live == 0) done[size_t(b)] = 1;
            if (done[size_t(b)])
                for (auto& nb : next) nb.log_prob = kDead;
            for (int64_t k = 0; k < K; ++k) beams[size_t(b * K + k)] = std::move(next[size_t(k)]);
            all_done = all_done && done[size_t(b)];
        }
        if (all_done) break;
        // Keep the searching sources: their rows follow the surviving parents.
        std::vector<int64_t> index, kept, kept_last;
        for (int64_t a = 0; a < A; ++a) {
            if (done[size_t(act[size_t(a)])]) continue;
            kept.push_back(act[size_t(a)]);
            for (int64_t k = 0; k < K; ++k) {
                index.push_back(parent[size_t(a * K + k)]);
                kept_last.push_back(next_last[size_t(a * K + k)]);
            }
        }
        state->reorder(from_vector(index, {int64_t(index.size())}));
        act.swap(kept);
        last.swap(kept_last);
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
