// int8 linear layers (ops/quantize.h): quantization here, the int32 products in kernels/cpu/gemm_int8.
#include "qkv/ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/cpu/argmax.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/quantize.h"
#include "core/argmax_rule.h"
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

/// x's rows quantized (each with its own scale) for the int8 products: xq (N, K) and the row
/// scales sx (N), in per-thread buffers reused across calls, and the packed weight to multiply
/// them with (w's own, or for a weight built by hand a copy made for this call).
struct Int8Input {
    int64_t N = 0;
    const int8_t* xq = nullptr;
    const float* sx = nullptr;
    std::shared_ptr<const kernels::cpu::Int8PackedWeight> own_packed;
    const kernels::cpu::Int8PackedWeight* packed = nullptr;
};

Int8Input quantize_input(const Tensor& x, const Int8Weight& w, const Tensor& bias, const char* op) {
    QKV_CHECK(x.defined() && x.dtype() == DType::f32 && x.dim() >= 1, op, ": x must be a float32 tensor (..., K)");
    const int64_t K = w.in_features, O = w.out_features;
    QKV_CHECK(x.shape().back() == K, op, ": input of shape ", x.shape(), " does not match the int8 weight (", O, ", ",
              K, ")");
    QKV_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{O}), op, ": bias of shape ",
              bias.defined() ? bias.shape() : Shape{}, " does not match out_features ", O);
    QKV_CHECK(!(grad_enabled() && x.requires_grad()), op, ": int8 layers are for inference: no gradient flows "
              "through them (run under NoGradGuard)");
    QKV_CHECK(K <= kMaxInt8K, op, ": in_features ", K, " exceeds ", kMaxInt8K, " (int32 accumulation)");
    Int8Input r;
    r.N = 1;  // the rows: every dimension but the last (x.numel() / K fails for K = 0)
    for (int64_t d = 0; d + 1 < x.dim(); ++d) r.N *= x.size(d);
    const int64_t N = r.N;
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> sx;
    xq.resize(size_t(N * K)), sx.resize(size_t(N));
    r.xq = xq.data(), r.sx = sx.data();
    if (N == 0 || O == 0) return r;
    const Tensor x2 = x.detach().contiguous();
    kernels::cpu::quantize_rows_int8(xq.data(), sx.data(), ptr<float>(x2), N, K,
                                     float(kernels::cpu::int8_activation_max()));
    // A non-finite activation would quantize silently to ±127 (or NaN scale): refuse it instead.
    for (int64_t n = 0; n < N; ++n)
        QKV_CHECK(std::isfinite(sx[size_t(n)]), op, ": row ", n, " of the input holds a non-finite value");
    QKV_CHECK(int64_t(w.q.size()) == O * K && int64_t(w.scale.size()) == O, op, ": the int8 weight holds ",
              w.q.size(), " values and ", w.scale.size(), " scales for (", O, ", ", K, ")");
    if (K > 0) {
        // A weight built by hand (no cache) gets one for this call only (a copy and a reorder).
        if (!w.packed) r.own_packed = kernels::cpu::make_int8_packed_weight(w.q.data(), O, K);
        r.packed = w.packed ? w.packed.get() : r.own_packed.get();
    }
    return r;
}

}  // namespace

Tensor linear_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias) {
    const Int8Input in = quantize_input(x, w, bias, "linear_int8");
    const int64_t N = in.N, O = w.out_features, K = w.in_features;
    Shape out_shape = x.shape();
    out_shape.back() = O;
    Tensor y = Tensor::empty(out_shape, DType::f32);
    if (N == 0 || O == 0) return y;
    float* py = ptr<float>(y);
    const Tensor keep_bias = bias.defined() ? bias.contiguous() : Tensor();
    const float* pb = bias.defined() ? ptr<float>(keep_bias) : nullptr;
    if (K == 0) {  // no products: the bias alone
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < O; ++o) py[n * O + o] = pb ? pb[o] : 0.0f;
        return y;
    }
    kernels::cpu::gemm_int8_nt_dequant({in.xq, N, K, O, in.packed, in.sx, w.scale.data(), pb, py});
    return y;
}

Tensor linear_int8_argmax(const Tensor& x, const Int8Weight& w, const Tensor& bias, const std::vector<char>& banned) {
    const int64_t O = w.out_features;
    QKV_CHECK(O > 0, "linear_int8_argmax: the weight has no output rows");
    QKV_CHECK(banned.empty() || int64_t(banned.size()) == O, "linear_int8_argmax: banned has ", banned.size(),
              " flags for ", O, " outputs");
    const Int8Input in = quantize_input(x, w, bias, "linear_int8_argmax");
    const int64_t N = in.N, K = w.in_features;
    Tensor out = Tensor::empty(Shape(x.shape().begin(), x.shape().end() - 1), DType::i64);
    if (N == 0) return out;
    int64_t* po = ptr<int64_t>(out);
    const Tensor keep_bias = bias.defined() ? bias.contiguous() : Tensor();
    const float* pb = bias.defined() ? ptr<float>(keep_bias) : nullptr;
    const float* pws = w.scale.data();
    const char* pban = banned.empty() ? nullptr : banned.data();
    const float* psx = in.sx;
    // Each column block's best per row (argmax_better merges blocks in any order), then the rows'.
    const int64_t ob = K > 0 ? kernels::cpu::int8_block_columns(N, O) : O, nb = (O + ob - 1) / ob;
    thread_local std::vector<float> block_best;
    thread_local std::vector<int64_t> block_index;
    block_best.assign(size_t(nb * N), 0.0f), block_index.assign(size_t(nb * N), -1);
    float* pbest = block_best.data();
    int64_t* pindex = block_index.data();
    auto epilogue = [&](int64_t o0, int64_t width, int64_t n0, int64_t n1, const int32_t* acc) {
        const int64_t b = o0 / ob;
        kernels::cpu::ArgmaxBlockParams p;
        p.rows = n1 - n0, p.width = width, p.acc = acc + n0 * width, p.sx = psx + n0, p.sw = pws + o0;
        p.bias = pb ? pb + o0 : nullptr, p.banned = pban ? pban + o0 : nullptr;
        p.best = pbest + b * N + n0, p.index = pindex + b * N + n0;
        kernels::cpu::argmax_block(p);  // the value linear_int8 would write, in the same order of operations
        for (int64_t n = n0; n < n1; ++n)
            if (pindex[b * N + n] >= 0) pindex[b * N + n] += o0;
    };
    if (K > 0) {
        kernels::cpu::gemm_int8_nt_blocks(in.xq, N, K, O, *in.packed, ob, epilogue);  // the widths above
    } else {  // no products: sums of 0, the bias alone
        const std::vector<int32_t> zeros(size_t(N * O), 0);
        epilogue(0, O, 0, N, zeros.data());
    }
    for (int64_t n = 0; n < N; ++n) {
        float best = 0;
        int64_t bi = -1;
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t i = pindex[b * N + n];
            if (i >= 0 && detail::argmax_better(pbest[b * N + n], i, best, bi)) best = pbest[b * N + n], bi = i;
        }
        po[n] = bi;
    }
    return out;
}

}  // namespace qkv
