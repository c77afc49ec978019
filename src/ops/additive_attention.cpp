// additive_attention_scores: checks, kernel choice, and the fused backward node (the tanh
// features are recomputed there, not saved). Math: kernels/ref/additive_attention.cpp.
#include "qkv/ops/additive_attention.h"

#include "kernels/cpu/additive_attention.h"
#include "kernels/ref/additive_attention.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

Tensor additive_attention_scores(const Tensor& q, const Tensor& k, const Tensor& w_v) {
    QKV_CHECK(q.defined() && k.defined() && w_v.defined(), "additive_attention_scores: q, k and w_v are required");
    QKV_CHECK(q.dim() == 3 && k.dim() == 3 && w_v.dim() == 1 && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && w_v.size(0) == q.size(2),
              "additive_attention_scores: need q (B, Tq, H), k (B, Tk, H), w_v (H), got ", q.shape(), ", ",
              k.shape(), ", ", w_v.shape());
    const DType dt = q.dtype();
    QKV_CHECK((dt == DType::f32 || dt == DType::f64) && k.dtype() == dt && w_v.dtype() == dt,
              "additive_attention_scores: q, k and w_v must share a float dtype, got ", dtype_name(dt), ", ",
              dtype_name(k.dtype()), ", ", dtype_name(w_v.dtype()));
    const int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), H = q.size(2);
    const Tensor qc = q.detach().contiguous(), kc = k.detach().contiguous(), wc = w_v.detach().contiguous();
    Tensor out = Tensor::empty({B, Tq, Tk}, dt);
    const bool fast = dt == DType::f32 && kernel_mode() == KernelMode::fast;
    QKV_DISPATCH_FLOAT(dt, "additive_attention_scores", {
        if constexpr (std::is_same_v<scalar_t, float>) {
            if (fast) {
                kernels::cpu::additive_scores_forward(
                    {ptr<float>(out), ptr<float>(qc), ptr<float>(kc), ptr<float>(wc), B, Tq, Tk, H});
                break;
            }
        }
        kernels::ref::additive_scores_forward<scalar_t>(
            {ptr<scalar_t>(out), ptr<scalar_t>(qc), ptr<scalar_t>(kc), ptr<scalar_t>(wc), B, Tq, Tk, H});
    });
    record(out, "AdditiveScoresBackward", {q, k, w_v}, [qc, kc, wc, B, Tq, Tk, H, fast](const Tensor& g) {
        const Tensor gc = g.contiguous();
        const DType d = qc.dtype();
        Tensor dq = Tensor::empty(qc.shape(), d), dk = Tensor::empty(kc.shape(), d), dw = Tensor::empty({H}, d);
        QKV_DISPATCH_FLOAT(d, "additive_attention_scores_backward", {
            if constexpr (std::is_same_v<scalar_t, float>) {
                if (fast) {
                    kernels::cpu::additive_scores_backward(
                        {nullptr, ptr<float>(qc), ptr<float>(kc), ptr<float>(wc), B, Tq, Tk, H},
                        {ptr<float>(dq), ptr<float>(dk), ptr<float>(dw), ptr<float>(gc)});
                    break;
                }
            }
            kernels::ref::additive_scores_backward<scalar_t>(
                {nullptr, ptr<scalar_t>(qc), ptr<scalar_t>(kc), ptr<scalar_t>(wc), B, Tq, Tk, H},
                {ptr<scalar_t>(dq), ptr<scalar_t>(dk), ptr<scalar_t>(dw), ptr<scalar_t>(gc)});
        });
        return std::vector<Tensor>{dq, dk, dw};
    });
    return out;
}

}  // namespace qkv
