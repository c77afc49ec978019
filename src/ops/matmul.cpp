// matmul and linear: shape checks, operand layout (transposed views become GEMM transpose flags,
// no copy), GEMM dispatch (oneDNN for f32, reference for f64 or KernelMode::reference), backward.
#include "qkv/ops/matmul.h"

#include "kernels/cpu/gemm.h"
#include "kernels/ref/matmul.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/reduce.h"

namespace qkv {

using detail::ptr;

namespace {

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
        if (kernel_mode() == KernelMode::fast) {
            if (batch == 1)
                kernels::cpu::gemm(a.trans, b.trans, M, N, K, 1.f, pa, a.ld, pb, b.ld, 0.f, po, ldc);
            else
                kernels::cpu::gemm_batched(a.trans, b.trans, M, N, K, 1.f, pa, a.ld, a.batch_stride, pb,
                                           b.ld, b.batch_stride, 0.f, po, ldc, M * N, batch);
            return;
        }
    }
    kernels::ref::gemm_batched<T>(a.trans, b.trans, M, N, K, T(1), pa, a.ld, a.batch_stride, pb, b.ld,
                                  b.batch_stride, T(0), po, ldc, M * N, batch);
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
        const int64_t rows = a.numel() / std::max<int64_t>(a.shape().back(), 1);
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

// y = x·Wᵀ + b over all leading dims; dx = dy·W, dW = dyᵀ·x, db = Σ_rows dy
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    QKV_CHECK(weight.dim() == 2, "linear: weight must be (out, in), got ", weight.shape());
    QKV_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], "linear: input of shape ", x.shape(),
              " does not match weight of shape ", weight.shape(), " (in_features ", weight.shape()[1], ")");
    QKV_CHECK(!bias.defined() || bias.shape() == Shape{weight.shape()[0]}, "linear: bias of shape ",
              bias.defined() ? bias.shape() : Shape{}, " does not match out_features ", weight.shape()[0]);
    const int64_t in = weight.shape()[1], outf = weight.shape()[0];
    const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
    Tensor x2 = x.detach().contiguous().reshape({rows, in});
    Tensor y = matmul_nograd(x2, weight.detach().transpose(0, 1));
    if (bias.defined()) {
        QKV_DISPATCH_FLOAT(y.dtype(), "linear", {
            scalar_t* py = ptr<scalar_t>(y);
            const Tensor bc = bias.contiguous();
            const scalar_t* pb = ptr<scalar_t>(bc);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < outf; ++j) py[r * outf + j] += pb[j];
        });
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

}  // namespace qkv
