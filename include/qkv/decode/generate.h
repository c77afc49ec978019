#pragma once
// One search for every decoding option (decode/options.h): beam search (D2L 10.8) batched over
// sources and beams with the model's incremental cache, greedy as its K = 1 case, and sampling,
// for every Autoregressive model (models/autoregressive.h): the translators and the language model.
// Dim legend: B sources, Ts source length, K beam size, V target vocabulary.
#include <vector>

#include "qkv/decode/options.h"
#include "qkv/models/autoregressive.h"

namespace qkv::decode {

/// For each of the B sources, the opt.num_hypotheses best hypotheses (fewer when the rules leave
/// no token to choose), best first. A candidate ending in <eos> is set aside as finished when it
/// ranks among the best K of its step; the other K best extend the beams. A source is done when
/// it has K finished hypotheses and none of its live beams (scored at the current length) beats
/// the worst of them, or at max_len (live beams then count as unfinished hypotheses). Candidates
/// are ranked by the sum of the processed log-probabilities (process_row), which equals log_prob
/// unless repetition_penalty != 1. With sampling, each source draws its next token from
/// sampling_distribution of its processed row. With K = 1 and opt.scores false (and no rule),
/// each token is the model's greedy_next (the first allowed maximum of its logits), without
/// the logits. src (B, Ts) i64, src_valid_len (B) i64: the conditioning input of
/// model.init_state (a translator's sources, a language model's prompts). Runs without autograd
/// history (call model.eval() first). Throws qkv::Error on bad options
/// (DecodeOptions::validate) or a src that is not (B, Ts); decode::DeadlineExceeded
/// (decode/deadline.h) when the calling thread's deadline passes.
std::vector<std::vector<Hypothesis>> generate(models::Autoregressive& model, const Tensor& src,
                                              const Tensor& src_valid_len, const DecodeOptions& opt);

namespace detail {
/// generate, with `who` naming the caller in the deadline error (greedy_decode).
std::vector<std::vector<Hypothesis>> generate_as(models::Autoregressive& model, const Tensor& src,
                                                 const Tensor& src_valid_len, const DecodeOptions& opt,
                                                 const char* who);
}  // namespace detail

}  // namespace qkv::decode
