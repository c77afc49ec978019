// GRU kernels: fast (every SIMD path) vs ref<double> with the 2x rule for the cell's forward
// (h', saved gates) and backward, and for the whole-sequence recurrence and its BPTT; odd sizes
// around the vector widths; saturated gates give exact limits, never NaN.
#include <cmath>
#include <vector>

#include "kernels/cpu/gru.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/gru.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

struct CellCase {
    int64_t B, H;
};

void check_cell(const CellCase& c, uint64_t seed, float scale) {
    const int64_t G = 3 * c.H, n = c.B * c.H;
    const auto gi = random_floats(c.B * G, seed, -scale, scale);
    const auto gh = random_floats(c.B * G, seed + 1, -scale, scale);
    const auto h  = random_floats(n, seed + 2);
    const auto dy = random_floats(n, seed + 3);
    const auto gi64 = to_double(gi), gh64 = to_double(gh), h64 = to_double(h), dy64 = to_double(dy);
    std::vector<float> y32(n), ws32(4 * n);
    std::vector<double> y64(n), ws64(4 * n);
    ref::gru_cell_forward<float>({y32.data(), ws32.data(), gi.data(), gh.data(), h.data(), c.B, c.H});
    ref::gru_cell_forward<double>({y64.data(), ws64.data(), gi64.data(), gh64.data(), h64.data(), c.B, c.H});
    // Backward from ref32's saved gates for all three (isolates the backward's own rounding).
    const auto ws32d = to_double(ws32);
    std::vector<float> dgi32(c.B * G), dgh32(c.B * G), dh32(n);
    std::vector<double> dgi64(c.B * G), dgh64(c.B * G), dh64(n);
    ref::gru_cell_backward<float>({dgi32.data(), dgh32.data(), dh32.data(), dy.data(), ws32.data(),
                                  h.data(), c.B, c.H});
    ref::gru_cell_backward<double>({dgi64.data(), dgh64.data(), dh64.data(), dy64.data(),
                                   ws32d.data(), h64.data(), c.B, c.H});
    for (Isa isa : available_isas()) {
        SCOPED_TRACE(::testing::Message() << cpu::isa_name(isa) << " B=" << c.B << " H=" << c.H
                                          << " scale=" << scale);
        IsaGuard guard(isa);
        std::vector<float> y(n), ws(4 * n), dgi(c.B * G), dgh(c.B * G), dh(n);
        cpu::gru_cell_forward({y.data(), ws.data(), gi.data(), gh.data(), h.data(), c.B, c.H});
        EXPECT_TRUE(within_2x(y, y32, y64));
        EXPECT_TRUE(within_2x(ws, ws32, ws64));
        cpu::gru_cell_backward({dgi.data(), dgh.data(), dh.data(), dy.data(), ws32.data(), h.data(),
                               c.B, c.H});
        EXPECT_TRUE(within_2x(dgi, dgi32, dgi64));
        EXPECT_TRUE(within_2x(dgh, dgh32, dgh64));
        EXPECT_TRUE(within_2x(dh, dh32, dh64));
        // In place (h_new aliases h) gives the same result.
        std::vector<float> hh = h;
        cpu::gru_cell_forward({hh.data(), nullptr, gi.data(), gh.data(), hh.data(), c.B, c.H});
        EXPECT_EQ(hh, y);
    }
}

TEST(GruKernels, CellFastMatchesRef_OddSizes) {
    uint64_t seed = 10;
    for (CellCase c : {CellCase{1, 1}, {3, 7}, {2, 8}, {5, 16}, {4, 17}, {3, 31}, {33, 100}, {128, 256}})
        check_cell(c, seed += 7, 3.f);
}

TEST(GruKernels, CellSaturatedGatesAreExactLimits) {
    for (Isa isa : available_isas()) {
        IsaGuard guard(isa);
        // Pre-activations ±200: r, z ∈ {0, 1}, n = ±1 exactly; never NaN.
        const int64_t B = 2, H = 19;
        std::vector<float> gi(B * 3 * H), gh(B * 3 * H, 0.f), h(B * H, 0.25f), y(B * H), ws(4 * B * H);
        for (int64_t i = 0; i < B * 3 * H; ++i) gi[i] = (i % 2 ? 200.f : -200.f);
        cpu::gru_cell_forward({y.data(), ws.data(), gi.data(), gh.data(), h.data(), B, H});
        for (float v : ws) {
            EXPECT_FALSE(std::isnan(v));
            EXPECT_TRUE(v == 0.f || v == 1.f || v == -1.f) << v << " on " << cpu::isa_name(isa);
        }
        for (float v : y) EXPECT_TRUE(v == 0.25f || v == 1.f || v == -1.f) << v;
    }
}

struct SeqCase {
    int64_t T, B, H;
    bool h0, bias;
};

void check_sequence(const SeqCase& c, uint64_t seed) {
    const int64_t G = 3 * c.H, BH = c.B * c.H;
    const auto gi = random_floats(c.T * c.B * G, seed, -2.f, 2.f);
    const auto h0 = random_floats(BH, seed + 1);
    const auto w  = random_floats(G * c.H, seed + 2, -0.5f, 0.5f);
    const auto b  = random_floats(G, seed + 3);
    const auto dy = random_floats(c.T * BH, seed + 4);
    const auto gi64 = to_double(gi), h064 = to_double(h0), w64 = to_double(w), b64 = to_double(b),
               dy64 = to_double(dy);
    const float* ph0 = c.h0 ? h0.data() : nullptr;
    const float* pb  = c.bias ? b.data() : nullptr;
    const double* ph064 = c.h0 ? h064.data() : nullptr;
    const double* pb64  = c.bias ? b64.data() : nullptr;
    std::vector<float> out32(c.T * BH), ws32(4 * c.T * BH);
    std::vector<double> out64(c.T * BH), ws64(4 * c.T * BH);
    ref::gru_sequence_forward<float>({out32.data(), ws32.data(), gi.data(), ph0, w.data(), pb, c.T, c.B, c.H});
    ref::gru_sequence_forward<double>({out64.data(), ws64.data(), gi64.data(), ph064, w64.data(), pb64,
                                      c.T, c.B, c.H});
    const auto out32d = to_double(out32), ws32d = to_double(ws32);
    std::vector<float> dgi32(c.T * c.B * G), dh032(BH), dw32(G * c.H), db32(G);
    std::vector<double> dgi64(c.T * c.B * G), dh064(BH), dw64(G * c.H), db64(G);
    ref::gru_sequence_backward<float>({dgi32.data(), dh032.data(), dw32.data(), db32.data(), dy.data(),
                                      ws32.data(), out32.data(), ph0, w.data(), c.T, c.B, c.H});
    ref::gru_sequence_backward<double>({dgi64.data(), dh064.data(), dw64.data(), db64.data(), dy64.data(),
                                       ws32d.data(), out32d.data(), ph064, w64.data(), c.T, c.B, c.H});
    for (Isa isa : available_isas()) {
        SCOPED_TRACE(::testing::Message() << cpu::isa_name(isa) << " T=" << c.T << " B=" << c.B
                                          << " H=" << c.H << " h0=" << c.h0 << " bias=" << c.bias);
        IsaGuard guard(isa);
        std::vector<float> out(c.T * BH), ws(4 * c.T * BH);
        cpu::gru_sequence_forward({out.data(), ws.data(), gi.data(), ph0, w.data(), pb, c.T, c.B, c.H});
        EXPECT_TRUE(within_2x(out, out32, out64));
        EXPECT_TRUE(within_2x(ws, ws32, ws64));
        std::vector<float> dgi(c.T * c.B * G), dh0(BH), dw(G * c.H), db(G);
        cpu::gru_sequence_backward({dgi.data(), dh0.data(), dw.data(), db.data(), dy.data(), ws32.data(),
                                   out32.data(), ph0, w.data(), c.T, c.B, c.H});
        EXPECT_TRUE(within_2x(dgi, dgi32, dgi64));
        EXPECT_TRUE(within_2x(dh0, dh032, dh064));
        EXPECT_TRUE(within_2x(dw, dw32, dw64));
        EXPECT_TRUE(within_2x(db, db32, db64));
    }
}

TEST(GruKernels, SequenceFastMatchesRef) {
    uint64_t seed = 100;
    for (SeqCase c : {SeqCase{1, 1, 1, true, true}, {1, 3, 5, false, true}, {4, 3, 7, true, false},
                      {5, 2, 16, false, false}, {9, 17, 33, true, true}, {3, 64, 64, true, true}})
        check_sequence(c, seed += 11);
}

}  // namespace
