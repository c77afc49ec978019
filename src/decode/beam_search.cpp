// Batched beam search over the model's incremental cache (decode::generate, with every option of
// DecodeOptions): the searching sources × K beams form one decoder batch, reordered after each step
// to follow the surviving parents; a source that is done leaves the batch. Each beam row
// contributes only its best 2K tokens to the ranking (with sampling: its one drawn token).
#include "qkv/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/deadline.h"
#include "qkv/ops/softmax.h"

namespace qkv::decode {

namespace {

constexpr double kDead = -std::numeric_limits<double>::infinity();

double length_penalty(int64_t n, double alpha) {
    return alpha == 0.0 ? 1.0 : std::pow((5.0 + double(n)) / 6.0, alpha);
}

struct Beam {
    std::vector<int64_t> tokens;
    double log_prob = kDead;  // the model's log-probabilities summed
    double search = kDead;    // the processed ones summed (the ranking)
    std::vector<std::vector<float>> attn;  // with return_attention: one row per token
};

struct Candidate {
    double s;   // search sum
    double lp;  // model sum
    int64_t k, v;
};

/// A source's own sampling stream: splitmix64 over the seed and its valid token ids.
uint64_t source_key(uint64_t seed, const int64_t* ids, int64_t n) {
    auto mix = [](uint64_t z) {
        z += 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    };
    uint64_t h = mix(seed);
    for (int64_t i = 0; i < n; ++i) h = mix(h ^ uint64_t(ids[i]));
    return h;
}

/// ids of the n largest finite entries of row[0, V), best first; ties go to the smaller id.
void row_top_processed(const std::vector<double>& row, int64_t n, std::vector<int64_t>& ids) {
    ids.clear();
    const auto V = int64_t(row.size());
    for (int64_t v = 0; v < V; ++v) {
        const double x = row[size_t(v)];
        if (x == kDead) continue;
        if (int64_t(ids.size()) == n && !(x > row[size_t(ids.back())])) continue;
        if (int64_t(ids.size()) < n) ids.push_back(v);
        else ids.back() = v;
        for (size_t i = ids.size() - 1; i > 0 && x > row[size_t(ids[i - 1])]; --i) std::swap(ids[i], ids[i - 1]);
    }
}

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

std::vector<std::vector<Hypothesis>> generate(models::EncoderDecoder& model, const Tensor& src,
                                              const Tensor& src_valid_len, const DecodeOptions& opt) {
    const int64_t V = model.tgt_vocab_size();
    opt.validate(V);
    const int64_t K = opt.beam_size;
    QKV_CHECK(src.defined() && src.dim() == 2, "decode: src must be (B, Ts)");
    std::vector<char> banned(static_cast<size_t>(V), 0);
    for (int64_t id : opt.banned) banned[size_t(id)] = 1;
    const bool rules     = opt.needs_logits();
    const bool penalised = opt.repetition_penalty != 1.0;
    // The coverage penalty reads each hypothesis's attention history, as return_attention does.
    const bool track_attn = opt.return_attention || opt.coverage_penalty != 0.0;
    std::vector<int64_t> src_len;
    if (opt.coverage_penalty != 0.0) src_len = src_valid_len.contiguous().to_vector<int64_t>();
    auto coverage = [&](const std::vector<std::vector<float>>& attn, int64_t b) {
        return coverage_penalty(attn, std::min(src.size(1), std::max<int64_t>(0, src_len[size_t(b)])),
                                opt.coverage_penalty);
    };
    std::vector<Generator> gens;
    if (opt.sampling.enabled) {
        const Tensor s_c = src.contiguous(), vl_c = src_valid_len.contiguous();
        const auto ids = s_c.to_vector<int64_t>();
        const auto vls = vl_c.to_vector<int64_t>();
        const int64_t Ts = src.size(1);
        for (int64_t b = 0; b < src.size(0); ++b)
            gens.emplace_back(source_key(opt.sampling.seed, ids.data() + b * Ts,
                                         std::min(Ts, std::max<int64_t>(0, vls[size_t(b)]))));
    }
    const int64_t B = src.size(0);
    NoGradGuard ng;

    auto state = model.init_state(src, src_valid_len);
    const int64_t Ts = src.size(1);
    models::DecoderAttentionTrace trace;
    if (track_attn) state->trace = &trace;
    std::vector<int64_t> rows(static_cast<size_t>(B * K));
    for (int64_t i = 0; i < B * K; ++i) rows[size_t(i)] = i / K;
    state->reorder(from_vector(rows, {B * K}));

    // Only beam 0 of each source is live at the start, so the first step does not pick K copies
    // of the same token.
    std::vector<Beam> beams(static_cast<size_t>(B * K));
    for (int64_t b = 0; b < B; ++b) beams[size_t(b * K)].log_prob = beams[size_t(b * K)].search = 0.0;
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
        detail::check_decode_deadline("generate", t);
        const int64_t A = int64_t(act.size());
        // Read in place: a (A·K, V) copy per step would be fresh memory every time (page faults).
        const Tensor logits_t = model.decode_step(from_vector(last, {A * K}), *state).contiguous();
        // This step's cross-attention of the last block, mean over heads, per decoder row.
        std::vector<std::vector<float>> step_attn;
        if (track_attn) {
            QKV_CHECK(!trace.cross.empty() && !trace.cross.back().empty(),
                      "decode: return_attention: the model recorded no cross-attention for the step");
            const Tensor w = trace.cross.back().back().contiguous();  // (A·K, H, 1, Ts')
            QKV_CHECK(w.dim() == 4 && w.size(0) == A * K, "decode: return_attention: unexpected trace shape");
            const auto wv = w.to_vector<float>();
            const int64_t H = w.size(1), Tw = w.size(3);
            step_attn.assign(size_t(A * K), std::vector<float>(size_t(Ts), 0.f));
            for (int64_t r = 0; r < A * K; ++r)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t j = 0; j < std::min(Tw, Ts); ++j)
                        step_attn[size_t(r)][size_t(j)] += wv[size_t((r * H + h) * Tw + j)] / float(H);
            trace.cross.clear();
            trace.self.clear();
        }
        const Tensor logp_t   = log_softmax(logits_t, 1).contiguous();
        QKV_CHECK(logp_t.dtype() == DType::f32, "beam_search: the model's logits must be float32, got ",
                  dtype_name(logp_t.dtype()));
        const float* logp = logp_t.data<float>();
        // Each live row's best 2K tokens, rows spread over the threads (the scan is O(V) per row).
        const int64_t n_top_row = 2 * K;
        std::vector<int64_t> tops(static_cast<size_t>(A * K * n_top_row), -1);
        // With rules: the processed log-probability of each row's top tokens (the ranking's terms).
        std::vector<double> top_proc(rules ? tops.size() : 0, kDead);
        const float* logits = logits_t.data<float>();
        std::exception_ptr sampling_error;
#pragma omp parallel
        {
            std::vector<int64_t> ids;
            std::vector<double> proc;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < A * K; ++r) {
                const int64_t b = act[size_t(r / K)];
                const Beam& bm = beams[size_t(b * K + r % K)];
                if (bm.log_prob == kDead) continue;
                if (!rules) {
                    row_top(logp + r * V, V, banned, n_top_row, ids);
                } else {
                    process_row(logits + r * V, V, bm.tokens, opt, banned, proc);
                    if (opt.sampling.enabled) {
                        ids.clear();
                        bool any = false;
                        for (double x : proc) any = any || x != kDead;
                        // A throw must not leave the parallel region (std::terminate): kept for after it.
                        try {
                            if (any) ids.push_back(sample_from(sampling_distribution(proc, opt.sampling), gens[size_t(b)]));
                        } catch (...) {
#pragma omp critical(qkv_beam_sampling_error)
                            if (!sampling_error) sampling_error = std::current_exception();
                        }
                    } else {
                        row_top_processed(proc, n_top_row, ids);
                    }
                    for (size_t j = 0; j < ids.size(); ++j) top_proc[size_t(r * n_top_row) + j] = proc[size_t(ids[j])];
                }
                std::copy(ids.begin(), ids.end(), tops.begin() + r * n_top_row);
            }
        }
        if (sampling_error) std::rethrow_exception(sampling_error);
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
                for (int64_t j = 0; j < n_top_row && top[j] >= 0; ++j) {
                    const double lp = bm.log_prob + double(row[top[j]]);
                    // The penalised sum ranks only under a repetition penalty; otherwise the processed
                    // entries are the model's own (or −inf), summed as the model's f32 values.
                    const double s = penalised ? bm.search + top_proc[size_t((a * K + k) * n_top_row + j)] : lp;
                    cand.push_back({s, lp, k, top[j]});
                }
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
                        h.log_prob = c.lp;
                        h.score    = c.s / length_penalty(int64_t(from.tokens.size()) + 1, opt.length_penalty);
                        h.finished = true;
                        if (track_attn) {
                            h.attention = from.attn;
                            h.attention.push_back(step_attn[size_t(a * K + c.k)]);
                        }
                        if (opt.coverage_penalty != 0.0) h.score += coverage(h.attention, b);
                        finished[size_t(b)].push_back(std::move(h));
                    }
                    continue;
                }
                Beam& nb = next[size_t(n_live)];
                nb.tokens = from.tokens;
                nb.tokens.push_back(c.v);
                nb.log_prob = c.lp;
                nb.search   = c.s;
                if (track_attn) {
                    nb.attn = from.attn;  // the parent's history, then this step's row of the parent
                    nb.attn.push_back(step_attn[size_t(a * K + c.k)]);
                }
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
                    n_live > 0 ? next[0].search / length_penalty(t + 1, opt.length_penalty) : kDead;
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
                h.score    = bm.search / length_penalty(int64_t(bm.tokens.size()), opt.length_penalty);
                h.attention = bm.attn;
                if (opt.coverage_penalty != 0.0) h.score += coverage(h.attention, b);
                fin.push_back(std::move(h));
            }
        }
        std::stable_sort(fin.begin(), fin.end(),
                         [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
        if (int64_t(fin.size()) > opt.num_hypotheses) fin.resize(size_t(opt.num_hypotheses));
        if (!opt.return_attention)
            for (auto& h : fin) h.attention.clear();
        out[size_t(b)] = std::move(fin);
    }
    return out;
}

std::vector<std::vector<Hypothesis>> beam_search(models::EncoderDecoder& model, const Tensor& src,
                                                 const Tensor& src_valid_len, const BeamOptions& opt) {
    DecodeOptions d;
    d.beam_size      = opt.beam_size;
    d.bos            = opt.bos;
    d.eos            = opt.eos;
    d.max_len        = opt.max_len;
    d.length_penalty = opt.length_penalty;
    d.num_hypotheses = opt.num_return;
    d.banned         = opt.banned;
    return generate(model, src, src_valid_len, d);
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
