// int8 linear layers (ops/quantize.h): quantization here, the int32 products in kernels/cpu/gemm_int8.
#include "qkv/ops/quantize.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/quantize.h"
#include "ops/argmax_rule.h"
#include "ops/dispatch.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"

namespace qkv {

using detail::ptr;

namespace {
// int32 accumulation bound: K · 127 · 127 < 2^31.
constexpr int64_t kMaxInt8K = 133000;

/// round-half-away-from-zero of v·inv_scale in fp32, clamped to ±127 (branch-free: vectorizes).
inline int8_t quantize_one(float v, float inv_scale) {
    const float t = std::clamp(v * inv_scale, -127.0f, 127.0f);
    return int8_t(int32_t(t + (t >= 0.0f ? 0.5f : -0.5f)));
}
}  // namespace

Int8Weight quantize_int8(const Tensor& weight) {
    QKV_CHECK(weight.defined() && weight.dim() == 2 && weight.dtype() == DType::f32,
              "quantize_int8: weight must be a float32 (out, in) tensor, got ",
              weight.defined() ? detail::str(dtype_name(weight.dtype()), " ", weight.shape()) : std::string("undefined"));
    const Tensor w = weight.detach().contiguous();
    const int64_t O = w.size(0), K = w.size(1);
    QKV_CHECK(K <= kMaxInt8K, "quantize_int8: in_features ", K, " exceeds ", kMaxInt8K, " (int32 accumulation)");
    Int8Weight out;
    out.out_features = O, out.in_features = K;
    out.q.resize(size_t(O * K));
    out.scale.resize(size_t(O));
    const float* pw = ptr<float>(w);
    for (int64_t o = 0; o < O; ++o) {
        const float* row = pw + o * K;
        float m = 0;
        for (int64_t k = 0; k < K; ++k) {
            QKV_CHECK(std::isfinite(row[k]), "quantize_int8: weight[", o, ", ", k, "] is ", row[k]);
            m = std::max(m, std::fabs(row[k]));
        }
        const float s = m / 127.0f;
        out.scale[size_t(o)] = s;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t k = 0; k < K; ++k) out.q[size_t(o * K + k)] = quantize_one(row[k], inv);
    }
    if (O > 0 && K > 0) out.packed = kernels::cpu::make_int8_packed_weight(out.q.data(), O, K);
    return out;
}

namespace {

/// The int32 products of x's rows (quantized per row) with the weight: acc (N, O) and the row
/// scales sx (N), in per-thread buffers reused across calls.
struct Int8Products {
    int64_t N = 0;
    const int32_t* acc = nullptr;
    const float* sx = nullptr;
};

Int8Products int8_products(const Tensor& x, const Int8Weight& w, const Tensor& bias, const char* op) {
    QKV_CHECK(x.defined() && x.dtype() == DType::f32 && x.dim() >= 1, op, ": x must be a float32 tensor (..., K)");
    const int64_t K = w.in_features, O = w.out_features;
    QKV_CHECK(x.shape().back() == K, op, ": input of shape ", x.shape(), " does not match the int8 weight (", O, ", ",
              K, ")");
    QKV_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{O}), op, ": bias of shape ",
              bias.defined() ? bias.shape() : Shape{}, " does not match out_features ", O);
    QKV_CHECK(!(grad_enabled() && x.requires_grad()), op, ": int8 layers are for inference: no gradient flows "
              "through them (run under NoGradGuard)");
    QKV_CHECK(K <= kMaxInt8K, op, ": in_features ", K, " exceeds ", kMaxInt8K, " (int32 accumulation)");
    Int8Products r;
    r.N = x.numel() / std::max<int64_t>(K, 1);
    const int64_t N = r.N;
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> sx;
    thread_local std::vector<int32_t> acc;
    xq.resize(size_t(N * K)), sx.resize(size_t(N)), acc.resize(size_t(N * O));
    r.acc = acc.data(), r.sx = sx.data();
    if (N == 0 || O == 0) return r;
    const Tensor x2 = x.detach().contiguous();
    const float* px = ptr<float>(x2);
    int8_t* pxq = xq.data();
    float* psx = sx.data();
    kernels::cpu::quantize_rows_int8(pxq, psx, px, N, K, float(kernels::cpu::int8_activation_max()));
    // A non-finite activation would quantize silently to ±127 (or NaN scale): refuse it instead.
    for (int64_t n = 0; n < N; ++n)
        QKV_CHECK(std::isfinite(psx[n]), op, ": row ", n, " of the input holds a non-finite value");
    QKV_CHECK(int64_t(w.q.size()) == O * K && int64_t(w.scale.size()) == O, op, ": the int8 weight holds ",
              w.q.size(), " values and ", w.scale.size(), " scales for (", O, ", ", K, ")");
    if (K > 0) {
        // A weight built by hand (no cache) gets one for this call only (a copy and a reorder).
        const std::shared_ptr<const kernels::cpu::Int8PackedWeight> plain =
            w.packed ? nullptr : kernels::cpu::make_int8_packed_weight(w.q.data(), O, K);
        kernels::cpu::gemm_int8_nt(pxq, N, K, O, w.packed ? *w.packed : *plain, acc.data());
    } else {
        std::fill(acc.begin(), acc.end(), 0);
    }
    return r;
}

}  // namespace

Tensor linear_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias) {
    const Int8Products p = int8_products(x, w, bias, "linear_int8");
    const int64_t N = p.N, O = w.out_features;
    Shape out_shape = x.shape();
    out_shape.back() = O;
    Tensor y = Tensor::empty(out_shape, DType::f32);
    if (N == 0 || O == 0) return y;
    float* py = ptr<float>(y);
    const Tensor keep_bias = bias.defined() ? bias.contiguous() : Tensor();
    const float* pb = bias.defined() ? ptr<float>(keep_bias) : nullptr;
    const float* pws = w.scale.data();
    const int32_t* pacc = p.acc;
    const float* psx = p.sx;
#pragma omp parallel for if (N * O > (1 << 15)) schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) py[n * O + o] = float(pacc[n * O + o]) * psx[n] * pws[o] + (pb ? pb[o] : 0.0f);
    return y;
}

Tensor linear_int8_argmax(const Tensor& x, const Int8Weight& w, const Tensor& bias, const std::vector<char>& banned) {
    const int64_t O = w.out_features;
    QKV_CHECK(O > 0, "linear_int8_argmax: the weight has no output rows");
    QKV_CHECK(banned.empty() || int64_t(banned.size()) == O, "linear_int8_argmax: banned has ", banned.size(),
              " flags for ", O, " outputs");
    const Int8Products p = int8_products(x, w, bias, "linear_int8_argmax");
    const int64_t N = p.N;
    Tensor out = Tensor::empty(Shape(x.shape().begin(), x.shape().end() - 1), DType::i64);
    int64_t* po = ptr<int64_t>(out);
    const Tensor keep_bias = bias.defined() ? bias.contiguous() : Tensor();
    const float* pb = bias.defined() ? ptr<float>(keep_bias) : nullptr;
    const float* pws = w.scale.data();
    const char* pban = banned.empty() ? nullptr : banned.data();
    const int32_t* pacc = p.acc;
    const float* psx = p.sx;
#pragma omp parallel for if (N * O > (1 << 15)) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        float best = 0;
        int64_t bi = -1;
        for (int64_t o = 0; o < O; ++o) {
            if (pban && pban[o]) continue;
            // the value linear_int8 would write, in the same order of operations
            const float v = float(pacc[n * O + o]) * psx[n] * pws[o] + (pb ? pb[o] : 0.0f);
            if (detail::argmax_better(v, o, best, bi)) best = v, bi = o;
        }
        po[n] = bi;
    }
    return out;
}

}  // namespace qkv
