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
/// Query head h reads key/value head h / (H / Hkv) (GQA; MQA when Hkv = 1).
///
/// Semantics (the reference kernel in ref/attention.h is the spec; docs/kernels/flash_attention.md):
///   s_ij = scale * q_i . k_j (+ additive_mask_ij); s_ij = -inf when key j is masked for row i
///   (j > attention_key_limit(), or bool_mask_ij == 0, or additive_mask_ij == -inf);
///   P_i = softmax(s_i); out_i = sum_j P_ij * Z_ij * v_j with the dropout factor
///   Z_ij = keep_ij / (1 - dropout_p); lse_i = log sum_j exp(s_ij).
///   A row with every key masked gives out_i = 0, lse_i = -inf and zero gradients (never NaN).
template <class T>
struct AttentionParams {
    const T* q   = nullptr;
    const T* k   = nullptr;
    const T* v   = nullptr;
    T*       out = nullptr;
    T*       lse = nullptr;  // (B, H, Tq) contiguous logsumexp of the scaled, masked logits
    // Optional (B, H, Tq): the rounding residual of lse (m + log l = lse + lse_lo: a Fast2Sum
    // split in the reference, a double sum split in the fast forward). The fast backward recomputes P = exp((s - lse) - lse_lo); without it P carries the
    // rounding of lse (relative error up to ulp(lse)/2, ~5e-4 for logits ~1e4). nullptr: unused.
    T*       lse_lo = nullptr;
    int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, D = 0, Dv = 0;  // H % Hkv == 0 (GQA/MQA)
    int64_t q_stride_b = 0, q_stride_h = 0, q_stride_t = 0;
    int64_t k_stride_b = 0, k_stride_h = 0, k_stride_t = 0;
    int64_t v_stride_b = 0, v_stride_h = 0, v_stride_t = 0;
    int64_t o_stride_b = 0, o_stride_h = 0, o_stride_t = 0;
    // valid_lens: keys j >= len are masked. rank 1: (B); rank 2: (B, Tq). nullptr when unused.
    const int64_t* valid_lens      = nullptr;
    int            valid_lens_rank = 0;
    CausalAlign    causal          = CausalAlign::none;
    // Sliding window (local attention): row i sees keys j with i' - window_left <= j <= i' +
    // window_right, i' = i + window_shift (0: top-left alignment; Tk - Tq: bottom-right); -1 =
    // unbounded on that side. Combined with valid_lens and causal by attention_key_first/limit.
    int64_t window_left = -1, window_right = -1, window_shift = 0;
    // Logit soft-capping (Gemma 2; FlashAttention's softcap): the scaled logit s becomes
    // softcap * tanh(s / softcap), before ALiBi and the masks; 0: none.
    float softcap = 0.0f;
    // ALiBi (Press et al. 2022, §3): s_ij -= alibi_slopes[h] * |i + Tk - Tq - j| (positions aligned
    // bottom-right, as FlashAttention does), after the soft cap; (H) floats, nullptr: none.
    const float* alibi_slopes = nullptr;
    // Optional mask broadcast to (B, H, Tq, Tk) through element strides (0 for broadcast dims):
    // bool_mask: 1 = keep, 0 = masked; additive_mask: added to the scaled logits (-inf = masked).
    // Both may be given at once.
    const uint8_t* bool_mask     = nullptr;
    const T*       additive_mask = nullptr;
    int64_t m_stride_b = 0, m_stride_h = 0, m_stride_q = 0, m_stride_k = 0;
    float    scale          = 1.0f;
    float    dropout_p      = 0.0f;  // on probabilities, in [0, 1); see attention_dropout_keep
    uint64_t dropout_seed   = 0;     // Philox key
    uint64_t dropout_offset = 0;     // first Philox counter (Generator::reserve(B*H*Tq*Tk))
    // bf16 compute (mixed precision, ops/precision.h): every operand of every product is rounded
    // to bf16 (RNE), as a bf16 tile kernel (AMX, vdpbf16ps) must convert it: q (before the scale
    // folds in), k, v and dO as the fast kernel reads them (into its workspace; the inputs are not
    // changed), P (times the dropout factor) before P·V and dV += Pᵀ dO, dS before dQ += dS K and
    // dK += dSᵀ Q. Scores, the online softmax (running max, row sums, O accumulator, logsumexp),
    // D = rowsum(dO ∘ O) (with the rounded dO) and every accumulation stay fp32. The reference
    // kernels ignore it (the bf16 check is float64 math on rounded inputs).
    bool bf16 = false;
};

/// Gradients for AttentionParams (dq/dk/dv have q/k/v's shapes). The backward kernels also read
/// AttentionParams::out and ::lse as the forward wrote them.
template <class T>
struct AttentionGradParams {
    const T* dout = nullptr;  // (B, H, Tq, Dv) with o_stride_*
    T* dq = nullptr;          // (B, H, Tq, D), written
    T* dk = nullptr;          // (B, Hkv, Tk, D), written (not accumulated)
    T* dv = nullptr;          // (B, Hkv, Tk, Dv), written
    // Element strides of dq, dk, dv (the last dim is contiguous). All three 0 (the default) means
    // contiguous: with_grad_strides fills them in. A (B, T, H, D) buffer seen as (B, H, T, D)
    // lets the caller merge heads without a copy.
    int64_t dq_stride_b = 0, dq_stride_h = 0, dq_stride_t = 0;
    int64_t dk_stride_b = 0, dk_stride_h = 0, dk_stride_t = 0;
    int64_t dv_stride_b = 0, dv_stride_h = 0, dv_stride_t = 0;
};

/// g with contiguous strides filled in for every gradient whose three strides are 0.
template <class T>
inline AttentionGradParams<T> with_grad_strides(const AttentionParams<T>& p, AttentionGradParams<T> g) {
    auto fill = [](int64_t& sb, int64_t& sh, int64_t& st, int64_t H, int64_t Tn, int64_t W) {
        if (sb == 0 && sh == 0 && st == 0) st = W, sh = Tn * W, sb = H * Tn * W;
    };
    fill(g.dq_stride_b, g.dq_stride_h, g.dq_stride_t, p.H, p.Tq, p.D);
    fill(g.dk_stride_b, g.dk_stride_h, g.dk_stride_t, p.Hkv, p.Tk, p.D);
    fill(g.dv_stride_b, g.dv_stride_h, g.dv_stride_t, p.Hkv, p.Tk, p.Dv);
    return g;
}

/// First key index query row i may see: the sliding window's left edge (0 without one; keys
/// j < first are masked).
template <class T>
inline int64_t attention_key_first(const AttentionParams<T>& p, int64_t i) {
    const int64_t f = p.window_left >= 0 ? i + p.window_shift - p.window_left : 0;
    return f < 0 ? 0 : f;
}

/// Last key index query row i of batch b may see from valid_lens, causal and the window's right
/// edge (keys j > limit are masked); -1 when the row sees no key (also when the window's left edge,
/// attention_key_first, lies past the limit). Bool/additive masks come on top of this.
template <class T>
inline int64_t attention_key_limit(const AttentionParams<T>& p, int64_t b, int64_t i) {
    int64_t lim = p.Tk - 1;
    if (p.valid_lens) {
        const int64_t len = p.valid_lens_rank == 1 ? p.valid_lens[b] : p.valid_lens[b * p.Tq + i];
        lim = len - 1 < lim ? len - 1 : lim;
    }
    if (p.causal == CausalAlign::top_left) lim = i < lim ? i : lim;
    if (p.causal == CausalAlign::bottom_right) lim = i + p.Tk - p.Tq < lim ? i + p.Tk - p.Tq : lim;
    if (p.window_right >= 0) lim = i + p.window_shift + p.window_right < lim ? i + p.window_shift + p.window_right : lim;
    if (lim >= 0 && attention_key_first(p, i) > lim) return -1;  // an empty window
    return lim < -1 ? -1 : lim;
}

/// Dropout on attention probabilities. Element (b, h, i, j) uses Philox counter
///   index = dropout_offset + ((b * H + h) * Tq + i) * Tk + j
/// and bits = philox::bits(dropout_seed, /*stream*/ 0, index); the element is kept when
/// philox::uniform01(bits) >= p, i.e. when (bits >> 8) >= attention_dropout_threshold(p).
/// The mask depends only on (seed, offset, b, h, i, j): forward and backward regenerate it, and it
/// does not depend on the thread count or the kernel (reference and fast kernels agree exactly).
inline uint32_t attention_dropout_threshold(float p) {
    if (!(p > 0.0f)) return 0;
    if (p >= 1.0f) return uint32_t(1) << 24;  // above every 24-bit value: drop all
    const double t = double(p) * 16777216.0;
    const uint32_t c = uint32_t(t);
    return double(c) < t ? c + 1 : c;  // ceil(p * 2^24)
}

/// Fused cross-entropy (log_softmax + NLL with label smoothing) over rows of logits (N, V),
/// contiguous. target (N) int64 in [0, V) or == ignore_index; weight (N) or nullptr (all 1);
/// label_smoothing ε in [0, 1]. The forward writes loss (N) and lse (N, nullable: the logsumexp
/// of every row); the backward reads lse. Semantics: ref/cross_entropy.h.
template <class T>
struct CrossEntropyParams {
    T*             loss            = nullptr;
    T*             lse             = nullptr;
    const T*       logits          = nullptr;
    const int64_t* target          = nullptr;
    const T*       weight          = nullptr;
    int64_t        N = 0, V = 0;
    int64_t        ignore_index    = -100;
    double         label_smoothing = 0.0;
};

/// Gradients for CrossEntropyParams: dlogits (N, V) overwritten (may alias logits) from
/// g_i = dloss[i·dloss_stride] (stride 0: one scalar gradient for every row).
template <class T>
struct CrossEntropyGradParams {
    T*       dlogits      = nullptr;
    const T* dloss        = nullptr;
    int64_t  dloss_stride = 1;
};

/// Additive-attention scores (Bahdanau et al. 2015, eq. 6; D2L 11.3.3):
/// scores[b, i, j] = Σ_h w[h] · tanh(q[b, i, h] + k[b, j, h]) with q (B, Tq, H) = W_q·queries,
/// k (B, Tk, H) = W_k·keys, w (H) = w_v; scores (B, Tq, Tk), written by the forward. Row-major and
/// contiguous. Semantics: ref/additive_attention.h.
template <class T>
struct AdditiveScoresParams {
    T*       scores = nullptr;
    const T* q      = nullptr;
    const T* k      = nullptr;
    const T* w      = nullptr;
    int64_t  B = 0, Tq = 0, Tk = 0, H = 0;
};

/// Gradients for AdditiveScoresParams from dscores (B, Tq, Tk): dq, dk, dw with q's, k's and w's
/// shapes, each nullable and overwritten.
template <class T>
struct AdditiveScoresGradParams {
    T*       dq      = nullptr;
    T*       dk      = nullptr;
    T*       dw      = nullptr;
    const T* dscores = nullptr;
};

/// One GRU step (Cho et al. 2014; PyTorch nn.GRU, gate order r, z, n): from gi = x·W_ihᵀ + b_ih and
/// gh = h·W_hhᵀ + b_hh, both (B, 3H) laid out [r | z | n] per row, and the previous state h (B, H),
/// the forward writes h_new (B, H; may alias h) and ws (B, 4H) = [r | z | n | gh_n] per row for the
/// backward (nullable). Row-major, contiguous. Semantics: ref/gru.h.
template <class T>
struct GruCellParams {
    T*       h_new = nullptr;
    T*       ws    = nullptr;
    const T* gi    = nullptr;
    const T* gh    = nullptr;
    const T* h     = nullptr;
    int64_t  B = 0, H = 0;
};

/// The backward of a GRU step: from dh_new (B, H), the forward's ws and h, writes dgi, dgh (B, 3H)
/// and dh (B, H; nullable), overwritten.
template <class T>
struct GruCellGradParams {
    T*       dgi    = nullptr;
    T*       dgh    = nullptr;
    T*       dh     = nullptr;
    const T* dh_new = nullptr;
    const T* ws     = nullptr;
    const T* h      = nullptr;
    int64_t  B = 0, H = 0;
};

/// A GRU layer's recurrence over Tn steps: gi (Tn, B, 3H) every step's input projection, h0 (B, H)
/// or nullptr (zeros), w_hh (3H, H), b_hh (3H) or nullptr; the forward writes out (Tn, B, H) and
/// ws (Tn, B, 4H) (nullable), as GruCellParams per step. Semantics: ref/gru.h.
template <class T>
struct GruSequenceParams {
    T*       out  = nullptr;
    T*       ws   = nullptr;
    const T* gi   = nullptr;
    const T* h0   = nullptr;
    const T* w_hh = nullptr;
    const T* b_hh = nullptr;
    int64_t  Tn = 0, B = 0, H = 0;
};

/// Backpropagation through time for GruSequenceParams: from dout (Tn, B, H) and the forward's ws,
/// out, h0 and w_hh, writes dgi (Tn, B, 3H) and, each nullable, dh0 (B, H), dw_hh (3H, H),
/// db_hh (3H); all overwritten.
template <class T>
struct GruSequenceGradParams {
    T*       dgi   = nullptr;
    T*       dh0   = nullptr;
    T*       dw_hh = nullptr;
    T*       db_hh = nullptr;
    const T* dout  = nullptr;
    const T* ws    = nullptr;
    const T* out   = nullptr;
    const T* h0    = nullptr;
    const T* w_hh  = nullptr;
    int64_t  Tn = 0, B = 0, H = 0;
};

/// Layer normalisation over the last dim of x (rows, N), contiguous: per row μ = mean(x),
/// σ² = mean((x − μ)²) (biased), r = 1/sqrt(σ² + eps), y = (x − μ)·r·γ + β. gamma, beta: (N) or
/// nullptr (γ = 1, β = 0). The forward writes y (may alias x) and mean, rstd (rows; nullable);
/// the backward reads x, mean, rstd, gamma. Semantics: ref/layer_norm.h.
/// Fused residual (D2L 11.7.3 AddNorm, y = LN(x + residual)): with `residual` (rows, N) set, the
/// forward first writes sum = x + residual (rows, N; required then, may alias x or residual) and
/// normalises sum instead of x; the backward is the plain one on x = sum, and its dx is the
/// gradient of both addends.
template <class T>
struct LayerNormParams {
    T*       y     = nullptr;
    T*       mean  = nullptr;
    T*       rstd  = nullptr;
    const T* x     = nullptr;
    const T* gamma = nullptr;
    const T* beta  = nullptr;
    int64_t  rows = 0, N = 0;
    double   eps   = 1e-5;
    const T* residual = nullptr;
    T*       sum      = nullptr;
};

/// Gradients for LayerNormParams: dx (rows, N), dgamma (N), dbeta (N), each nullable and
/// overwritten (not accumulated), from dy (rows, N). dx may alias dy.
template <class T>
struct LayerNormGradParams {
    T*       dx     = nullptr;
    T*       dgamma = nullptr;
    T*       dbeta  = nullptr;
    const T* dy     = nullptr;
};

/// One Adam / AdamW step on n elements (param, m, v updated in place; grad read). step = the step
/// number after incrementing (1 on the first call); hyperparameters are doubles (Python floats).
/// Formulas: ref/adam.h.
template <class T>
struct AdamParams {
    T*       param = nullptr;
    const T* grad  = nullptr;
    T*       m     = nullptr;
    T*       v     = nullptr;
    int64_t  n     = 0;
    double   lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
    bool     decoupled  = false;  // AdamW
    int64_t  step       = 1;
    double   grad_scale = 1.0;  // multiplies each gradient first (clip_grad_norm's factor)
};

/// One SGD step on n elements (torch.optim.SGD); momentum_buf (n) may be nullptr when
/// momentum == 0; first_step = the momentum buffer does not exist yet. Formulas: ref/adam.h.
template <class T>
struct SgdParams {
    T*       param        = nullptr;
    const T* grad         = nullptr;
    T*       momentum_buf = nullptr;
    int64_t  n            = 0;
    double   lr = 1e-2, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
    bool     nesterov = false, first_step = false;
};

/// `batch` independent row-major GEMMs C_i = alpha·op(A_i)·op(B_i) + beta·C_i with the same shapes
/// (cublasSgemmStridedBatched order): GEMM i reads A + i·stride_a, B + i·stride_b and writes
/// C + i·stride_c. op(A) is (M, K): A (M×K, lda >= K), or Aᵀ of a K×M matrix when trans_a
/// (lda >= M); op(B) is (K, N) likewise (ldb >= N, or >= K when trans_b); C is M×N (ldc >= N).
/// stride_a or stride_b may be 0 (a shared operand); the C blocks must not overlap or alias A/B.
/// beta == 0 overwrites C without reading it. Semantics: ref/matmul.h.
template <class T>
struct GemmBatchedParams {
    bool     trans_a = false, trans_b = false;
    int64_t  M = 0, N = 0, K = 0;
    T        alpha    = T(1);
    const T* A        = nullptr;
    int64_t  lda      = 0;
    int64_t  stride_a = 0;
    const T* B        = nullptr;
    int64_t  ldb      = 0;
    int64_t  stride_b = 0;
    T        beta     = T(0);
    T*       C        = nullptr;
    int64_t  ldc      = 0;
    int64_t  stride_c = 0;
    int64_t  batch    = 1;
};

}  // namespace qkv::kernels
