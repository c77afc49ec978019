#pragma once
// Scaled dot-product attention (D2L 11.3.2; Vaswani et al. 2017, eq. 1) with masks, dropout and
// two backends: `math` (composition of differentiable ops; the reference) and `flash` (a fused
// O(N)-memory CPU kernel, docs/kernels/flash_attention.md). Dim legend: B batch, H heads,
// Hkv key/value heads, Tq queries, Tk keys, D head dim, Dv value dim.
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"

namespace qkv {

enum class AttentionBackend { automatic, math, flash };

/// How causal masking aligns when Tq != Tk. top_left: query i sees keys j <= i (PyTorch's
/// is_causal, and D2L's training-time dec_valid_lens = 1..T); bottom_right: query i sees keys
/// j <= i + Tk − Tq (FlashAttention >= 2.1; the last query sees every key, as in cached decoding).
enum class CausalAlign { none, top_left, bottom_right };

struct AttentionMask {
    /// int64 or float, (B): keys j >= valid_lens[b] masked for every query; (B, Tq): per query.
    /// Read as masked_softmax reads it (both backends): floats round up, > Tk (+inf) means Tk,
    /// < 0 (−inf) means 0, NaN throws.
    Tensor valid_lens;
    CausalAlign causal = CausalAlign::none;
    /// Optional tensor broadcastable to (B, H, Tq, Tk) (or (B, Tq, Tk) for rank-3 inputs):
    /// bool (true = attend) or float (added to the scaled logits; −inf = masked).
    Tensor mask;
};

struct AttentionOptions {
    /// Multiplies q·kᵀ; 0 means 1/√D. Any other finite value (negative too, as in PyTorch) is used
    /// as given; NaN or ±inf throws naming scale.
    double scale = 0.0;
    double dropout = 0.0;             // on the attention weights, only when training
    bool training = false;
    Generator* gen = nullptr;         // dropout randomness; default generator when null
    AttentionBackend backend = AttentionBackend::automatic;
};

/// q (B, H, Tq, D) or (B, Tq, D); k (B, Hkv, Tk, D) or (B, Tk, D); v likewise with Dv.
/// Returns (B, H, Tq, Dv) (or (B, Tq, Dv)). Masked logits never contribute; a query row with every
/// key masked gives output 0 and zero gradients (never NaN). Hkv must divide H (grouped-query).
/// When `weights` is non-null the math path runs and *weights receives the attention weights
/// (B, H, Tq, Tk) before dropout. Backend `automatic` uses flash when every filter passes
/// (QKV_ATTENTION=math|flash|auto overrides); forcing flash when it cannot run throws with the
/// reasons. Throws qkv::Error naming the argument and shapes on mismatch.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionMask& mask = {},
                                    const AttentionOptions& opt = {}, Tensor* weights = nullptr);

/// The backend `automatic` would choose for these arguments; when `why` is non-null it gets one
/// line per failed filter (like PyTorch's sdp_utils debug warnings).
AttentionBackend select_attention_backend(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask, const AttentionOptions& opt,
                                          bool need_weights, std::string* why = nullptr);

/// Process-wide override (the CLI's --attention): automatic leaves QKV_ATTENTION in charge.
void set_attention_backend(AttentionBackend b);
AttentionBackend attention_backend_override();
/// "auto", "math" or "flash"; throws on anything else (names the bad value).
AttentionBackend parse_attention_backend(const std::string& s);

}  // namespace qkv
