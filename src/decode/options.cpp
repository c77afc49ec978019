// The decoding options' checks and the plain per-row rules: repetition penalty, masks, sampling.
#include "qkv/decode/options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "qkv/core/error.h"

namespace qkv::decode {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kSumTolerance = 1e-6;  // sample_from: |sum(p) - 1| allowed
}  // namespace

void DecodeOptions::validate(int64_t V) const {
    QKV_CHECK(bos >= 0 && bos < V && eos >= 0 && eos < V, "decode: bos and eos must be target ids in [0, ", V,
              "), got ", bos, ", ", eos);
    QKV_CHECK(max_len >= 1, "decode: max_len must be >= 1, got ", max_len);
    QKV_CHECK(beam_size >= 1, "decode: beam_size must be >= 1, got ", beam_size);
    QKV_CHECK(num_hypotheses >= 1 && num_hypotheses <= beam_size, "decode: num_hypotheses must be in [1, beam_size = ",
              beam_size, "], got ", num_hypotheses);
    QKV_CHECK(std::isfinite(length_penalty), "decode: length_penalty must be finite");
    QKV_CHECK(std::isfinite(coverage_penalty) && coverage_penalty >= 0,
              "decode: coverage_penalty must be a finite number >= 0, got ", coverage_penalty);
    QKV_CHECK(min_len >= 0 && min_len <= max_len, "decode: min_len must be in [0, max_len = ", max_len, "], got ",
              min_len);
    QKV_CHECK(no_repeat_ngram_size >= 0, "decode: no_repeat_ngram_size must be >= 0, got ", no_repeat_ngram_size);
    QKV_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0,
              "decode: repetition_penalty must be a finite number > 0, got ", repetition_penalty);
    QKV_CHECK(int64_t(prefix.size()) < max_len, "decode: the target prefix has ", prefix.size(),
              " tokens; max_len (", max_len, ") must be larger");
    for (size_t i = 0; i < prefix.size(); ++i)
        QKV_CHECK(prefix[i] >= 0 && prefix[i] < V && prefix[i] != eos, "decode: prefix token ", i, " (id ", prefix[i],
                  ") is outside [0, ", V, ") or is <eos>");
    for (int64_t id : banned)
        QKV_CHECK(id >= 0 && id < V && id != eos, "decode: banned id ", id, " is outside [0, ", V, ") or is <eos>");
    for (int64_t id : prefix)
        QKV_CHECK(std::find(banned.begin(), banned.end(), id) == banned.end(), "decode: prefix token id ", id,
                  " is banned");
    QKV_CHECK(!on_token || beam_size == 1, "decode: on_token streams the tokens of greedy search or sampling: "
              "beam_size must be 1, got ", beam_size);
    if (sampling.enabled) {
        QKV_CHECK(beam_size == 1 && num_hypotheses == 1, "decode: sampling draws one hypothesis: beam_size and "
                  "num_hypotheses must be 1, got ", beam_size, " and ", num_hypotheses);
        QKV_CHECK(std::isfinite(sampling.temperature) && sampling.temperature > 0,
                  "decode: sampling temperature must be a finite number > 0, got ", sampling.temperature);
        QKV_CHECK(sampling.top_k >= 0, "decode: sampling top_k must be >= 0, got ", sampling.top_k);
        QKV_CHECK(sampling.top_p > 0 && sampling.top_p <= 1, "decode: sampling top_p must be in (0, 1], got ",
                  sampling.top_p);
    }
}

bool DecodeOptions::needs_logits() const {
    return min_len > 0 || no_repeat_ngram_size > 0 || repetition_penalty != 1.0 ||
           !prefix.empty() || sampling.enabled;
}

double coverage_penalty(const std::vector<std::vector<float>>& attention, int64_t src_len, double beta) {
    if (beta == 0.0) return 0.0;
    double cp = 0;
    for (int64_t i = 0; i < src_len; ++i) {
        double cov = 0;
        for (const auto& row : attention)
            if (i < int64_t(row.size())) cov += double(row[size_t(i)]);
        cp += std::log(std::min(cov, 1.0));
    }
    return beta * cp;
}

void process_row(const float* logits, int64_t V, const std::vector<int64_t>& history, const DecodeOptions& opt,
                 const std::vector<char>& banned, std::vector<double>& out) {
    out.assign(size_t(V), 0.0);
    for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(logits[v]);
    if (opt.repetition_penalty != 1.0) {
        std::vector<char> seen(size_t(V), 0);
        for (int64_t id : history) {
            if (seen[size_t(id)]) continue;
            seen[size_t(id)] = 1;
            double& l = out[size_t(id)];
            l = l > 0 ? l / opt.repetition_penalty : l * opt.repetition_penalty;
        }
    }
    // log_softmax in double
    double mx = kNegInf;
    for (double x : out) mx = std::max(mx, x);
    double sum = 0;
    for (double x : out) sum += std::exp(x - mx);
    const double lse = mx + std::log(sum);
    for (double& x : out) x -= lse;

    if (!banned.empty())
        for (int64_t v = 0; v < V; ++v)
            if (banned[size_t(v)]) out[size_t(v)] = kNegInf;
    const auto t = int64_t(history.size());
    // A forced prefix token keeps its log-probability through the length and n-gram rules: the
    // user asked for it (a prefix that repeats an n-gram gave a -inf row, so no output at all).
    const bool forcing = t < int64_t(opt.prefix.size());
    const double forced = forcing ? out[size_t(opt.prefix[size_t(t)])] : 0.0;
    if (t < opt.min_len) out[size_t(opt.eos)] = kNegInf;
    const int64_t n = opt.no_repeat_ngram_size;
    if (n == 1) {
        for (int64_t id : history) out[size_t(id)] = kNegInf;
    } else if (n > 1 && t >= n - 1) {
        // Every earlier position whose n-1 tokens equal the last n-1 bans the token that followed.
        for (int64_t s = 0; s + n - 1 < t; ++s)
            if (std::equal(history.begin() + s, history.begin() + s + n - 1, history.end() - (n - 1)))
                out[size_t(history[size_t(s + n - 1)])] = kNegInf;
    }
    if (forcing) {
        std::fill(out.begin(), out.end(), kNegInf);
        out[size_t(opt.prefix[size_t(t)])] = forced;
    }
}

std::vector<double> sampling_distribution(const std::vector<double>& logp, const SamplingOptions& opt) {
    // DecodeOptions::validate's checks, for callers that come here directly: temperature 0 divided
    // every log-probability into -inf or NaN, and the draw then took the last id.
    QKV_CHECK(std::isfinite(opt.temperature) && opt.temperature > 0,
              "sampling_distribution: temperature must be a finite number > 0, got ", opt.temperature);
    QKV_CHECK(opt.top_k >= 0, "sampling_distribution: top_k must be >= 0 (0: all), got ", opt.top_k);
    QKV_CHECK(opt.top_p > 0 && opt.top_p <= 1, "sampling_distribution: top_p must be in (0, 1], got ", opt.top_p);
    QKV_CHECK(!logp.empty(), "sampling_distribution: logp is empty (one log-probability per target id is needed)");
    const auto V = int64_t(logp.size());
    std::vector<int64_t> ids;
    for (int64_t v = 0; v < V; ++v) {
        const double l = logp[size_t(v)];
        QKV_CHECK(!std::isnan(l) && l != -kNegInf, "sampling_distribution: logp[", v, "] is ", l,
                  " (log-probabilities are finite or -inf)");
        if (l != kNegInf) ids.push_back(v);
    }
    QKV_CHECK(!ids.empty(), "sampling: every token of the row is excluded (all log-probabilities are -inf)");
    // Most probable first, ties to the smaller id.
    std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return logp[size_t(a)] > logp[size_t(b)]; });
    if (opt.top_k > 0 && int64_t(ids.size()) > opt.top_k) ids.resize(size_t(opt.top_k));
    std::vector<double> p(ids.size());
    const double mx = logp[size_t(ids[0])] / opt.temperature;
    double sum = 0;
    for (size_t i = 0; i < ids.size(); ++i) sum += p[i] = std::exp(logp[size_t(ids[i])] / opt.temperature - mx);
    size_t kept = ids.size();
    if (opt.top_p < 1.0) {
        double cum = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            cum += p[i] / sum;
            if (cum >= opt.top_p) {
                kept = i + 1;
                break;
            }
        }
    }
    double kept_sum = 0;
    for (size_t i = 0; i < kept; ++i) kept_sum += p[i];
    std::vector<double> out(size_t(V), 0.0);
    for (size_t i = 0; i < kept; ++i) out[size_t(ids[i])] = p[i] / kept_sum;
    return out;
}

int64_t sample_from(const std::vector<double>& p, Generator& gen) {
    QKV_CHECK(!p.empty(), "sample_from: p is empty (one probability per target id is needed)");
    double total = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        QKV_CHECK(std::isfinite(p[i]) && p[i] >= 0, "sample_from: p[", i, "] is ", p[i],
                  " (probabilities are finite and >= 0)");
        total += p[i];
    }
    // Rounding leaves sampling_distribution's sums within ~1e-15 of 1; anything further is not a
    // distribution (the draw would favour the last id, or never reach it).
    QKV_CHECK(std::abs(total - 1) <= kSumTolerance, "sample_from: p sums to ", total,
              ", not 1: not a probability distribution");
    const double u = gen.uniform();
    double cum = 0;
    int64_t last = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0) continue;
        last = int64_t(i);
        cum += p[i];
        if (cum > u) return int64_t(i);
    }
    return last;  // u above the rounded total (some p[i] > 0: the sum is ~1)
}

std::string alignment_pairs(const std::vector<std::vector<float>>& attention, int64_t src_len) {
    std::string out;
    for (size_t j = 0; j < attention.size(); ++j) {
        const auto& row = attention[j];
        if (row.empty()) continue;
        const auto i = int64_t(std::max_element(row.begin(), row.end()) - row.begin());
        if (i >= src_len) continue;
        if (!out.empty()) out += ' ';
        out += std::to_string(i) + "-" + std::to_string(j);
    }
    return out;
}

}  // namespace qkv::decode
