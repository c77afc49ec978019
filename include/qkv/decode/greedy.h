#pragma once
// Greedy decoding for encoder–decoder models (D2L EN predict_step / ZH predict_seq2seq, spec §6),
// batched, with the model's incremental cache (or, for checking, full recomputation per step).
// Dim legend: B batch, Ts source length, V target vocabulary.
#include <cstdint>
#include <vector>

#include "qkv/models/encoder_decoder.h"

namespace qkv::decode {

struct GreedyOptions {
    int64_t bos = -1;       // first decoder input (required)
    int64_t eos = -1;       // ends a row (required)
    int64_t max_len = 20;   // most tokens generated per row, <eos> included
    /// true: stop as soon as every row has produced <eos> (ZH, the anchor). false: always run
    /// max_len steps (D2L EN). Either way each output row is cut before its first <eos>.
    bool early_stop = true;
    /// false: recompute the whole decoder over the prefix at every step (O(t²) per token; the
    /// reference the cached path is tested against).
    bool use_cache = true;
    /// Target ids never emitted (e.g. <unk>: their logits are treated as −inf).
    std::vector<int64_t> banned;
    /// With use_cache: receives the decoder's per-step attention weights (heatmaps).
    models::DecoderAttentionTrace* trace = nullptr;
};

/// Translates a batch: src (B, Ts) i64 (ids + <eos>, padded), src_valid_len (B) i64. Returns
/// B token lists, each cut before its first <eos> (without <eos>). Runs without autograd history
/// in the model's current mode (call model.eval() first for deterministic output). Throws
/// qkv::Error when bos/eos/banned ids are outside the vocabulary, eos is banned, or max_len < 1.
std::vector<std::vector<int64_t>> greedy_decode(models::EncoderDecoder& model, const Tensor& src,
                                                const Tensor& src_valid_len,
                                                const GreedyOptions& opt);

}  // namespace qkv::decode
