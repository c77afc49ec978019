#pragma once
// The per-ISA entry points of the fast fp32 kernels: function templates over the ISA tier,
// defined once in the kernel's *_simd.h and instantiated for each tier by cpu/variants.inc
// (compiled once per tier: variants_avx2.cpp, variants_avx512.cpp). The public kernels
// (cpu/<kernel>.cpp) call them through QKV_ISA_DISPATCH (cpu/isa.h). A bf16 or AMX tier adds a
// variants_<tier>.cpp and its case in the dispatch; nothing here is written again.
#include <cstdint>

#include "kernels/cpu/adam_simd.h"
#include "kernels/cpu/argmax.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/isa.h"
#include "kernels/params.h"

namespace qkv::kernels::cpu::simd {

template <Isa I> void exp_array(float* y, const float* x, int64_t n);
template <Isa I> void softmax_forward(float* y, const float* x, int64_t rows, int64_t cols);
template <Isa I> void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols);
template <Isa I> void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t cols);
template <Isa I> void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t cols);
template <Isa I> void cross_entropy_forward(const CrossEntropyParams<float>& p);
template <Isa I> void cross_entropy_backward(const CrossEntropyParams<float>& p, const CrossEntropyGradParams<float>& g);
template <Isa I> void layer_norm_forward(const LayerNormParams<float>& p);
/// partial: 2·nblocks·N floats of scratch (dγ partials, then dβ partials).
template <Isa I> void layer_norm_backward(const LayerNormParams<float>& p, const LayerNormGradParams<float>& g, float* partial);
template <Isa I> void gru_cell_forward(const GruCellParams<float>& p);
template <Isa I> void gru_cell_backward(const GruCellGradParams<float>& g);
template <Isa I> void additive_scores_forward(const AdditiveScoresParams<float>& p);
/// g.dw: (B, H) partial sums of dw per batch row (reduced by the caller in b order).
template <Isa I> void additive_scores_backward(const AdditiveScoresParams<float>& p, const AdditiveScoresGradParams<float>& g);
template <Isa I> void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const detail::AdamScalars& s);
template <Isa I> void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols, float qmax);
template <Isa I> void argmax_block(const ArgmaxBlockParams& p);
template <Isa I> void convert_bf16(uint16_t* dst, float* dst32, const float* src, int64_t n);
template <Isa I> void convert_to_fp16(uint16_t* dst, const float* src, int64_t n);
template <Isa I> void convert_from_fp16(float* dst, const uint16_t* src, int64_t n);
/// Returns how many of a.n elements it did (whole groups); dropout.cpp does the rest.
template <Isa I> int64_t dropout_forward_groups(const detail::DropoutSpan& a);
template <Isa I> void dropout_backward_masked(float* dx, const float* dy, const uint8_t* mask, int64_t groups, float scale);

/// The list instantiated per tier by cpu/variants.inc.
#define QKV_FP32_VARIANTS(X)                                                                      \
    X(exp_array) X(softmax_forward) X(softmax_backward) X(log_softmax_forward)                    \
    X(log_softmax_backward) X(cross_entropy_forward) X(cross_entropy_backward)                    \
    X(layer_norm_forward) X(layer_norm_backward) X(gru_cell_forward) X(gru_cell_backward)         \
    X(additive_scores_forward) X(additive_scores_backward) X(adam_step) X(quantize_rows_int8)      \
    X(argmax_block) X(convert_bf16) X(convert_to_fp16) X(convert_from_fp16)                        \
    X(dropout_forward_groups) X(dropout_backward_masked)

// The AVX2 and AVX-512 instances exist only in variants_<tier>.cpp (explicit instantiations under
// that tier's flags). A dispatcher that includes a *_simd.h body (for its scalar build) must not
// instantiate them again under its own plain flags: the linker could keep that copy for the tier.
#define QKV_EXTERN_VARIANT(name)                                          \
    extern template decltype(name<Isa::avx2>) name<Isa::avx2>;           \
    extern template decltype(name<Isa::avx512>) name<Isa::avx512>;
QKV_FP32_VARIANTS(QKV_EXTERN_VARIANT)
#undef QKV_EXTERN_VARIANT

}  // namespace qkv::kernels::cpu::simd
