// matmul and linear: shape checks, operand layout (transposed views become GEMM transpose flags,
// no copy), GEMM dispatch (oneDNN for f32, reference for f64 or KernelMode::reference), backward.
#include "qkv/ops/matmul.h"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "kernels/cpu/argmax.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ref/matmul.h"
#include "core/argmax_rule.h"
#include "ops/dispatch.h"
#include "ops/linear_checks.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/precision.h"
#include "qkv/ops/reduce.h"

namespace qkv {

using detail::ptr;

namespace {

/// The number of rows of x viewed as a (rows, last dim) matrix: the product of the leading dims
/// (not numel / last dim, which is 0 when the last dim is 0).
int64_t leading_rows(const Tensor& x) {
    return shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
}

/// A matrix operand as GEMM sees it: pointer, transpose flag, leading dimension, batch stride.
struct Operand {
    Tensor  t;  // keeps the memory alive (maybe a contiguous copy)
    bool    trans = false;
    int64_t ld = 0, batch_stride = 0;
};

/// Layout of a (batch, rows, cols) tensor for GEMM. Copies only when neither the row-major nor
/// the transposed reading works or the batch dim is not a single stride.
Operand as_gemm_operand(const Tensor& x3) {
    const int64_t rows = x3.shape()[1], cols = x3.shape()[2];
    const int64_t s0 = x3.strides()[0], s1 = x3.strides()[1], s2 = x3.strides()[2];
    if ((s2 == 1 || cols == 1) && s1 >= std::max<int64_t>(cols, 1)) return {x3, false, s1, s0};
    if ((s1 == 1 || rows == 1) && s2 >= std::max<int64_t>(rows, 1)) return {x3, true, s2, s0};
    Tensor c = x3.contiguous();
    return {c, false, std::max<int64_t>(cols, 1), rows * cols};
}

template <class T>
void run_gemm(const Operand& a, const Operand& b, Tensor& out, int64_t batch, int64_t M, int64_t N,
              int64_t K) {
    T* po = ptr<T>(out);
    const T* pa = ptr<T>(a.t);
    const T* pb = ptr<T>(b.t);
    const int64_t ldc = std::max<int64_t>(N, 1);
    if constexpr (std::is_same_v<T, float>) {
        if (matmul_precision() == MatmulPrecision::bf16) {  // ops/precision.h (both kernel modes)
            kernels::cpu::gemm_bf16_batched({a.trans, b.trans, M, N, K, 1.f, pa, a.ld, a.batch_stride, pb, b.ld,
                                             b.batch_stride, 0.f, po, ldc, M * N, batch});
            return;
        }
        if (kernel_mode() == KernelMode::fast) {
            if (batch == 1)
                kernels::cpu::gemm(a.trans, b.trans, M, N, K, 1.f, pa, a.ld, pb, b.ld, 0.f, po, ldc);
            else
                kernels::cpu::gemm_batched({a.trans, b.trans, M, N, K, 1.f, pa, a.ld, a.batch_stride, pb, b.ld, b.batch_stride, 0.f, po, ldc, M * N, batch});
            return;
        }
    }
    kernels::ref::gemm_batched<T>({a.trans, b.trans, M, N, K, T(1), pa, a.ld, a.batch_stride, pb, b.ld, b.batch_stride, T(0), po, ldc, M * N, batch});
}

/// Batched product of a (Ba, M, K) and b (Bb, K, N) where Ba, Bb are 1 or the common batch.
Tensor bmm_raw(const Tensor& a3, const Tensor& b3) {
    const int64_t batch = std::max(a3.shape()[0], b3.shape()[0]);
    const int64_t M = a3.shape()[1], K = a3.shape()[2], N = b3.shape()[2];
    Operand oa = as_gemm_operand(a3), ob = as_gemm_operand(b3);
    if (a3.shape()[0] == 1) oa.batch_stride = 0;
    if (b3.shape()[0] == 1) ob.batch_stride = 0;
    Tensor out = Tensor::empty({batch, M, N}, a3.dtype());
    if (out.numel() == 0) return out;
    if (K == 0) return zeros({batch, M, N}, a3.dtype());
    QKV_DISPATCH_FLOAT(a3.dtype(), "matmul", run_gemm<scalar_t>(oa, ob, out, batch, M, N, K));
    return out;
}

/// Collapses leading batch dims to one when the strides allow it (else copies).
Tensor to3d(const Tensor& x, int64_t batch) {
    const int64_t r = x.dim();
    Shape shape{batch, x.shape()[size_t(r - 2)], x.shape()[size_t(r - 1)]};
    if (r == 3) return x;
    // Batch dims collapse to one stride if, ignoring size-1 dims, each steps over the next
    // exactly (stride[i] == stride[j] * shape[j]); all-zero strides are a pure broadcast.
    bool ok = true, all_zero = true;
    int64_t stride = 0, prev_stride = -1, prev_size = 0;
    for (int64_t i = r - 3; i >= 0; --i) {
        const int64_t n = x.shape()[size_t(i)], s = x.strides()[size_t(i)];
        if (n == 1) continue;
        if (s != 0) all_zero = false;
        if (prev_stride < 0) stride = s;
        else if (s != prev_stride * prev_size) ok = false;
        prev_stride = s;
        prev_size = n;
    }
    if (!all_zero && stride == 0) ok = false;
    if (all_zero) {
        Tensor m = x;
        while (m.dim() > 2) m = m.select(0, 0);
        return m.unsqueeze(0).expand(shape);
    }
    if (!ok) return x.contiguous().reshape(shape);
    auto impl = std::make_shared<TensorImpl>(*x.impl_ptr());
    impl->grad_fn = nullptr;
    impl->requires_grad = false;
    impl->grad = nullptr;
    impl->shape = shape;
    impl->strides = {stride, x.strides()[size_t(r - 2)], x.strides()[size_t(r - 1)]};
    return Tensor(impl);
}

Tensor matmul_nograd(const Tensor& a, const Tensor& b) {
    // (..., M, K) x (K, N) with contiguous a: one GEMM over all rows.
    if (b.dim() == 2 && a.dim() > 2 && a.is_contiguous()) {
        Shape out_shape = a.shape();
        out_shape.back() = b.shape()[1];
        const int64_t rows = leading_rows(a);
        return bmm_raw(a.reshape({1, rows, a.shape().back()}), b.unsqueeze(0)).reshape(out_shape);
    }
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    const Shape batch = broadcast_shapes(ba, bb, "matmul");
    const int64_t nb = shape_numel(batch);
    Shape ea = batch, eb = batch;
    ea.push_back(a.shape()[size_t(a.dim() - 2)]);
    ea.push_back(a.shape().back());
    eb.push_back(b.shape()[size_t(b.dim() - 2)]);
    eb.push_back(b.shape().back());
    Tensor out = bmm_raw(to3d(a.detach().expand(ea), nb), to3d(b.detach().expand(eb), nb));
    Shape out_shape = batch;
    out_shape.push_back(a.shape()[size_t(a.dim() - 2)]);
    out_shape.push_back(b.shape().back());
    return out.reshape(out_shape);
}

}  // namespace

// C = A·B; backward: dA = dC·Bᵀ, dB = Aᵀ·dC (each summed over A's / B's broadcast batch dims)
Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
    QKV_CHECK(a_in.defined() && b_in.defined(), "matmul: undefined tensor argument");
    QKV_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: both arguments need at least 1 dim, got ",
              a_in.shape(), " and ", b_in.shape());
    QKV_CHECK(a_in.dtype() == b_in.dtype(), "matmul: dtypes differ: ", dtype_name(a_in.dtype()), " vs ",
              dtype_name(b_in.dtype()));
    const bool a_vec = a_in.dim() == 1, b_vec = b_in.dim() == 1;
    const Tensor a = a_vec ? a_in.unsqueeze(0) : a_in;
    const Tensor b = b_vec ? b_in.unsqueeze(1) : b_in;
    QKV_CHECK(a.shape().back() == b.shape()[size_t(b.dim() - 2)], "matmul: inner dimensions differ: ",
              a_in.shape(), " x ", b_in.shape());
    Tensor out = matmul_nograd(a.detach(), b.detach());
    const Tensor sa = b.requires_grad() ? a.detach() : Tensor();
    const Tensor sb = a.requires_grad() ? b.detach() : Tensor();
    const Shape sha = a.shape(), shb = b.shape();
    record(out, "MatmulBackward", {a, b}, [sa, sb, sha, shb](const Tensor& g) {
        Tensor ga, gb;
        if (sb.defined()) ga = sum_to_shape(matmul_nograd(g, sb.transpose(-1, -2)), sha);
        if (sa.defined()) gb = sum_to_shape(matmul_nograd(sa.transpose(-1, -2), g), shb);
        return std::vector<Tensor>{ga, gb};
    });
    if (a_vec) out = out.squeeze(-2);
    if (b_vec) out = out.squeeze(-1);
    return out;
}

namespace {
// y (rows, outf) += bias on every row; rows split over the OpenMP threads.
template <class T>
void add_bias_rows(const Tensor& y, const Tensor& bias, int64_t rows, int64_t outf) {
    T* py = ptr<T>(y);
    const Tensor bc = bias.contiguous();
    const T* pb = ptr<T>(bc);
#pragma omp parallel for if (rows * outf > detail::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        T* yr = py + r * outf;
        for (int64_t j = 0; j < outf; ++j) yr[j] += pb[j];
    }
}
}  // namespace

// y = x·Wᵀ + b over all leading dims; dx = dy·W, dW = dyᵀ·x, db = Σ_rows dy
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    detail::check_linear_args("linear", x, weight, bias, detail::kLinearNames, false);
    const int64_t in = weight.shape()[1], outf = weight.shape()[0];
    const int64_t rows = leading_rows(x);
    Tensor x2 = x.detach().contiguous().reshape({rows, in});
    Tensor y = matmul_nograd(x2, weight.detach().transpose(0, 1));
    if (bias.defined()) {
        QKV_DISPATCH_FLOAT(y.dtype(), "linear", add_bias_rows<scalar_t>(y, bias, rows, outf));
    }
    Shape out_shape = x.shape();
    out_shape.back() = outf;
    y = y.reshape(out_shape);
    const Tensor sx = weight.requires_grad() ? x2 : Tensor();
    const Tensor sw = x.requires_grad() ? weight.detach() : Tensor();
    const Shape xshape = x.shape();
    const bool has_bias = bias.defined();
    std::vector<Tensor> inputs{x, weight};
    if (has_bias) inputs.push_back(bias);
    record(y, "LinearBackward", inputs, [sx, sw, xshape, rows, outf, has_bias](const Tensor& g) {
        Tensor g2 = g.contiguous().reshape({rows, outf});
        std::vector<Tensor> gs(has_bias ? 3 : 2);
        if (sw.defined()) gs[0] = matmul_nograd(g2, sw).reshape(xshape);
        if (sx.defined()) gs[1] = matmul_nograd(g2.transpose(0, 1), sx);
        if (has_bias) gs[2] = sum(g2, {0});
        return gs;
    });
    return y;
}

namespace {

// Reference: the full logits, then argmax_allowed (argmax's rule without the banned ids).
std::vector<int64_t> linear_argmax_ref(const Tensor& x2, const Tensor& weight, const Tensor& bias,
                                       const std::vector<char>& banned) {
    return argmax_allowed(linear(x2, weight, bias), banned).to_vector<int64_t>();
}

// Fast f32 path: column blocks of Nc output ids; each block's (rows, Nc) logits are written by
// sgemm into a per-thread buffer of <= kBlockBytes (L2-resident), then the bias is added and each
// row's running maximum updated while the block is hot. Measured at rows 250, in 256, out 17,496
// on this machine, 1 thread: 53 ms for linear + argmax, 38 ms fused (the GEMM alone: 40 ms);
// block widths 64-512 were within 5 % of each other, wider ones slower (bench/RESULTS_anchor.md §5).
constexpr int64_t kBlockBytes = 128 * 1024;

std::vector<int64_t> linear_argmax_f32(const Tensor& x2, const Tensor& weight, const Tensor& bias,
                                       const std::vector<char>& banned) {
    const int64_t M = x2.size(0), K = x2.size(1), N = weight.size(0);
    const Tensor w = weight.contiguous();
    const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
    const float* px = ptr<float>(x2);
    const float* pw = ptr<float>(w);
    const float* pb = b.defined() ? ptr<float>(b) : nullptr;
    const char* pban = banned.empty() ? nullptr : banned.data();
    const bool bf16 = matmul_precision() == MatmulPrecision::bf16;  // read here: thread-local
    int64_t Nc = kBlockBytes / int64_t(sizeof(float)) / std::max<int64_t>(M, 1);
    Nc = std::clamp<int64_t>(Nc / 16 * 16, 64, 1024);
    const int64_t nblocks = (N + Nc - 1) / Nc;
    const int nt = std::max(1, std::min<int>(omp_get_max_threads(), int(nblocks)));
    std::vector<float> bv(size_t(nt) * size_t(M), 0.0f);
    std::vector<int64_t> bi(size_t(nt) * size_t(M), -1);
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num();
        // Per-thread buffers kept across calls: greedy decoding calls this once a step, and a fresh
        // block buffer of 128 KB or more would be new pages (mmap'd, zeroed) every time.
        thread_local std::vector<float> C, blk_best;
        thread_local std::vector<int64_t> blk_index;
        C.resize(size_t(M) * size_t(Nc)), blk_best.resize(size_t(M)), blk_index.resize(size_t(M));
        float* mv = bv.data() + size_t(tid) * size_t(M);
        int64_t* mi = bi.data() + size_t(tid) * size_t(M);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; ++blk) {
            const int64_t j0 = blk * Nc, nc = std::min(Nc, N - j0);
            if (bf16)
                kernels::cpu::gemm_bf16_batched({false, true, M, nc, K, 1.0f, px, K, 0, pw + j0 * K, K, 0, 0.0f, C.data(),
                                                 nc, 0, 1});
            else
                kernels::cpu::gemm(false, true, M, nc, K, 1.0f, px, K, pw + j0 * K, K, 0.0f, C.data(), nc);
            // The block's best per row (bias added, banned ids skipped, argmax's rule: cpu/argmax.h),
            // merged into the thread's running best; ties keep the earlier block's id.
            kernels::cpu::ArgmaxBlockParams p;
            p.rows = M, p.width = nc, p.logits = C.data(), p.bias = pb ? pb + j0 : nullptr;
            p.banned = pban ? pban + j0 : nullptr, p.best = blk_best.data(), p.index = blk_index.data();
            kernels::cpu::argmax_block(p);
            for (int64_t r = 0; r < M; ++r) {
                const int64_t j = blk_index[size_t(r)];
                if (j >= 0 && detail::argmax_better(blk_best[size_t(r)], j0 + j, mv[r], mi[r]))
                    mv[r] = blk_best[size_t(r)], mi[r] = j0 + j;
            }
        }
    }
    std::vector<int64_t> out(size_t(M), -1);
    for (int64_t r = 0; r < M; ++r) {
        float best = 0.0f;
        int64_t bj = -1;
        for (int t = 0; t < nt; ++t) {
            const int64_t i = bi[size_t(t) * size_t(M) + size_t(r)];
            const float v = bv[size_t(t) * size_t(M) + size_t(r)];
            if (i >= 0 && detail::argmax_better(v, i, best, bj)) best = v, bj = i;
        }
        out[size_t(r)] = bj;
    }
    return out;
}

}  // namespace

Tensor linear_argmax(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const std::vector<char>& banned) {
    detail::check_linear_args("linear_argmax", x, weight, bias, detail::kLinearNames, true);
    const int64_t in = weight.shape()[1], outf = weight.shape()[0];
    QKV_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, "linear_argmax: expected a float tensor, got ",
              dtype_name(x.dtype()));
    QKV_CHECK(banned.empty() || int64_t(banned.size()) == outf, "linear_argmax: banned has ",
              banned.size(), " flags, expected 0 or out_features = ", outf);
    NoGradGuard ng;
    const int64_t rows = leading_rows(x);
    const Tensor x2 = x.detach().contiguous().reshape({rows, in});
    std::vector<int64_t> idx;
    if (x.dtype() == DType::f32 && kernel_mode() == KernelMode::fast && rows > 0 && in > 0)
        idx = linear_argmax_f32(x2, weight.detach(), bias.defined() ? bias.detach() : Tensor(), banned);
    else
        idx = linear_argmax_ref(x2, weight.detach(), bias.defined() ? bias.detach() : Tensor(), banned);
    return from_vector(idx, Shape(x.shape().begin(), x.shape().end() - 1));
}

}  // namespace qkv
