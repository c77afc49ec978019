#pragma once
// Fast fp32 fused cross-entropy: one read of the logits per row in the forward (blocks of 4096
// logits: max and Σx, then Σexp from L1, merged with a running max), one read + one write in the
// backward; AVX-512 / AVX2 polynomial exp, OpenMP over rows. Same semantics and signatures as
// kernels::ref (ref/cross_entropy.h).
// Kernels assume valid input (the op checks shapes, ids and ranges) and never throw.
#include <cstdint>

namespace qkv::kernels::cpu {

/// logits: (N, V) fp32; target: (N) int64 (valid or == ignore_index); weight: (N) or nullptr.
/// loss_i = w_i·[(1 − ε)(lse_i − x_it) + ε(lse_i − mean_v x_iv)], 0 for ignored rows;
/// lse (N, nullable) = logsumexp of each row. ε = label_smoothing.
void cross_entropy_forward(float* loss,
                           float* lse,
                           const float* logits,
                           const int64_t* target,
                           const float* weight,
                           int64_t N,
                           int64_t V,
                           int64_t ignore_index,
                           double label_smoothing);

/// dlogits_iv = dloss[i·dloss_stride]·w_i·(exp(x_iv − lse_i) − q_v), q = (1 − ε)onehot + ε/V;
/// 0 for ignored rows. dlogits (N, V) is overwritten and may alias logits.
void cross_entropy_backward(float* dlogits,
                            const float* dloss,
                            int64_t dloss_stride,
                            const float* logits,
                            const float* lse,
                            const int64_t* target,
                            const float* weight,
                            int64_t N,
                            int64_t V,
                            int64_t ignore_index,
                            double label_smoothing);

}  // namespace qkv::kernels::cpu
