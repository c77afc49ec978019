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

/// Sliding-window (local) attention (Beltagy et al. 2020, Longformer §3.1; FlashAttention 2's
/// window_size): query i sees keys j with i' − left <= j <= i' + right, both bounds inclusive, i'
/// the query's aligned position: i (top_left) or i + Tk − Tq (bottom_right, as cached decoding
/// aligns). −1 leaves that side unbounded; {-1, -1} is no window. A row whose window holds no key
/// (alone or with the other masks) gives output 0 and zero gradients. On the flash backend the
/// cost grows with Tq·(left + right + 1), not Tq·Tk: key tiles outside every row's window are
/// skipped.
struct SlidingWindow {
    int64_t left = -1, right = -1;
    CausalAlign align = CausalAlign::top_left;  // top_left or bottom_right (none is top_left)
    bool active() const { return left >= 0 || right >= 0; }
};

struct AttentionMask {
    /// int64 or float, (B): keys j >= valid_lens[b] masked for every query; (B, Tq): per query.
    /// Read as masked_softmax reads it (both backends): floats round up, > Tk (+inf) means Tk,
    /// < 0 (−inf) means 0, NaN throws.
    Tensor valid_lens;
    CausalAlign causal = CausalAlign::none;
    /// Optional tensor broadcastable to (B, H, Tq, Tk) (or (B, Tq, Tk) for rank-3 inputs):
    /// bool (true = attend) or float (added to the scaled logits; −inf = masked).
    Tensor mask;
    /// Combined with the masks above (a key is seen only when every mask lets it through).
    SlidingWindow window;
};

struct AttentionOptions {
    /// Multiplies q·kᵀ; 0 means 1/√D. Any other finite value (negative too, as in PyTorch) is used
    /// as given; NaN or ±inf throws naming scale.
    double scale = 0.0;
    double dropout = 0.0;             // on the attention weights, only when training
    bool training = false;
    Generator* gen = nullptr;         // dropout randomness; default generator when null
    AttentionBackend backend = AttentionBackend::automatic;
    /// Logit soft-capping (Gemma 2, Team 2024 §2; FlashAttention's softcap): each scaled logit s
    /// becomes softcap · tanh(s / softcap), before ALiBi and the masks; 0: off. Finite, >= 0.
    double softcap = 0.0;
    /// ALiBi (Press et al. 2022, §3): float32 (H) per-head slopes m_h (alibi_slopes(H) gives the
    /// paper's); the logit of query i and key j gets −m_h · |i + Tk − Tq − j| (positions aligned
    /// bottom-right, FlashAttention's convention; with a causal mask this is the paper's
    /// −m_h · (i − j)), after the soft cap. Never materialised as a Tq × Tk tensor on the flash
    /// backend. Undefined: off.
    Tensor alibi_slopes;
};

/// The ALiBi slopes of Press et al. 2022 (§3 and their reference code) for num_heads heads,
/// float32 (num_heads): for n a power of two, 2^(−8/n), 2^(−16/n), ..., 2^(−8); otherwise the n'
/// slopes of n' = the largest power of two below n, then every other slope of 2n' heads (the odd
/// powers 2^(−4/n'), 2^(−12/n'), ...) up to n. 8 heads: 1/2, 1/4, ..., 1/256; 12 heads: those
/// eight, then 2^−0.5, 2^−1.5, 2^−2.5, 2^−3.5. Throws qkv::Error when num_heads < 1.
Tensor alibi_slopes(int64_t num_heads);

/// q (B, H, Tq, D) or (B, Tq, D); k (B, Hkv, Tk, D) or (B, Tk, D); v likewise with Dv.
/// Returns (B, H, Tq, Dv) (or (B, Tq, Dv)). Masked logits never contribute; a query row with every
/// key masked gives output 0 and zero gradients (never NaN). A NaN or infinity stored in a key or
/// value row is never read by a query whose masks hide that key (any mask kind, both backends,
/// forward and backward): it reaches only the outputs (and gradients) of the queries that see it. Hkv must divide H (grouped-query).
/// When `weights` is non-null the math path runs and *weights receives the attention weights
/// (B, H, Tq, Tk) before dropout. Backend `automatic` uses flash when every filter passes
/// (QKV_ATTENTION=math|flash|auto overrides); forcing flash when it cannot run throws with the
/// reasons. Throws qkv::Error naming the argument and shapes on mismatch.
/// dtypes: q, k, v float32 or float64 alike; or all three bfloat16 (storage, core/bf16.h): then
/// they are widened (exactly) to float32, attention runs with bf16 compute (ops/precision.h) and
/// the output is rounded to bfloat16 (weights, when asked, stay float32); no gradient flows
/// through bfloat16 tensors (inference). Or all three float16 (storage, core/fp16.h; a mixed set
/// throws naming the three dtypes): widened exactly to float32 (F16C), attention computed in
/// fp32 whatever the thread's matmul precision (so logits q·k beyond fp16's 65504 do not
/// overflow, as they would in half arithmetic), masks as for float32 (a bfloat16 / float16
/// additive mask is widened; -inf hides a key; a fully masked row gives 0), the output rounded
/// once to float16 (RNE: relative error 2^-11 on top of fp32 attention's); weights stay float32;
/// no gradient (float16 tensors never require grad). This runs on every CPU the same way: no
/// tier computes in native half (AVX-512-FP16's vfmadd*ph / AMX-FP16 would need their own flash
/// kernel build, tested on such a machine; the fp32 kernels here already accumulate in fp32, as
/// PyTorch's CPU float16 attention does). Source: PyTorch's scaled_dot_product_attention, whose
/// CPU kernels accumulate float16 in float32 too.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionMask& mask = {},
                                    const AttentionOptions& opt = {}, Tensor* weights = nullptr);

/// Packed variable-length sequences (FlashAttention's varlen interface): q (Nq, H, D), k (Nk, Hkv,
/// D), v (Nk, Hkv, Dv) hold B sequences back to back, with int64 cumulative offsets cu_seqlens_q
/// and cu_seqlens_k of shape (B + 1) (0 first, Nq / Nk last, non-decreasing). Sequence b's queries
/// q[cu_q[b] : cu_q[b+1]] attend only to its keys k[cu_k[b] : cu_k[b+1]], exactly as
/// scaled_dot_product_attention of that sequence alone (as a batch of one) with `mask` and `opt`:
/// mask.causal and mask.window apply per sequence; valid_lens and mask tensors are refused (the
/// offsets are the lengths). No padding is computed. Returns (Nq, H, Dv), differentiable. Dropout
/// draws per sequence in order. Throws qkv::Error naming the argument on a shape or offset error.
Tensor varlen_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, const AttentionMask& mask = {},
                        const AttentionOptions& opt = {});

/// The backend `automatic` would choose for these arguments; when `why` is non-null it gets one
/// line per failed filter (like PyTorch's sdp_utils debug warnings).
AttentionBackend select_attention_backend(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask, const AttentionOptions& opt,
                                          bool need_weights, std::string* why = nullptr);

/// Process-wide override (the CLI's --attention): automatic leaves QKV_ATTENTION in charge.
void set_attention_backend(AttentionBackend b);
AttentionBackend attention_backend_override();
/// The process-wide choice calls with backend `automatic` start from: the override when set, else
/// QKV_ATTENTION (throws naming a bad value), else automatic.
AttentionBackend default_attention_backend();
/// "auto", "math" or "flash"; throws on anything else (names the bad value).
AttentionBackend parse_attention_backend(const std::string& s);

}  // namespace qkv
