#pragma once
// Beam search for encoder–decoder models (D2L 10.8 "Beam Search"; length normalisation of Wu et
// al. 2016, GNMT eq. 14), batched over sources and beams, using the model's incremental cache.
// Dim legend: B sources, K beam size, V target vocabulary.
#include <cstdint>
#include <vector>

#include "qkv/decode/generate.h"

namespace qkv::decode {

/// The beam-search subset of DecodeOptions (kept for existing callers; beam_search converts it).
struct BeamOptions {
    int64_t beam_size = 4;         // K >= 1
    int64_t bos = -1, eos = -1;    // required
    int64_t max_len = 20;          // most tokens per hypothesis, <eos> included
    /// α of the GNMT length penalty lp(n) = ((5 + n) / 6)^α; a hypothesis of n tokens (its <eos>
    /// counted) is ranked by log P / lp(n). α = 0 ranks by log-probability alone.
    double length_penalty = 0.6;
    int64_t num_return = 1;        // hypotheses returned per source (<= beam_size), best first
    std::vector<int64_t> banned;   // target ids never emitted (e.g. <unk>)
};


/// For each of the B sources, the num_return best hypotheses. A candidate ending in <eos> is
/// set aside as finished when it ranks among the best K of its step; the other K best extend
/// the beams. A source is done when it has K finished hypotheses and none of its live beams
/// (scored at the current length) beats the worst of them, or at max_len (live beams then count as
/// unfinished hypotheses). With K = 1 this is exactly greedy decoding. src (B, Ts) i64,
/// src_valid_len (B) i64. Throws qkv::Error on bad options.
std::vector<std::vector<Hypothesis>> beam_search(models::Autoregressive& model, const Tensor& src,
                                                 const Tensor& src_valid_len,
                                                 const BeamOptions& opt);

/// The best hypothesis's tokens for each source (convenience over beam_search).
std::vector<std::vector<int64_t>> beam_decode(models::Autoregressive& model, const Tensor& src,
                                              const Tensor& src_valid_len, const BeamOptions& opt);

}  // namespace qkv::decode
