// GRU ops: checks, kernel choice (SIMD f32 / reference f64 or QKV_KERNELS=ref), and the fused
// backward nodes. Math and derivations: kernels/ref/gru.cpp.
#include "qkv/ops/gru.h"

#include "kernels/cpu/gru.h"
#include "kernels/ref/gru.h"
#include "ops/dispatch.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

namespace {
bool fast(DType dt) { return dt == DType::f32 && kernel_mode() == KernelMode::fast; }

template <class T>
const T* opt_ptr(const Tensor& t) {
    return t.defined() ? ptr<T>(t) : nullptr;
}

void check_float(const Tensor& t, DType dt, const char* op, const char* what) {
    QKV_CHECK(t.dtype() == dt, op, ": ", what, " has dtype ", dtype_name(t.dtype()), ", expected ",
              dtype_name(dt));
}
}  // namespace

// Forward and backward per element: kernels/ref/gru.cpp. Saves ws = [r | z | n | gh_n] (B, 4H)
// and h; the backward returns (dgi, dgh, dh).
Tensor gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h) {
    QKV_CHECK(gi.defined() && gh.defined() && h.defined(), "gru_cell: gi, gh and h are required");
    QKV_CHECK(h.dim() == 2, "gru_cell: h must be (B, H), got ", h.shape());
    const int64_t B = h.shape()[0], H = h.shape()[1];
    QKV_CHECK(gi.shape() == Shape({B, 3 * H}) && gh.shape() == Shape({B, 3 * H}),
              "gru_cell: gi ", gi.shape(), " and gh ", gh.shape(), " must be (B, 3H) = (", B, ", ",
              3 * H, ") for h ", h.shape());
    QKV_CHECK(h.dtype() == DType::f32 || h.dtype() == DType::f64,
              "gru_cell: expected a float tensor, got ", dtype_name(h.dtype()));
    check_float(gi, h.dtype(), "gru_cell", "gi");
    check_float(gh, h.dtype(), "gru_cell", "gh");
    const bool need_grad = any_requires_grad({&gi, &gh, &h});
    const Tensor gic = gi.detach().contiguous(), ghc = gh.detach().contiguous(),
                 hc = h.detach().contiguous();
    Tensor out = Tensor::empty({B, H}, h.dtype());
    Tensor ws = need_grad ? Tensor::empty({B, 4 * H}, h.dtype()) : Tensor();
    QKV_DISPATCH_FLOAT(h.dtype(), "gru_cell", {
        if constexpr (std::is_same_v<scalar_t, float>) {
            if (fast(h.dtype())) {
                kernels::cpu::gru_cell_forward({ptr<float>(out), need_grad ? ptr<float>(ws) : nullptr,
                                               ptr<float>(gic), ptr<float>(ghc), ptr<float>(hc), B, H});
                break;
            }
        }
        kernels::ref::gru_cell_forward<scalar_t>({ptr<scalar_t>(out),
                                                 need_grad ? ptr<scalar_t>(ws) : nullptr,
                                                 ptr<scalar_t>(gic), ptr<scalar_t>(ghc),
                                                 ptr<scalar_t>(hc), B, H});
    });
    if (!need_grad) return out;
    record(out, "GruCellBackward", {gi, gh, h}, [ws, hc, B, H](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor dgi = Tensor::empty({B, 3 * H}, hc.dtype()), dgh = Tensor::empty({B, 3 * H}, hc.dtype()),
               dh = Tensor::empty({B, H}, hc.dtype());
        QKV_DISPATCH_FLOAT(hc.dtype(), "gru_cell_backward", {
            if constexpr (std::is_same_v<scalar_t, float>) {
                if (fast(hc.dtype())) {
                    kernels::cpu::gru_cell_backward({ptr<float>(dgi), ptr<float>(dgh), ptr<float>(dh),
                                                    ptr<float>(gc), ptr<float>(ws), ptr<float>(hc), B, H});
                    break;
                }
            }
            kernels::ref::gru_cell_backward<scalar_t>({ptr<scalar_t>(dgi), ptr<scalar_t>(dgh),
                                                      ptr<scalar_t>(dh), ptr<scalar_t>(gc),
                                                      ptr<scalar_t>(ws), ptr<scalar_t>(hc), B, H});
        });
        return std::vector<Tensor>{dgi, dgh, dh};
    });
    return out;
}

// BPTT in one node: saves the step workspaces ws (T, B, 4H), the outputs and h0 (kernels/ref/gru.cpp).
Tensor gru_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
    QKV_CHECK(gi.defined() && w_hh.defined(), "gru_sequence: gi and w_hh are required");
    QKV_CHECK(w_hh.dim() == 2 && w_hh.shape()[0] == 3 * w_hh.shape()[1],
              "gru_sequence: w_hh must be (3H, H), got ", w_hh.shape());
    const int64_t H = w_hh.shape()[1];
    QKV_CHECK(gi.dim() == 3 && gi.shape()[2] == 3 * H, "gru_sequence: gi must be (T, B, 3H) with 3H = ",
              3 * H, ", got ", gi.shape());
    const int64_t Tn = gi.shape()[0], B = gi.shape()[1];
    QKV_CHECK(!h0.defined() || h0.shape() == Shape({B, H}), "gru_sequence: h0 must be (B, H) = (", B,
              ", ", H, "), got ", h0.shape());
    QKV_CHECK(!b_hh.defined() || b_hh.shape() == Shape({3 * H}), "gru_sequence: b_hh must be (3H) = (",
              3 * H, "), got ", b_hh.shape());
    const DType dt = w_hh.dtype();
    QKV_CHECK(dt == DType::f32 || dt == DType::f64, "gru_sequence: expected a float tensor, got ",
              dtype_name(dt));
    check_float(gi, dt, "gru_sequence", "gi");
    if (h0.defined()) check_float(h0, dt, "gru_sequence", "h0");
    if (b_hh.defined()) check_float(b_hh, dt, "gru_sequence", "b_hh");
    const bool need_grad = any_requires_grad({&gi, &h0, &w_hh, &b_hh});
    const Tensor gic = gi.detach().contiguous(), wc = w_hh.detach().contiguous();
    const Tensor hc = h0.defined() ? h0.detach().contiguous() : Tensor();
    const Tensor bc = b_hh.defined() ? b_hh.detach().contiguous() : Tensor();
    Tensor out = Tensor::empty({Tn, B, H}, dt);
    Tensor ws = need_grad ? Tensor::empty({Tn, B, 4 * H}, dt) : Tensor();
    QKV_DISPATCH_FLOAT(dt, "gru_sequence", {
        if constexpr (std::is_same_v<scalar_t, float>) {
            if (fast(dt)) {
                kernels::cpu::gru_sequence_forward({ptr<float>(out), need_grad ? ptr<float>(ws) : nullptr,
                                                   ptr<float>(gic), opt_ptr<float>(hc), ptr<float>(wc),
                                                   opt_ptr<float>(bc), Tn, B, H});
                break;
            }
        }
        kernels::ref::gru_sequence_forward<scalar_t>({ptr<scalar_t>(out),
                                                     need_grad ? ptr<scalar_t>(ws) : nullptr,
                                                     ptr<scalar_t>(gic), opt_ptr<scalar_t>(hc),
                                                     ptr<scalar_t>(wc), opt_ptr<scalar_t>(bc), Tn, B, H});
    });
    if (!need_grad) return out;
    std::vector<Tensor> inputs{gi, h0, w_hh, b_hh};
    const Tensor saved_out = out.detach();
    const bool want_dh0 = h0.defined() && h0.requires_grad(), want_dw = w_hh.requires_grad(),
               want_db = b_hh.defined() && b_hh.requires_grad();
    record(out, "GruSequenceBackward", inputs,
           [ws, saved_out, hc, wc, Tn, B, H, want_dh0, want_dw, want_db](const Tensor& g) {
               const Tensor gc = g.contiguous();
               const DType d = wc.dtype();
               Tensor dgi = Tensor::empty({Tn, B, 3 * H}, d);
               Tensor dh0 = want_dh0 ? Tensor::empty({B, H}, d) : Tensor();
               Tensor dw = want_dw ? Tensor::empty({3 * H, H}, d) : Tensor();
               Tensor db = want_db ? Tensor::empty({3 * H}, d) : Tensor();
               QKV_DISPATCH_FLOAT(d, "gru_sequence_backward", {
                   auto* pdh0 = want_dh0 ? ptr<scalar_t>(dh0) : nullptr;
                   auto* pdw = want_dw ? ptr<scalar_t>(dw) : nullptr;
                   auto* pdb = want_db ? ptr<scalar_t>(db) : nullptr;
                   if constexpr (std::is_same_v<scalar_t, float>) {
                       if (fast(d)) {
                           kernels::cpu::gru_sequence_backward({
                               ptr<float>(dgi), want_dh0 ? ptr<float>(dh0) : nullptr,
                               want_dw ? ptr<float>(dw) : nullptr, want_db ? ptr<float>(db) : nullptr,
                               ptr<float>(gc), ptr<float>(ws),
                               ptr<float>(saved_out), opt_ptr<float>(hc), ptr<float>(wc), Tn, B, H});
                           break;
                       }
                   }
                   kernels::ref::gru_sequence_backward<scalar_t>({
                       ptr<scalar_t>(dgi), pdh0, pdw, pdb, ptr<scalar_t>(gc), ptr<scalar_t>(ws),
                       ptr<scalar_t>(saved_out), opt_ptr<scalar_t>(hc), ptr<scalar_t>(wc), Tn, B, H});
               });
               return std::vector<Tensor>{dgi, dh0, dw, db};
           });
    return out;
}

}  // namespace qkv
