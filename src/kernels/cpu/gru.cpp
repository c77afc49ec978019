// Fast GRU kernels: ISA dispatch for the cell (gru_simd.h) and the sequence recurrence on
// oneDNN GEMMs. The math and its derivation are in ref/gru.cpp.
#include "kernels/cpu/gru.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/variants.h"
#include "kernels/ref/gru.h"

namespace qkv::kernels::cpu {

void gru_cell_forward(const GruCellParams<float>& p) {
    if (p.B == 0 || p.H == 0) return;
    QKV_ISA_DISPATCH(simd::gru_cell_forward, ref::gru_cell_forward<float>(p), p);
}

void gru_cell_backward(const GruCellGradParams<float>& g) {
    if (g.B == 0 || g.H == 0) return;
    QKV_ISA_DISPATCH(simd::gru_cell_backward, ref::gru_cell_backward<float>(g), g);
}

void gru_sequence_forward(const GruSequenceParams<float>& p) {
    float *const  out = p.out, *const ws = p.ws;
    const float * gi = p.gi, *h0 = p.h0, *w_hh = p.w_hh, *b_hh = p.b_hh;
    const int64_t Tn = p.Tn, B = p.B, H = p.H;
    const int64_t G = 3 * H;
    if (Tn == 0 || B == 0 || H == 0) return;
    std::vector<float> gh(size_t(B * G)), zero(h0 ? 0 : size_t(B * H), 0.f);
    const float* h = h0 ? h0 : zero.data();
    for (int64_t t = 0; t < Tn; ++t) {
        for (int64_t b = 0; b < B; ++b) {
            if (b_hh) std::memcpy(gh.data() + b * G, b_hh, size_t(G) * sizeof(float));
            else std::memset(gh.data() + b * G, 0, size_t(G) * sizeof(float));
        }
        gemm(false, true, B, G, H, 1.f, h, H, w_hh, H, 1.f, gh.data(), G);
        float* ht = out + t * B * H;
        gru_cell_forward({ht, ws ? ws + t * B * 4 * H : nullptr, gi + t * B * G, gh.data(), h, B, H});
        h = ht;
    }
}

void gru_sequence_backward(const GruSequenceGradParams<float>& g) {
    float *const  dgi = g.dgi, *const dh0 = g.dh0, *const dw_hh = g.dw_hh, *const db_hh = g.db_hh;
    const float * dout = g.dout, *ws = g.ws, *out = g.out, *h0 = g.h0, *w_hh = g.w_hh;
    const int64_t Tn = g.Tn, B = g.B, H = g.H;
    const int64_t G = 3 * H, BH = B * H;
    if (Tn == 0 || B == 0 || H == 0) {
        if (dh0) std::memset(dh0, 0, static_cast<size_t>(BH) * sizeof(float));
        if (dw_hh) std::memset(dw_hh, 0, size_t(G * H) * sizeof(float));
        if (db_hh) std::memset(db_hh, 0, size_t(G) * sizeof(float));
        return;
    }
    std::vector<float> dgh(size_t(Tn * B * G)), carry(static_cast<size_t>(BH), 0.f), delta(static_cast<size_t>(BH)),
        zero(h0 ? 0 : static_cast<size_t>(BH), 0.f);
    for (int64_t t = Tn - 1; t >= 0; --t) {
        const float* hp = t > 0 ? out + (t - 1) * BH : (h0 ? h0 : zero.data());
        const float* dt = dout + t * BH;
        for (int64_t i = 0; i < BH; ++i) delta[size_t(i)] = dt[i] + carry[size_t(i)];
        float* dght = dgh.data() + t * B * G;
        // carry = dh_direct + dgh_t · W_hh
        gru_cell_backward({dgi + t * B * G, dght, carry.data(), delta.data(), ws + t * B * 4 * H, hp, B, H});
        gemm(false, false, B, H, G, 1.f, dght, G, w_hh, H, 1.f, carry.data(), H);
    }
    if (dh0) std::memcpy(dh0, carry.data(), static_cast<size_t>(BH) * sizeof(float));
    if (dw_hh) {
        // dW_hh = Σ_{t>=1} dgh_tᵀ·out_{t-1} (one GEMM over (T−1)·B rows) + dgh_0ᵀ·h0.
        gemm(true, false, G, H, (Tn - 1) * B, 1.f, dgh.data() + B * G, G, out, H, 0.f, dw_hh, H);
        if (h0) gemm(true, false, G, H, B, 1.f, dgh.data(), G, h0, H, 1.f, dw_hh, H);
    }
    if (db_hh) {
        std::memset(db_hh, 0, size_t(G) * sizeof(float));
        for (int64_t i = 0; i < Tn * B; ++i) {
            const float* row = dgh.data() + i * G;
            for (int64_t k = 0; k < G; ++k) db_hh[k] += row[k];
        }
    }
}

}  // namespace qkv::kernels::cpu
