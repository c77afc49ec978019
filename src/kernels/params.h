#pragma once
// Plain-data parameter structs for kernels (no Tensor): pointers, sizes, element strides, flags.
// Ops (src/ops/*.cpp) validate inputs and fill these; kernels assume valid input.
#include <cstdint>

namespace qkv::kernels {

/// Causal alignment when Tq != Tk. top_left: query i sees keys j <= i (PyTorch is_causal);
/// bottom_right: query i sees keys j <= i + (Tk - Tq) (FlashAttention >= 2.1, KV-cache decoding).
enum class CausalAlign : uint8_t { none, top_left, bottom_right };

/// Scaled dot-product attention over (B, H, Tq, D) x (B, Hkv, Tk, D) -> (B, H, Tq, Dv).
/// Element strides; the last dim of q, k, v, out (and dout/dq/dk/dv) is contiguous.
template <class T>
struct AttentionParams {
    const T* q = nullptr;
    const T* k = nullptr;
    const T* v = nullptr;
    T*       out = nullptr;
    float*   lse = nullptr;  // (B, H, Tq) contiguous logsumexp of the scaled, masked logits
    int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, D = 0, Dv = 0;  // H % Hkv == 0 (GQA/MQA)
    int64_t q_stride_b = 0, q_stride_h = 0, q_stride_t = 0;
    int64_t k_stride_b = 0, k_stride_h = 0, k_stride_t = 0;
    int64_t v_stride_b = 0, v_stride_h = 0, v_stride_t = 0;
    int64_t o_stride_b = 0, o_stride_h = 0, o_stride_t = 0;
    // valid_lens: keys j >= len are masked. rank 1: (B); rank 2: (B, Tq). nullptr when unused.
    const int64_t* valid_lens      = nullptr;
    int            valid_lens_rank = 0;
    CausalAlign    causal          = CausalAlign::none;
    // Optional mask broadcast to (B, H, Tq, Tk) through element strides (0 for broadcast dims):
    // bool_mask: 1 = keep, 0 = masked; additive_mask: added to the scaled logits (-inf = masked).
    const uint8_t* bool_mask     = nullptr;
    const T*       additive_mask = nullptr;
    int64_t m_stride_b = 0, m_stride_h = 0, m_stride_q = 0, m_stride_k = 0;
    float    scale        = 1.0f;
    float    dropout_p    = 0.0f;  // on probabilities; mask bit of (b,h,i,j) = philox(seed, offset)
    uint64_t dropout_seed = 0;
    uint64_t dropout_offset = 0;
};

/// Gradients for AttentionParams (same layouts; dq/dk/dv have q/k/v's shapes, contiguous).
template <class T>
struct AttentionGradParams {
    const T* dout = nullptr;  // (B, H, Tq, Dv) with o_stride_*
    T* dq = nullptr;          // (B, H, Tq, D) contiguous
    T* dk = nullptr;          // (B, Hkv, Tk, D) contiguous, written (not accumulated)
    T* dv = nullptr;          // (B, Hkv, Tk, Dv) contiguous, written
};

}  // namespace qkv::kernels
