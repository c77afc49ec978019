#pragma once
// Greedy decoding (D2L EN predict_step / ZH predict_seq2seq, spec §6): a thin wrapper over
// decode::generate with beam size 1 on the fused greedy_next path (decode/generate.h), or, for
// checking the cache, over the model's teacher-forced forward recomputed at every step
// (models::TeacherForcedDecoding).
// Dim legend: B batch, Ts source length, V target vocabulary.
#include <cstdint>
#include <vector>

#include "qkv/models/encoder_decoder.h"

namespace qkv::decode {

struct GreedyOptions {
    int64_t bos = -1;       // first decoder input (required)
    int64_t eos = -1;       // ends a row (required)
    int64_t max_len = 20;   // most tokens generated per row, <eos> included
    /// false: recompute the whole decoder over the prefix at every step (O(t²) per token; the
    /// reference the cached path is tested against; needs an EncoderDecoder).
    bool use_cache = true;
    /// Target ids never emitted (e.g. <unk>: their logits are treated as −inf).
    std::vector<int64_t> banned;
    /// Receives the decoder's per-step attention weights (heatmaps; DecodeOptions::trace).
    models::DecoderAttentionTrace* trace = nullptr;
};

/// Translates a batch: src (B, Ts) i64 (ids + <eos>, padded), src_valid_len (B) i64. Returns
/// B token lists, each cut before its first <eos> (without <eos>); a row stops at its <eos> and
/// the batch when every row has (ZH, the anchor; D2L EN's fixed max_len steps give the same
/// lists). Runs without autograd history in the model's current mode (call model.eval() first
/// for deterministic output). Throws qkv::Error when bos/eos/banned ids are outside the
/// vocabulary, eos is banned, max_len < 1, or use_cache is false for a model that is not an
/// EncoderDecoder.
std::vector<std::vector<int64_t>> greedy_decode(models::Autoregressive& model, const Tensor& src,
                                                const Tensor& src_valid_len,
                                                const GreedyOptions& opt);

}  // namespace qkv::decode
