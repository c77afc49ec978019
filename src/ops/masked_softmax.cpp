// masked_softmax / sequence_mask ops: valid_lens -> per-row lengths, kernel, backward.
#include "qkv/ops/masked_softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/ref/masked_softmax.h"
#include "ops/dispatch.h"
#include "ops/valid_lens.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/elementwise.h"

namespace qkv {

using detail::ptr;

Tensor masked_softmax_rows(const Tensor& X, const Tensor& lens) {
    QKV_CHECK(X.defined() && X.dim() >= 1, "masked_softmax: X must have at least 1 dim");
    const int64_t cols = X.shape().back();
    const int64_t rows = cols ? X.numel() / cols : 0;
    Tensor lc;
    if (lens.defined()) {
        Shape want(X.shape().begin(), X.shape().end() - 1);
        QKV_CHECK(lens.dtype() == DType::i64 && lens.shape() == want, "masked_softmax: row lengths must "
                  "be int64 of shape ", want, ", got ", dtype_name(lens.dtype()), " ", lens.shape());
        lc = lens.contiguous();
    }
    Tensor xc = X.detach().contiguous();
    Tensor y = Tensor::empty(X.shape(), X.dtype());
    QKV_DISPATCH_FLOAT(X.dtype(), "masked_softmax",
                       kernels::ref::masked_softmax_forward<scalar_t>(
                           ptr<scalar_t>(xc), ptr<scalar_t>(y), lc.defined() ? ptr<int64_t>(lc) : nullptr,
                           rows, cols));
    Tensor sy = y.detach();
    record(y, "MaskedSoftmaxBackward", {X}, [sy, rows, cols](const Tensor& g) {
        Tensor gc = g.contiguous();
        Tensor dx = Tensor::empty(sy.shape(), sy.dtype());
        QKV_DISPATCH_FLOAT(sy.dtype(), "masked_softmax_backward",
                           kernels::ref::masked_softmax_backward<scalar_t>(
                               ptr<scalar_t>(sy), ptr<scalar_t>(gc), ptr<scalar_t>(dx), rows, cols));
        return std::vector<Tensor>{dx};
    });
    return y;
}

namespace detail {
std::vector<int64_t> valid_lens_to_int(const Tensor& v, int64_t K, const char* op) {
    std::vector<int64_t> out;
    if (v.dtype() == DType::i64) {
        out = v.contiguous().to_vector<int64_t>();
        for (int64_t& x : out) x = std::clamp<int64_t>(x, 0, K);
        return out;
    }
    QKV_CHECK(is_floating(v.dtype()), op, ": valid_lens must be int64 or float, got ", dtype_name(v.dtype()));
    const std::vector<double> f = v.to(DType::f64).contiguous().to_vector<double>();
    out.resize(f.size());
    for (size_t i = 0; i < f.size(); ++i) {
        QKV_CHECK(!std::isnan(f[i]), op, ": valid_lens[", i, "] (flat index) is ", f[i],
                  "; a length must be a number");
        // j < len  <=>  j < ceil(len); clamp in double before the conversion (inf, 1e30 fit no int64)
        out[i] = int64_t(std::clamp(std::ceil(f[i]), 0.0, double(K)));
    }
    return out;
}
}  // namespace detail

Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens) {
    if (!valid_lens.defined()) return masked_softmax_rows(X, Tensor());
    QKV_CHECK(X.dim() >= 2, "masked_softmax: X must be (B, ..., Q, K), got ", X.shape());
    const int64_t B = X.shape()[0], Q = X.shape()[size_t(X.dim() - 2)];
    const int64_t mid = X.numel() / std::max<int64_t>(1, B * Q * X.shape().back());
    const std::vector<int64_t> v = detail::valid_lens_to_int(valid_lens, X.shape().back(), "masked_softmax");
    Shape row_shape(X.shape().begin(), X.shape().end() - 1);
    std::vector<int64_t> lens(static_cast<size_t>(shape_numel(row_shape)));
    if (valid_lens.dim() == 1) {
        QKV_CHECK(valid_lens.shape()[0] == B, "masked_softmax: valid_lens of shape ", valid_lens.shape(),
                  " does not match the batch size of X ", X.shape());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t r = 0; r < mid * Q; ++r) lens[size_t(b * mid * Q + r)] = v[size_t(b)];
    } else {
        QKV_CHECK(valid_lens.dim() == 2 && valid_lens.shape()[0] == B && valid_lens.shape()[1] == Q,
                  "masked_softmax: valid_lens of shape ", valid_lens.shape(), " must be (B) or (B, Q) for X ",
                  X.shape());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t m = 0; m < mid; ++m)
                for (int64_t q = 0; q < Q; ++q) lens[size_t((b * mid + m) * Q + q)] = v[size_t(b * Q + q)];
    }
    return masked_softmax_rows(X, from_vector(lens, row_shape));
}

Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value) {
    QKV_CHECK(X.dim() >= 2, "sequence_mask: X must be (B, T, ...), got ", X.shape());
    QKV_CHECK(valid_len.dim() == 1 && valid_len.shape()[0] == X.shape()[0], "sequence_mask: valid_len "
              "of shape ", valid_len.shape(), " does not match X ", X.shape());
    const int64_t B = X.shape()[0], T = X.shape()[1];
    const std::vector<int64_t> v = detail::valid_lens_to_int(valid_len, T, "sequence_mask");
    std::vector<bool> m(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) m[size_t(b * T + t)] = t >= v[size_t(b)];
    Shape ms{B, T};
    for (int64_t i = 2; i < X.dim(); ++i) ms.push_back(1);
    return masked_fill(X, from_vector(m, ms), value);
}

}  // namespace qkv
