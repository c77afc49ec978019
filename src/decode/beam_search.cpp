// Batched beam search over the model's incremental cache (decode::generate, with every option of
// DecodeOptions; greedy is its K = 1 case, on the fused greedy_next path when no scores are asked): the searching sources × K beams form one decoder batch, reordered after each step
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

/// Everything one call of generate carries from step to step. The decoder batch holds
/// act.size()·K rows, row a·K + k being beam k of source act[a] (the sources still searching, in
/// state order); a source that is done leaves the batch (with its cache rows) at the next reorder.
struct Search {
    models::Autoregressive& model;
    const DecodeOptions& opt;
    const char* who;  // names the deadline error
    int64_t B = 0, K = 0, V = 0, Ts = 0;
    std::vector<char> banned;   // V flags
    bool rules = false;         // a rule of process_row or sampling is on
    bool penalised = false;     // repetition penalty: the ranking sums the penalised entries
    bool track_attn = false;    // each hypothesis keeps its attention rows
    /// The plain greedy path: the model's greedy_next (fused with the output layer where it can
    /// be) chooses each row's token without the (rows, V) logits; log_prob and score stay 0.
    bool fused = false;
    std::vector<int64_t> src_len;  // with the coverage penalty
    std::vector<Generator> gens;   // with sampling: one stream per source
    std::unique_ptr<models::DecoderState> state;
    models::DecoderAttentionTrace own_trace;
    models::DecoderAttentionTrace* trace = nullptr;
    std::vector<Beam> beams;  // (B·K), by source
    std::vector<std::vector<Hypothesis>> finished;
    std::vector<char> done;
    std::vector<int64_t> last, act;  // this step's input per decoder row; the searching sources
    // This step's results per decoder row.
    std::vector<std::vector<float>> step_attn;
    Tensor logp_t, logits_t;       // (rows, V) unless fused
    int64_t n_top_row = 0;         // candidates per row: its best 2K tokens (sampling: its draw)
    std::vector<int64_t> tops;     // (rows · n_top_row), -1 where a row has fewer
    std::vector<double> top_proc;  // with rules: the processed log-probability of each top token
    std::vector<int64_t> parent, next_last;

    Search(models::Autoregressive& m, const Tensor& src, const Tensor& src_valid_len, const DecodeOptions& o,
           const char* w);
    double coverage(const std::vector<std::vector<float>>& attn, int64_t b) const {
        return coverage_penalty(attn, std::min(Ts, std::max<int64_t>(0, src_len[size_t(b)])), opt.coverage_penalty);
    }
};

Search::Search(models::Autoregressive& m, const Tensor& src, const Tensor& src_valid_len, const DecodeOptions& o,
               const char* w)
    : model(m), opt(o), who(w) {
    V = model.tgt_vocab_size();
    opt.validate(V);
    K = opt.beam_size;
    QKV_CHECK(src.defined() && src.dim() == 2, "decode: src must be (B, Ts)");
    B = src.size(0), Ts = src.size(1);
    banned.assign(size_t(V), 0);
    for (int64_t id : opt.banned) banned[size_t(id)] = 1;
    rules     = opt.needs_logits();
    penalised = opt.repetition_penalty != 1.0;
    // The coverage penalty reads each hypothesis's attention history, as return_attention does.
    track_attn = opt.return_attention || opt.coverage_penalty != 0.0;
    fused      = K == 1 && !rules && !track_attn && !opt.scores;
    if (opt.coverage_penalty != 0.0) src_len = src_valid_len.contiguous().to_vector<int64_t>();
    if (opt.sampling.enabled) {
        const auto ids = src.contiguous().to_vector<int64_t>();
        const auto vls = src_valid_len.contiguous().to_vector<int64_t>();
        QKV_CHECK(opt.sampling.keyed_by_source || B == 1, "decode: sampling.keyed_by_source false needs one source, got ", B);
        for (int64_t b = 0; b < B; ++b)
            gens.emplace_back(opt.sampling.keyed_by_source
                                  ? source_key(opt.sampling.seed, ids.data() + b * Ts,
                                               std::min(Ts, std::max<int64_t>(0, vls[size_t(b)])))
                                  : opt.sampling.seed);
    }
    state = model.init_state(src, src_valid_len);
    trace = opt.trace ? opt.trace : track_attn ? &own_trace : nullptr;
    state->trace = trace;
    if (K > 1) {
        std::vector<int64_t> rows(static_cast<size_t>(B * K));
        for (int64_t i = 0; i < B * K; ++i) rows[size_t(i)] = i / K;
        state->reorder(from_vector(rows, {B * K}));
    }
    // Only beam 0 of each source is live at the start, so the first step does not pick K copies
    // of the same token.
    beams.resize(static_cast<size_t>(B * K));
    for (int64_t b = 0; b < B; ++b) beams[size_t(b * K)].log_prob = beams[size_t(b * K)].search = 0.0;
    finished.resize(static_cast<size_t>(B));
    done.assign(size_t(B), 0);
    last.assign(size_t(B * K), opt.bos);
    act.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) act[size_t(b)] = b;
    n_top_row = fused ? 1 : 2 * K;
}

/// This step's cross-attention of the last block, mean over heads, per decoder row (step_attn).
void read_step_attention(Search& s, int64_t rows) {
    QKV_CHECK(!s.trace->cross.empty() && !s.trace->cross.back().empty(),
              "decode: return_attention: the model recorded no cross-attention for the step");
    const Tensor w = s.trace->cross.back().back().contiguous();  // (rows, H, 1, Ts')
    QKV_CHECK(w.dim() == 4 && w.size(0) == rows, "decode: return_attention: unexpected trace shape");
    const auto wv = w.to_vector<float>();
    const int64_t H = w.size(1), Tw = w.size(3), Ts = s.Ts;
    s.step_attn.assign(size_t(rows), std::vector<float>(size_t(Ts), 0.f));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t j = 0; j < std::min(Tw, Ts); ++j)
                s.step_attn[size_t(r)][size_t(j)] += wv[size_t((r * H + h) * Tw + j)] / float(H);
    if (s.trace == &s.own_trace) {
        s.own_trace.cross.clear();
        s.own_trace.self.clear();
    }
}

/// Each live row's best 2K tokens (with sampling: its one drawn token) from this step's logits,
/// rows spread over the threads (the scan is O(V) per row); tops and top_proc.
void score_rows(Search& s, const Tensor& logits_in) {
    const int64_t rows = int64_t(s.act.size()) * s.K, K = s.K, V = s.V, n_top_row = s.n_top_row;
    // Read in place: a (rows, V) copy per step would be fresh memory every time (page faults).
    s.logits_t = logits_in.contiguous();
    s.logp_t   = log_softmax(s.logits_t, 1).contiguous();
    QKV_CHECK(s.logp_t.dtype() == DType::f32, "beam_search: the model's logits must be float32, got ",
              dtype_name(s.logp_t.dtype()));
    const float* logp   = s.logp_t.data<float>();
    const float* logits = s.logits_t.data<float>();
    s.tops.assign(size_t(rows * n_top_row), -1);
    s.top_proc.assign(s.rules ? s.tops.size() : 0, kDead);
    std::exception_ptr sampling_error;
#pragma omp parallel
    {
        std::vector<int64_t> ids;
        std::vector<double> proc;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t b = s.act[size_t(r / K)];
            const Beam& bm = s.beams[size_t(b * K + r % K)];
            if (bm.log_prob == kDead) continue;
            if (!s.rules) {
                row_top(logp + r * V, V, s.banned, n_top_row, ids);
            } else {
                process_row(logits + r * V, V, bm.tokens, s.opt, s.banned, proc);
                if (s.opt.sampling.enabled) {
                    ids.clear();
                    bool any = false;
                    for (double x : proc) any = any || x != kDead;
                    // A throw must not leave the parallel region (std::terminate): kept for after it.
                    try {
                        if (any) ids.push_back(sample_from(sampling_distribution(proc, s.opt.sampling), s.gens[size_t(b)]));
                    } catch (...) {
#pragma omp critical(qkv_beam_sampling_error)
                        if (!sampling_error) sampling_error = std::current_exception();
                    }
                } else {
                    row_top_processed(proc, n_top_row, ids);
                }
                for (size_t j = 0; j < ids.size(); ++j) s.top_proc[size_t(r * n_top_row) + j] = proc[size_t(ids[j])];
            }
            std::copy(ids.begin(), ids.end(), s.tops.begin() + r * n_top_row);
        }
    }
    if (sampling_error) std::rethrow_exception(sampling_error);
}

/// The plain greedy path: each row's token from the model's greedy_next on the hidden rows.
void fused_rows(Search& s, const Tensor& hidden) {
    static const std::vector<char> none;
    const std::vector<int64_t> next =
        s.model.greedy_next(hidden, s.opt.banned.empty() ? none : s.banned).to_vector<int64_t>();
    s.tops = next;  // one candidate per row (every row is live: a done source has left the batch)
    s.logp_t = Tensor();
}

/// Ranks source act[a]'s candidates, sets aside the finished ones and extends its beams (parent,
/// next_last); marks the source done. Returns whether it is done.
bool select_source(Search& s, int64_t a, int64_t t, std::vector<Candidate>& cand) {
    const int64_t K = s.K, V = s.V, n_top_row = s.n_top_row, b = s.act[size_t(a)];
    const DecodeOptions& opt = s.opt;
    const float* logp = s.logp_t.defined() ? s.logp_t.data<float>() : nullptr;
    std::vector<Beam> next(static_cast<size_t>(K));
    // The best 2K candidates overall are among each live beam's best 2K tokens (the beam's
    // log-probability is a constant shift of its row), so only those are ranked.
    cand.clear();
    for (int64_t k = 0; k < K; ++k) {
        const Beam& bm = s.beams[size_t(b * K + k)];
        if (bm.log_prob == kDead) continue;
        const int64_t* top = s.tops.data() + (a * K + k) * n_top_row;
        for (int64_t j = 0; j < n_top_row && top[j] >= 0; ++j) {
            const double lp = bm.log_prob + (logp ? double(logp[(a * K + k) * V + top[j]]) : 0.0);
            // The penalised sum ranks only under a repetition penalty; otherwise the processed
            // entries are the model's own (or −inf), summed as the model's f32 values.
            const double sc = s.penalised ? bm.search + s.top_proc[size_t((a * K + k) * n_top_row + j)] : lp;
            cand.push_back({sc, lp, k, top[j]});
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
    auto& fin = s.finished[size_t(b)];
    int64_t n_live = 0;
    for (size_t r = 0; r < n_top && n_live < K; ++r) {
        const Candidate& c = cand[r];
        const Beam& from = s.beams[size_t(b * K + c.k)];
        if (c.v == opt.eos) {
            if (int64_t(r) < K) {
                Hypothesis h;
                h.tokens   = from.tokens;
                h.log_prob = c.lp;
                h.score    = c.s / length_penalty(int64_t(from.tokens.size()) + 1, opt.length_penalty);
                h.finished = true;
                if (s.track_attn) {
                    h.attention = from.attn;
                    h.attention.push_back(s.step_attn[size_t(a * K + c.k)]);
                }
                if (opt.coverage_penalty != 0.0) h.score += s.coverage(h.attention, b);
                fin.push_back(std::move(h));
            }
            continue;
        }
        Beam& nb = next[size_t(n_live)];
        nb.tokens = from.tokens;
        nb.tokens.push_back(c.v);
        nb.log_prob = c.lp;
        nb.search   = c.s;
        if (s.track_attn) {
            nb.attn = from.attn;  // the parent's history, then this step's row of the parent
            nb.attn.push_back(s.step_attn[size_t(a * K + c.k)]);
        }
        s.parent[size_t(a * K + n_live)]    = a * K + c.k;
        s.next_last[size_t(a * K + n_live)] = c.v;
        ++n_live;
    }
    // Done when K hypotheses are finished and no live beam, scored at its current length, beats
    // the K-th best of them.
    bool is_done = n_live == 0;
    if (int64_t(fin.size()) >= K) {
        std::vector<double> sc;
        for (auto& h : fin) sc.push_back(h.score);
        std::nth_element(sc.begin(), sc.begin() + (K - 1), sc.end(), std::greater<double>());
        const double kth       = sc[size_t(K - 1)];
        const double best_live = n_live > 0 ? next[0].search / length_penalty(t + 1, opt.length_penalty) : kDead;
        if (best_live <= kth) is_done = true;
    }
    if (is_done)
        for (auto& nb : next) nb.log_prob = kDead;
    for (int64_t k = 0; k < K; ++k) s.beams[size_t(b * K + k)] = std::move(next[size_t(k)]);
    s.done[size_t(b)] = is_done;
    return is_done;
}

/// Keeps the searching sources: their rows follow the surviving parents (no copy when nothing
/// moved, as in greedy decoding until a source finishes).
void compact(Search& s) {
    const int64_t A = int64_t(s.act.size()), K = s.K;
    std::vector<int64_t> index, kept, kept_last;
    bool identity = true;
    for (int64_t a = 0; a < A; ++a) {
        if (s.done[size_t(s.act[size_t(a)])]) continue;
        kept.push_back(s.act[size_t(a)]);
        for (int64_t k = 0; k < K; ++k) {
            identity = identity && s.parent[size_t(a * K + k)] == int64_t(index.size());
            index.push_back(s.parent[size_t(a * K + k)]);
            kept_last.push_back(s.next_last[size_t(a * K + k)]);
        }
    }
    if (!identity || int64_t(index.size()) != A * K) s.state->reorder(from_vector(index, {int64_t(index.size())}));
    s.act.swap(kept);
    s.last.swap(kept_last);
}

/// The n-best lists: sources cut at max_len add their live beams as unfinished hypotheses.
std::vector<std::vector<Hypothesis>> collect(Search& s) {
    const DecodeOptions& opt = s.opt;
    std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(s.B));
    for (int64_t b = 0; b < s.B; ++b) {
        auto& fin = s.finished[size_t(b)];
        if (!s.done[size_t(b)]) {
            for (int64_t k = 0; k < s.K; ++k) {
                const Beam& bm = s.beams[size_t(b * s.K + k)];
                if (bm.log_prob == kDead) continue;
                Hypothesis h;
                h.tokens    = bm.tokens;
                h.log_prob  = bm.log_prob;
                h.score     = bm.search / length_penalty(int64_t(bm.tokens.size()), opt.length_penalty);
                h.attention = bm.attn;
                if (opt.coverage_penalty != 0.0) h.score += s.coverage(h.attention, b);
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

}  // namespace

namespace detail {

std::vector<std::vector<Hypothesis>> generate_as(models::Autoregressive& model, const Tensor& src,
                                                 const Tensor& src_valid_len, const DecodeOptions& opt,
                                                 const char* who) {
    NoGradGuard ng;
    Search s(model, src, src_valid_len, opt, who);
    std::vector<Candidate> cand;
    for (int64_t t = 0; t < opt.max_len; ++t) {
        check_decode_deadline(who, t);
        const int64_t rows = int64_t(s.act.size()) * s.K;
        const Tensor hidden = model.decode_step_hidden(from_vector(s.last, {rows}), *s.state);
        if (s.fused) fused_rows(s, hidden);
        else score_rows(s, model.output_logits(hidden));
        if (s.track_attn) read_step_attention(s, rows);
        s.parent.resize(size_t(rows));
        for (int64_t i = 0; i < rows; ++i) s.parent[size_t(i)] = i;
        s.next_last = s.last;
        bool all_done = true;
        for (int64_t a = 0; a < int64_t(s.act.size()); ++a) all_done = select_source(s, a, t, cand) && all_done;
        if (opt.on_token)  // K = 1: a live beam's new token is final
            for (int64_t b : s.act)
                if (s.beams[size_t(b)].log_prob != kDead) opt.on_token(b, s.beams[size_t(b)].tokens.back());
        if (all_done || t + 1 == opt.max_len) break;
        compact(s);
    }
    return collect(s);
}

}  // namespace detail

std::vector<std::vector<Hypothesis>> generate(models::Autoregressive& model, const Tensor& src,
                                              const Tensor& src_valid_len, const DecodeOptions& opt) {
    return detail::generate_as(model, src, src_valid_len, opt, "generate");
}

std::vector<std::vector<Hypothesis>> beam_search(models::Autoregressive& model, const Tensor& src,
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

std::vector<std::vector<int64_t>> beam_decode(models::Autoregressive& model, const Tensor& src,
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
