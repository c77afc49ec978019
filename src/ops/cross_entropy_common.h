#pragma once
// Private: what cross_entropy and linear_cross_entropy share: the check of the target ids and the
// reduction of the per-position losses.
#include "ops/dispatch.h"
#include "qkv/ops/cross_entropy.h"

namespace qkv::detail {

/// Throws qkv::Error naming `op`, the first target outside [0, V) that is not ignore_index, and
/// its position.
inline void check_targets(const char* op, const int64_t* t, int64_t rows, int64_t V, int64_t ignore_index) {
    for (int64_t r = 0; r < rows; ++r)
        QKV_CHECK(t[r] == ignore_index || (t[r] >= 0 && t[r] < V), op, ": target ", t[r], " at position ", r,
                  " is out of range for ", V, " classes");
}

/// The loss from per-position losses `per`: `per` itself (none), their sum (sum) or sum / denom
/// (mean; 0 when denom is 0), as a scalar of per's dtype, summed in double. `scale` receives the
/// factor the sum was multiplied by (1 for none and sum): the backward's per-row gradient.
inline Tensor reduce_loss(const Tensor& per, Reduction reduction, double denom, double& scale) {
    scale = 1.0;
    if (reduction == Reduction::none) return per;
    double total = 0;
    QKV_DISPATCH_FLOAT(per.dtype(), "cross_entropy", {
        const scalar_t* pp = ptr<scalar_t>(per);
        for (int64_t r = 0, n = per.numel(); r < n; ++r) total += double(pp[r]);
    });
    if (reduction == Reduction::mean) scale = denom > 0 ? 1.0 / denom : 0.0;
    return full({}, total * scale, per.dtype());
}

}  // namespace qkv::detail
