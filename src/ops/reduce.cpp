// Reductions: sum, mean, max, argmax, and sum_to_shape (the backward of broadcasting).
// Sums accumulate in double for both float dtypes (bias gradients sum thousands of rows).
#include "qkv/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/strided.h"
#include "core/argmax_rule.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/elementwise.h"

namespace qkv {

using detail::ptr;

namespace {

std::vector<bool> reduced_mask(const std::vector<int64_t>& dims, int64_t rank, const char* op) {
    std::vector<bool> red(static_cast<size_t>(rank), dims.empty());
    for (int64_t d : dims) {
        const int64_t a = normalize_axis(d, rank, op);
        QKV_CHECK(!red[size_t(a)] || dims.empty(), op, ": dim ", d, " repeated");
        red[size_t(a)] = true;
    }
    return red;
}

Shape reduced_shape(const Shape& in, const std::vector<bool>& red, bool keepdim) {
    Shape out;
    for (size_t i = 0; i < in.size(); ++i) {
        if (!red[i]) out.push_back(in[i]);
        else if (keepdim) out.push_back(1);
    }
    return out;
}

/// True when the reduced dims are a non-empty leading run followed by a non-empty kept run.
bool leading_reduction(const std::vector<bool>& red) {
    size_t k = 0;
    while (k < red.size() && red[k]) ++k;
    if (k == 0 || k == red.size()) return false;
    for (size_t i = k; i < red.size(); ++i)
        if (red[i]) return false;
    return true;
}

template <class T>
void sum_kernel(const Tensor& x, const std::vector<bool>& red, Tensor& out) {
    const Shape& shape = x.shape();
    const int64_t rank = x.dim();
    // Accumulator laid out like `out` (keepdim form); reduced dims get stride 0.
    Shape keep_shape(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) keep_shape[size_t(i)] = red[size_t(i)] ? 1 : shape[size_t(i)];
    Shape acc_strides = contiguous_strides(keep_shape);
    for (int64_t i = 0; i < rank; ++i)
        if (red[size_t(i)]) acc_strides[size_t(i)] = 0;
    std::vector<double> acc(static_cast<size_t>(shape_numel(keep_shape)), 0.0);
    const T* px = static_cast<const T*>(x.impl().storage->data);
    // Whole-tensor sum of a contiguous tensor: parallel reduction.
    if (acc.size() == 1 && x.is_contiguous()) {
        const int64_t n = x.numel();
        const T* p = px + x.offset();
        double s = 0;
#pragma omp parallel for reduction(+ : s) if (n > detail::kParallelGrain) schedule(static)
        for (int64_t i = 0; i < n; ++i) s += double(p[i]);
        acc[0] = s;
    } else if (x.is_contiguous() && leading_reduction(red) && x.numel() > detail::kParallelGrain) {
        // Leading dims reduced, trailing kept (a bias gradient: rows x cols -> cols): threads take
        // column blocks; each column still sums its rows in order, as the serial walk below.
        const int64_t cols = int64_t(acc.size()), rows = x.numel() / cols;
        const T* p = px + x.offset();
        constexpr int64_t kBlock = 64;
        const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t c0 = b * kBlock, c1 = std::min(cols, c0 + kBlock);
            double* a = acc.data() + c0;
            for (int64_t r = 0; r < rows; ++r) {
                const T* row = p + r * cols;
                for (int64_t c = c0; c < c1; ++c) a[c - c0] += double(row[c]);
            }
        }
    } else {
        detail::for_each_strided<2>(shape, {&x.strides(), &acc_strides}, {x.offset(), 0},
                                    [&](int64_t m, auto o, auto s) {
                                        if (s[1] == 0) {
                                            double t = 0;
                                            for (int64_t i = 0; i < m; ++i) t += double(px[o[0] + i * s[0]]);
                                            acc[size_t(o[1])] += t;
                                        } else {
                                            for (int64_t i = 0; i < m; ++i)
                                                acc[size_t(o[1] + i * s[1])] += double(px[o[0] + i * s[0]]);
                                        }
                                    });
    }
    T* po = ptr<T>(out);
    for (size_t i = 0; i < acc.size(); ++i) po[i] = T(acc[i]);
}

}  // namespace

// sum: d = g broadcast back over the reduced dims
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
    QKV_CHECK(a.defined(), "sum: undefined tensor argument");
    const std::vector<bool> red = reduced_mask(dims, a.dim(), "sum");
    Tensor out = Tensor::empty(reduced_shape(a.shape(), red, keepdim), a.dtype());
    QKV_DISPATCH_FLOAT(a.dtype(), "sum", sum_kernel<scalar_t>(a, red, out));
    const Shape in_shape = a.shape();
    const Shape keep = reduced_shape(a.shape(), red, true);
    record(out, "SumBackward", {a}, [in_shape, keep](const Tensor& g) {
        return std::vector<Tensor>{g.reshape(keep).expand(in_shape).contiguous()};
    });
    return out;
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
    const std::vector<bool> red = reduced_mask(dims, a.dim(), "mean");
    int64_t count = 1;
    for (size_t i = 0; i < red.size(); ++i)
        if (red[i]) count *= a.shape()[i];
    return mul(sum(a, dims, keepdim), count ? 1.0 / double(count) : NAN);
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
    if (grad.shape() == shape) return grad;
    const int64_t lead = grad.dim() - int64_t(shape.size());
    QKV_CHECK(lead >= 0, "sum_to_shape: cannot reduce ", grad.shape(), " to ", shape);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < grad.dim(); ++i) {
        if (i < lead) dims.push_back(i);
        else if (shape[size_t(i - lead)] == 1 && grad.shape()[size_t(i)] != 1) dims.push_back(i);
    }
    Tensor s = dims.empty() ? grad : sum(grad, dims, true);
    if (lead > 0) {
        Shape sq(s.shape().begin() + lead, s.shape().end());
        s = s.reshape(sq);
    }
    return s.reshape(shape);
}

namespace {
/// Moves `dim` last and makes the result contiguous: (rows, n) with rows = numel / n.
Tensor move_last(const Tensor& a, int64_t dim) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < a.dim(); ++i)
        if (i != dim) perm.push_back(i);
    perm.push_back(dim);
    return a.detach().permute(perm).contiguous();
}

Shape drop_dim(const Shape& s, int64_t dim, bool keepdim) {
    Shape out = s;
    if (keepdim) out[size_t(dim)] = 1;
    else out.erase(out.begin() + dim);
    return out;
}

/// Row-wise argmax of a contiguous (rows, n) tensor by detail::row_argmax (first maximum; NaN
/// counts as maximal), skipping banned indices (nullptr: none).
template <class T>
std::vector<int64_t> rows_argmax(const Tensor& t, int64_t n, const char* banned = nullptr) {
    const int64_t rows = n ? t.numel() / n : 0;
    std::vector<int64_t> idx(static_cast<size_t>(rows));
    const T* p = ptr<T>(t);
    for (int64_t r = 0; r < rows; ++r) idx[size_t(r)] = detail::row_argmax(p + r * n, n, banned);
    return idx;
}
}  // namespace

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
    dim = normalize_axis(dim, a.dim(), "argmax");
    const int64_t n = a.dim() ? a.shape()[size_t(dim)] : 1;
    QKV_CHECK(n > 0, "argmax: reducing an empty dim of shape ", a.shape());
    Tensor t = a.dim() ? move_last(a, dim) : a;
    std::vector<int64_t> idx;
    QKV_DISPATCH_ALL(a.dtype(), "argmax", idx = rows_argmax<scalar_t>(t, n));
    return from_vector(idx, a.dim() ? drop_dim(a.shape(), dim, keepdim) : Shape{});
}

Tensor argmax_allowed(const Tensor& a, const std::vector<char>& banned) {
    QKV_CHECK(a.defined() && a.dim() >= 1, "argmax_allowed: need a tensor of at least 1 dim, got ",
              a.defined() ? a.shape() : Shape{});
    const int64_t n = a.shape().back();
    QKV_CHECK(n > 0, "argmax_allowed: reducing an empty dim of shape ", a.shape());
    QKV_CHECK(banned.empty() || int64_t(banned.size()) == n, "argmax_allowed: banned has ", banned.size(),
              " flags, expected 0 or ", n, " (the last dim of ", a.shape(), ")");
    const Tensor t = a.detach().contiguous();
    std::vector<int64_t> idx;
    QKV_DISPATCH_ALL(a.dtype(), "argmax_allowed",
                     idx = rows_argmax<scalar_t>(t, n, banned.empty() ? nullptr : banned.data()));
    return from_vector(idx, Shape(a.shape().begin(), a.shape().end() - 1));
}

// max: d = g routed to the first maximal element of each row
Tensor max(const Tensor& a, int64_t dim, bool keepdim) {
    dim = normalize_axis(dim, a.dim(), "max");
    const int64_t n = a.shape()[size_t(dim)];
    QKV_CHECK(n > 0, "max: reducing an empty dim of shape ", a.shape());
    Tensor t = move_last(a, dim);
    Tensor out = Tensor::empty(drop_dim(a.shape(), dim, keepdim), a.dtype());
    std::vector<int64_t> idx;
    QKV_DISPATCH_FLOAT(a.dtype(), "max", {
        idx = rows_argmax<scalar_t>(t, n);
        const scalar_t* p = ptr<scalar_t>(t);
        scalar_t* po = ptr<scalar_t>(out);
        for (size_t r = 0; r < idx.size(); ++r) po[r] = p[int64_t(r) * n + idx[r]];
    });
    const Shape in_shape = a.shape();
    record(out, "MaxBackward", {a}, [idx, in_shape, dim, n](const Tensor& g) {
        // Scatter g into a zero tensor laid out with `dim` last, then move it back.
        Shape moved;
        for (int64_t i = 0; i < int64_t(in_shape.size()); ++i)
            if (i != dim) moved.push_back(in_shape[size_t(i)]);
        moved.push_back(n);
        Tensor z = zeros(moved, g.dtype());
        Tensor gc = g.contiguous();
        QKV_DISPATCH_FLOAT(g.dtype(), "max_backward", {
            scalar_t* pz = ptr<scalar_t>(z);
            const scalar_t* pg = ptr<scalar_t>(gc);
            for (size_t r = 0; r < idx.size(); ++r) pz[int64_t(r) * n + idx[r]] = pg[r];
        });
        std::vector<int64_t> inv(in_shape.size());
        // moved dims: [0..dim-1, dim+1..rank-1, dim] -> original order
        int64_t k = 0;
        for (int64_t i = 0; i < int64_t(in_shape.size()); ++i)
            if (i != dim) inv[size_t(i)] = k++;
        inv[size_t(dim)] = int64_t(in_shape.size()) - 1;
        return std::vector<Tensor>{z.permute(inv).contiguous()};
    });
    return out;
}

}  // namespace qkv
