#pragma once
// Reference scaled dot-product attention kernels (scalar, float/double): the specification the fast
// flash kernel (cpu/flash_attention.h) is tested against. Materialises one score row (Tk values)
// at a time; O(B*H*Tq*Tk*D) work, O(Tk) extra memory. Derivations: docs/kernels/flash_attention.md.
#include "kernels/params.h"

namespace qkv::kernels::ref {

/// Forward of softmax(scale * q k^T + masks) (dropout) v, D2L 11.3 (Vaswani et al. 2017, eq. 1).
/// q: (B, H, Tq, D), k: (B, Hkv, Tk, D), v: (B, Hkv, Tk, Dv) -> out: (B, H, Tq, Dv),
/// lse: (B, H, Tq). Masking, dropout and fully masked rows as documented on AttentionParams.
/// T = float or double; computes in T. Assumes validated input (the op checks shapes).
template <class T>
void attention_forward(const AttentionParams<T>& p);

/// Backward of attention_forward by the plain chain rule on each recomputed probability row:
///   dZP_ij = dout_i . v_j,  dP_ij = Z_ij dZP_ij,  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
///   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij Z_ij dout_i.
/// Writes dq (B, H, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, Dv), all contiguous; dk/dv sum
/// over the H/Hkv query heads sharing a key/value head. Reads q, k, v, dout (not out or lse).
template <class T>
void attention_backward(const AttentionParams<T>& p, const AttentionGradParams<T>& g);

}  // namespace qkv::kernels::ref
