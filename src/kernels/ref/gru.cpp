// Reference GRU kernels (see ref/gru.h). Scalar loops; the GEMMs go through ref::gemm.
//
// Cell, per element (a_* are the pre-activations):
//   a_r = gi_r + gh_r, r = σ(a_r);  a_z = gi_z + gh_z, z = σ(a_z);
//   a_n = gi_n + r·gh_n, n = tanh(a_n);  h' = (1 − z)·n + z·h = n + z·(h − n).
// Backward with g = ∂L/∂h':
//   ∂L/∂n = g·(1 − z)          → da_n = g·(1 − z)·(1 − n²)
//   ∂L/∂z = g·(h − n)          → da_z = g·(h − n)·z·(1 − z)
//   ∂L/∂r = da_n·gh_n          → da_r = da_n·gh_n·r·(1 − r)
//   dgi = [da_r, da_z, da_n],  dgh = [da_r, da_z, da_n·r],  dh = g·z.
// Sequence (backpropagation through time), with h_{-1} = h0 and carry_T = 0:
//   δ_t = dout_t + carry_{t+1};  (dgi_t, dgh_t, dh_t) = cell_backward(δ_t);
//   carry_t = dh_t + dgh_t·W_hh;  dh0 = carry_0;
//   dW_hh = Σ_t dgh_tᵀ·h_{t-1} (one GEMM over all T·B rows);  db_hh = Σ_t Σ_b dgh_t.
#include "kernels/ref/gru.h"

#include <cmath>
#include <vector>

#include "kernels/ref/matmul.h"

namespace qkv::kernels::ref {
namespace {
template <class T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

template <class T>
void gru_cell_forward(const GruCellParams<T>& p) {
    T *const      h_new = p.h_new, *const ws = p.ws;
    const T *     gi = p.gi, *gh = p.gh, *h = p.h;
    const int64_t B = p.B, H = p.H;
    for (int64_t b = 0; b < B; ++b) {
        const T* gib = gi + b * 3 * H;
        const T* ghb = gh + b * 3 * H;
        for (int64_t j = 0; j < H; ++j) {
            const T r  = sigmoid(gib[j] + ghb[j]);
            const T z  = sigmoid(gib[H + j] + ghb[H + j]);
            const T hn = ghb[2 * H + j];
            const T n  = std::tanh(gib[2 * H + j] + r * hn);
            const T hp = h[b * H + j];
            if (ws) {
                T* w          = ws + b * 4 * H;
                w[j]          = r;
                w[H + j]      = z;
                w[2 * H + j]  = n;
                w[3 * H + j]  = hn;
            }
            h_new[b * H + j] = n + z * (hp - n);
        }
    }
}

template <class T>
void gru_cell_backward(const GruCellGradParams<T>& gp) {
    T *const      dgi = gp.dgi, *const dgh = gp.dgh, *const dh = gp.dh;
    const T *     dh_new = gp.dh_new, *ws = gp.ws, *h = gp.h;
    const int64_t B = gp.B, H = gp.H;
    for (int64_t b = 0; b < B; ++b) {
        const T* w = ws + b * 4 * H;
        T* dgib    = dgi + b * 3 * H;
        T* dghb    = dgh + b * 3 * H;
        for (int64_t j = 0; j < H; ++j) {
            const T r = w[j], z = w[H + j], n = w[2 * H + j], hn = w[3 * H + j];
            const T g  = dh_new[b * H + j];
            const T an = g * (T(1) - z) * (T(1) - n * n);
            const T az = g * (h[b * H + j] - n) * z * (T(1) - z);
            const T ar = an * hn * r * (T(1) - r);
            dgib[j] = dghb[j] = ar;
            dgib[H + j] = dghb[H + j] = az;
            dgib[2 * H + j]           = an;
            dghb[2 * H + j]           = an * r;
            if (dh) dh[b * H + j] = g * z;
        }
    }
}

template <class T>
void gru_sequence_forward(const GruSequenceParams<T>& p) {
    T *const      out = p.out, *const ws = p.ws;
    const T *     gi = p.gi, *h0 = p.h0, *w_hh = p.w_hh, *b_hh = p.b_hh;
    const int64_t Tn = p.Tn, B = p.B, H = p.H;
    std::vector<T> gh(size_t(B * 3 * H)), zero(h0 ? 0 : size_t(B * H), T(0));
    const T* h = h0 ? h0 : zero.data();
    for (int64_t t = 0; t < Tn; ++t) {
        for (int64_t b = 0; b < B; ++b)
            for (int64_t k = 0; k < 3 * H; ++k) gh[size_t(b * 3 * H + k)] = b_hh ? b_hh[k] : T(0);
        gemm<T>(false, true, B, 3 * H, H, T(1), h, H, w_hh, H, T(1), gh.data(), 3 * H);
        T* ht = out + t * B * H;
        gru_cell_forward<T>({ht, ws ? ws + t * B * 4 * H : nullptr, gi + t * B * 3 * H, gh.data(), h, B, H});
        h = ht;
    }
}

template <class T>
void gru_sequence_backward(const GruSequenceGradParams<T>& g) {
    T *const      dgi = g.dgi, *const dh0 = g.dh0, *const dw_hh = g.dw_hh, *const db_hh = g.db_hh;
    const T *     dout = g.dout, *ws = g.ws, *out = g.out, *h0 = g.h0, *w_hh = g.w_hh;
    const int64_t Tn = g.Tn, B = g.B, H = g.H;
    const int64_t G = 3 * H;
    std::vector<T> dgh(size_t(Tn * B * G)), carry(size_t(B * H), T(0)), delta(size_t(B * H)),
        dh(size_t(B * H)), zero(size_t(B * H), T(0)), hprev(size_t(Tn * B * H));
    for (int64_t t = Tn - 1; t >= 0; --t) {
        const T* hp = t > 0 ? out + (t - 1) * B * H : (h0 ? h0 : zero.data());
        for (int64_t i = 0; i < B * H; ++i) {
            delta[size_t(i)]                   = dout[t * B * H + i] + carry[size_t(i)];
            hprev[size_t(t * B * H + i)]       = hp[i];
        }
        T* dght = dgh.data() + t * B * G;
        gru_cell_backward<T>({dgi + t * B * G, dght, dh.data(), delta.data(), ws + t * B * 4 * H, hp, B, H});
        // carry = dh + dgh_t · W_hh  ((B, 3H) × (3H, H))
        carry = dh;
        gemm<T>(false, false, B, H, G, T(1), dght, G, w_hh, H, T(1), carry.data(), H);
    }
    if (dh0)
        for (int64_t i = 0; i < B * H; ++i) dh0[i] = carry[size_t(i)];
    if (dw_hh) gemm<T>(true, false, G, H, Tn * B, T(1), dgh.data(), G, hprev.data(), H, T(0), dw_hh, H);
    if (db_hh) {
        for (int64_t k = 0; k < G; ++k) db_hh[k] = T(0);
        for (int64_t i = 0; i < Tn * B; ++i)
            for (int64_t k = 0; k < G; ++k) db_hh[k] += dgh[size_t(i * G + k)];
    }
}

#define QKV_GRU_INSTANTIATE(T)                                               \
    template void gru_cell_forward<T>(const GruCellParams<T>&);              \
    template void gru_cell_backward<T>(const GruCellGradParams<T>&);         \
    template void gru_sequence_forward<T>(const GruSequenceParams<T>&);      \
    template void gru_sequence_backward<T>(const GruSequenceGradParams<T>&);
QKV_GRU_INSTANTIATE(float)
QKV_GRU_INSTANTIATE(double)
#undef QKV_GRU_INSTANTIATE

}  // namespace qkv::kernels::ref
