#pragma once
// The decoding options of qkv (one struct for greedy, beam search and sampling; `qkv translate`,
// `qkv eval` and the library), the n-best hypothesis they return, and the plain per-row rules
// they apply to the next-token distribution. Sources: beam search D2L 10.8; length penalty GNMT
// (Wu et al. 2016, eq. 14); repetition penalty CTRL (Keskar et al. 2019, §4.1); no-repeat-n-gram
// (Paulus et al. 2018, "A Deep Reinforced Model for Abstractive Summarization"); coverage penalty
// GNMT (Wu et al. 2016, eq. 14); top-k sampling
// (Fan et al. 2018); top-p / nucleus sampling (Holtzman et al. 2020, eq. 3).
// Dim legend: V target vocabulary.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"

namespace qkv::models {
struct DecoderAttentionTrace;
}

namespace qkv::decode {

/// Random sampling instead of the search's maximum (`--sampling`).
struct SamplingOptions {
    bool enabled = false;
    /// The processed log-probabilities are divided by it before the softmax (> 0; < 1 sharpens).
    double temperature = 1.0;
    /// Keep only the top_k most probable tokens (0: all). top_k = 1 is greedy.
    int64_t top_k = 0;
    /// Keep the smallest set of most probable tokens whose probability sums to >= top_p
    /// (in (0, 1]; 1: all).
    double top_p = 1.0;
    /// With the same seed, the same source gives the same output (each source draws from its own
    /// stream, keyed by the seed and its token ids, so batch-mates and batch order do not matter).
    uint64_t seed = 0;
    /// false: the stream is Generator(seed) itself, not keyed by the source (one source only;
    /// `qkv generate`'s streams, so that its texts for a seed stay what they were).
    bool keyed_by_source = true;
};

struct DecodeOptions {
    int64_t bos = -1, eos = -1;    // required: target ids
    int64_t max_len = 20;          // most tokens per hypothesis, <eos> included (>= 1)
    int64_t beam_size = 1;         // K >= 1 (1: greedy)
    int64_t num_hypotheses = 1;    // n-best returned per source, best first (in [1, beam_size])
    /// α of the GNMT length penalty lp(n) = ((5 + n) / 6)^α; a hypothesis of n tokens (its <eos>
    /// counted) is ranked by score = log P / lp(n). α = 0 ranks by log-probability alone.
    double length_penalty = 0.6;
    /// β of the GNMT coverage penalty cp = β · Σ_i log(min(Σ_j a_ij, 1)) (>= 0; 0: off), added to
    /// the length-normalised score of every hypothesis the search returns or ranks as finished:
    /// a_ij is the cross-attention (last decoder block, mean over heads) of output token j on
    /// source position i, i over the source's valid positions (its <eos> included). Source
    /// positions the hypothesis barely attended to lower its score. It changes the ranking of
    /// finished hypotheses (and so the early stop), not the beam's expansion. A position with no
    /// attention at all gives −inf (the hypothesis ranks last). Needs a model that records
    /// cross-attention (the Transformer); with beam_size 1 it only changes `score`.
    double coverage_penalty = 0.0;
    /// <eos> is not emitted before this many tokens (0: no rule; 0 <= min_len <= max_len, or
    /// validate throws).
    int64_t min_len = 0;
    /// No n-gram of this size occurs twice in a hypothesis (0: no rule; >= 1).
    int64_t no_repeat_ngram_size = 0;
    /// CTRL repetition penalty θ (>= 1 discourages, 1: none): a token already in the hypothesis
    /// has its logit l replaced by l / θ when l > 0, l · θ otherwise, before the softmax.
    double repetition_penalty = 1.0;
    /// Target prefix: the hypothesis starts with these ids (forced; counted in its log-probability
    /// and its length). Must hold no <eos> and be shorter than max_len.
    std::vector<int64_t> prefix;
    /// Target ids never emitted (e.g. <unk>; never <eos>).
    std::vector<int64_t> banned;
    SamplingOptions sampling;  // requires beam_size == num_hypotheses == 1
    /// Fill Hypothesis::attention (the model's DecoderState trace, one step at a time).
    bool return_attention = false;
    /// false: Hypothesis::log_prob and score are left 0, and greedy decoding (beam_size 1, no
    /// rule of needs_logits, no attention or coverage penalty) takes the plain path of the
    /// model's greedy_next, fused with the output layer where it can be: no (rows, V) logits.
    bool scores = true;
    /// When non-null, receives the model's attention weights of every step
    /// (models::DecoderAttentionTrace: all decoder rows of the step, in the search's order; a
    /// source that is done has left the batch). Heatmaps read it with one source and beam_size 1.
    models::DecoderAttentionTrace* trace = nullptr;
    /// When set (beam_size 1 only: a beam's tokens are final only at the end), called with
    /// (source b, token id) for each token as the search chooses it, in order (streaming output;
    /// `qkv generate`). Not called for <eos>.
    std::function<void(int64_t source, int64_t token)> on_token;

    /// Throws qkv::Error naming the field when a value is out of range or the fields disagree;
    /// V is the target vocabulary size.
    void validate(int64_t V) const;
    /// Whether a rule of process_row or sampling is on (anything but bos, eos, max_len, beam_size,
    /// num_hypotheses, length_penalty, banned): the plain greedy path, which never holds the
    /// logits, cannot serve those.
    bool needs_logits() const;
};

struct Hypothesis {
    std::vector<int64_t> tokens;  // without <eos>, the prefix included
    /// Sum of the model's token log-probabilities (log_softmax of its logits, the same numbers a
    /// teacher-forced forward pass gives), <eos> included when emitted. Penalties and masks
    /// change which tokens are chosen, not this sum.
    double log_prob = 0;
    /// The ranking sum / lp(n), n = tokens.size() + finished: log_prob / lp(n) unless
    /// repetition_penalty != 1 (then the penalised log-probabilities are summed); plus the
    /// coverage penalty when coverage_penalty > 0.
    double score = 0;
    bool finished = false;        // emitted <eos> (false: cut at max_len)
    /// With return_attention: (n, Ts) row-major by output token (<eos> included when finished):
    /// the last decoder block's cross-attention weights, mean over heads, of the step that chose
    /// the token; with beam search each row comes from the beam the hypothesis descends from at
    /// that step (the history follows the back-pointers). Ts is src.size(1); columns the model
    /// did not read are 0.
    std::vector<std::vector<float>> attention;
};

/// Moses-style alignment "i-j ..." (0-based source word i, target token j): for each target token
/// j (one row of `attention`, (n, Ts)), the source position of its largest weight (the first on
/// ties), kept when i < src_len (the <eos> column and padding are dropped).
std::string alignment_pairs(const std::vector<std::vector<float>>& attention, int64_t src_len);

/// GNMT's coverage penalty β · Σ_{i < src_len} log(min(Σ_j attention[j][i], 1)) of one hypothesis
/// (attention (n, Ts) as Hypothesis::attention; src_len <= Ts). 0 when β = 0.
double coverage_penalty(const std::vector<std::vector<float>>& attention, int64_t src_len, double beta);

/// The processed log-probabilities of one row (plain reference; the search calls it per beam):
/// logits (V) f32 of the next token after `history` (the hypothesis so far, without <bos>) ->
/// out (V) f64: log_softmax of the logits after the repetition penalty, then −inf for banned ids,
/// for <eos> while history.size() < min_len, for the tokens that would repeat an n-gram, and for
/// every id but prefix[t] while t = history.size() < prefix.size() (prefix[t] keeps its value
/// after the banned ids: the length and n-gram rules do not apply to a forced token). `banned` is
/// empty or V flags.
void process_row(const float* logits, int64_t V, const std::vector<int64_t>& history,
                 const DecodeOptions& opt, const std::vector<char>& banned, std::vector<double>& out);

/// The sampling distribution of a row of processed log-probabilities (V, entries may be −inf):
/// softmax(logp / temperature) restricted to the top_k most probable ids (ties to the smaller id),
/// then to the smallest most-probable set whose mass is >= top_p, renormalised -> (V) f64
/// summing to 1. `opt.enabled` and `opt.seed` are not read. Temperature 0 is not greedy here:
/// greedy decoding is sampling off (or top_k = 1).
/// Throws qkv::Error naming the argument when temperature is not a finite number > 0, top_k < 0,
/// top_p is not in (0, 1], logp is empty, an entry is NaN or +inf, or every entry is −inf.
std::vector<double> sampling_distribution(const std::vector<double>& logp, const SamplingOptions& opt);

/// One draw from a distribution p (V) f64 (sums to 1): the smallest i with cumsum(p)[i] > u,
/// u = gen.uniform(); never an id of probability 0.
/// Throws qkv::Error when p is empty, an entry is negative, NaN or infinite, or the entries do not
/// sum to 1 within 1e-6 (all zeros among them).
int64_t sample_from(const std::vector<double>& p, Generator& gen);

}  // namespace qkv::decode
