// concat/stack/split/chunk, index_select/gather, repeat_interleave, with their backward.
#include "qkv/ops/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"

namespace qkv {

using detail::ptr;

// concat: backward slices g back into the pieces
Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
    QKV_CHECK(!xs.empty(), "concat: needs at least one tensor");
    const Tensor& x0 = xs[0];
    dim = normalize_axis(dim, x0.dim(), "concat");
    Shape shape = x0.shape();
    int64_t total = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
        const Tensor& x = xs[k];
        QKV_CHECK(x.dtype() == x0.dtype(), "concat: tensor ", k, " has dtype ", dtype_name(x.dtype()),
                  ", tensor 0 has ", dtype_name(x0.dtype()));
        QKV_CHECK(x.dim() == x0.dim(), "concat: tensor ", k, " has shape ", x.shape(),
                  ", tensor 0 has ", x0.shape());
        for (int64_t i = 0; i < x.dim(); ++i)
            QKV_CHECK(i == dim || x.shape()[size_t(i)] == shape[size_t(i)], "concat: tensor ", k,
                      " has shape ", x.shape(), ", incompatible with ", x0.shape(), " along dim ", i);
        total += x.shape()[size_t(dim)];
    }
    shape[size_t(dim)] = total;
    Tensor out = Tensor::empty(shape, x0.dtype());
    std::vector<int64_t> sizes;
    int64_t at = 0;
    for (const Tensor& x : xs) {
        const int64_t len = x.shape()[size_t(dim)];
        Tensor part = out.slice(dim, at, at + len);
        copy_(part, x);
        sizes.push_back(len);
        at += len;
    }
    record(out, "ConcatBackward", xs, [sizes, dim](const Tensor& g) {
        std::vector<Tensor> gs;
        int64_t a = 0;
        for (int64_t len : sizes) {
            gs.push_back(g.slice(dim, a, a + len).contiguous());
            a += len;
        }
        return gs;
    });
    return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
    QKV_CHECK(!xs.empty(), "stack: needs at least one tensor");
    dim = normalize_axis(dim, xs[0].dim() + 1, "stack");
    std::vector<Tensor> us;
    for (size_t k = 0; k < xs.size(); ++k) {
        QKV_CHECK(xs[k].shape() == xs[0].shape(), "stack: tensor ", k, " has shape ", xs[k].shape(),
                  ", tensor 0 has ", xs[0].shape());
        us.push_back(xs[k].unsqueeze(dim));
    }
    return concat(us, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
    dim = normalize_axis(dim, x.dim(), "split");
    QKV_CHECK(size >= 1, "split: size must be >= 1, got ", size);
    std::vector<Tensor> out;
    const int64_t n = x.shape()[size_t(dim)];
    for (int64_t a = 0; a < n; a += size) out.push_back(x.slice(dim, a, std::min(n, a + size)));
    return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim) {
    QKV_CHECK(n >= 1, "chunk: number of chunks must be >= 1, got ", n);
    dim = normalize_axis(dim, x.dim(), "chunk");
    const int64_t len = x.shape()[size_t(dim)];
    return split(x, std::max<int64_t>(1, (len + n - 1) / n), dim);
}

namespace {

/// Bytes of one dim-0 row of a tensor of this shape and dtype.
int64_t row_bytes(const Shape& shape, DType dt) {
    int64_t n = dtype_size(dt);
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
}

/// dst[idx[i]] (+)= src[i] for rows of `row` elements (idx already range-checked).
template <class T>
void add_rows(T* dst, const T* src, const std::vector<int64_t>& idx, int64_t row) {
    for (size_t i = 0; i < idx.size(); ++i) {
        T* d = dst + idx[i] * row;
        const T* s = src + int64_t(i) * row;
        for (int64_t j = 0; j < row; ++j) d[j] += s[j];
    }
}

/// index_select's backward into `rows` rows of `row` elements: dst[idx[i]] = Σ src[i] over the
/// picks of each row, 0 where none. Distinct indices (the pad-free path's gathers): each picked
/// row is written once as 0 + src (the sum add_rows would form, -0 included) and the others
/// zeroed, by threads; with repeats, zeros then add_rows in index order.
template <class T>
void index_select_backward_rows(T* dst, const T* src, const std::vector<int64_t>& idx, int64_t rows, int64_t row) {
    std::vector<uint8_t> seen(size_t(rows), 0);
    bool distinct = true;
    for (int64_t i : idx) {
        distinct = distinct && !seen[size_t(i)];
        seen[size_t(i)] = 1;
    }
    if (!distinct) {
        std::fill_n(dst, rows * row, T(0));
        add_rows(dst, src, idx, row);
        return;
    }
    const bool par = rows * row > detail::kParallelGrain;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; ++r)
            if (!seen[size_t(r)]) std::fill_n(dst + r * row, row, T(0));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < int64_t(idx.size()); ++i) {
            T* d = dst + idx[size_t(i)] * row;
            const T* s = src + i * row;
            for (int64_t j = 0; j < row; ++j) d[j] = T(0) + s[j];
        }
    }
}

/// dst row i = src row idx[i] (rows of rb bytes), threaded when the copy is large.
void gather_rows(char* dst, const char* src, const std::vector<int64_t>& idx, int64_t rb) {
    const int64_t n = int64_t(idx.size());
#pragma omp parallel for if (n * rb > (int64_t(1) << 17)) schedule(static)
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * rb, src + idx[size_t(i)] * rb, size_t(rb));
}

/// index_select on dim 0 (indices checked): one memcpy per row; backward adds g's rows into
/// zeros (repeated indices accumulate).
Tensor index_select_rows(const Tensor& x, const std::vector<int64_t>& idx, const Shape& shape) {
    const Tensor xc = x.detach().contiguous();
    Tensor out = Tensor::empty(shape, x.dtype());
    const int64_t rb = row_bytes(shape, x.dtype());
    const char* src = static_cast<const char*>(xc.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    if (rb > 0) gather_rows(dst, src, idx, rb);
    const Shape in_shape = x.shape();
    record(out, "IndexSelectBackward", {x}, [idx, in_shape](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor z = Tensor::empty(in_shape, g.dtype());
        const int64_t rows = in_shape.empty() ? 1 : in_shape[0];
        const int64_t row = rows == 0 ? 0 : shape_numel(in_shape) / rows;
        QKV_DISPATCH_FLOAT(g.dtype(), "index_select_backward",
                           index_select_backward_rows<scalar_t>(ptr<scalar_t>(z), ptr<scalar_t>(gc), idx, rows, row));
        return std::vector<Tensor>{z};
    });
    return out;
}

}  // namespace

Tensor scatter_rows(const Tensor& src, const Tensor& index, int64_t num_rows) {
    QKV_CHECK(src.defined() && src.dim() >= 1, "scatter_rows: src must have at least 1 dim, got ",
              src.defined() ? src.shape() : Shape{});
    QKV_CHECK(index.defined() && index.dtype() == DType::i64 && index.dim() == 1 &&
                  index.size(0) == src.size(0),
              "scatter_rows: index must be 1-D int64 with one entry per src row (", src.size(0),
              "), got ", index.defined() ? index.shape() : Shape{});
    QKV_CHECK(num_rows >= 0, "scatter_rows: num_rows must be >= 0, got ", num_rows);
    const std::vector<int64_t> idx = index.to_vector<int64_t>();
    std::vector<uint8_t> seen(size_t(num_rows), 0);
    for (size_t i = 0; i < idx.size(); ++i) {
        QKV_CHECK(idx[i] >= 0 && idx[i] < num_rows, "scatter_rows: index ", idx[i], " at position ", i,
                  " out of range [0, ", num_rows, ")");
        QKV_CHECK(!seen[size_t(idx[i])], "scatter_rows: index ", idx[i], " repeats (position ", i, ")");
        seen[size_t(idx[i])] = 1;
    }
    Shape shape = src.shape();
    shape[0] = num_rows;
    // Only the rows no index names are zeroed: filling the whole output first cost 0.56 % of an
    // anchor training step (the pad-free path's scatters), writing most rows twice.
    Tensor out = Tensor::empty(shape, src.dtype());
    const Tensor sc = src.detach().contiguous();
    const int64_t rb = row_bytes(shape, src.dtype());
    const char* s = static_cast<const char*>(sc.raw_data());
    char* d = static_cast<char*>(out.raw_data());
    if (rb > 0) {
        // Indices are unique (checked above): rows are disjoint, so threads may split them.
        const bool par = num_rows * rb > (int64_t(1) << 17);
#pragma omp parallel if (par)
        {
#pragma omp for schedule(static) nowait
            for (int64_t r = 0; r < num_rows; ++r)
                if (!seen[size_t(r)]) std::memset(d + r * rb, 0, size_t(rb));
#pragma omp for schedule(static)
            for (int64_t i = 0; i < int64_t(idx.size()); ++i)
                std::memcpy(d + idx[size_t(i)] * rb, s + i * rb, size_t(rb));
        }
    }
    const Tensor index_c = index.detach().contiguous();
    record(out, "ScatterRowsBackward", {src}, [index_c](const Tensor& g) {
        return std::vector<Tensor>{index_select(g, 0, index_c)};
    });
    return out;
}

// index_select: backward scatter-adds g rows into zeros
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
    dim = normalize_axis(dim, x.dim(), "index_select");
    QKV_CHECK(index.dtype() == DType::i64 && index.dim() == 1, "index_select: index must be a 1-D int64 "
              "tensor, got ", dtype_name(index.dtype()), " ", index.shape());
    const int64_t n = x.shape()[size_t(dim)];
    const std::vector<int64_t> idx = index.to_vector<int64_t>();
    for (size_t i = 0; i < idx.size(); ++i)
        QKV_CHECK(idx[i] >= 0 && idx[i] < n, "index_select: index ", idx[i], " at position ", i,
                  " out of range for dim ", dim, " of size ", n, " (shape ", x.shape(), ")");
    Shape shape = x.shape();
    shape[size_t(dim)] = int64_t(idx.size());
    if (dim == 0) return index_select_rows(x, idx, shape);
    Tensor out = Tensor::empty(shape, x.dtype());
    for (size_t i = 0; i < idx.size(); ++i) {
        Tensor dst = out.select(dim, int64_t(i));
        copy_(dst, x.detach().select(dim, idx[i]));
    }
    const Shape in_shape = x.shape();
    record(out, "IndexSelectBackward", {x}, [idx, in_shape, dim](const Tensor& g) {
        Tensor z = zeros(in_shape, g.dtype());
        for (size_t i = 0; i < idx.size(); ++i) {
            Tensor row = z.select(dim, idx[i]);
            Tensor sum = add(row, g.select(dim, int64_t(i)));
            copy_(row, sum);
        }
        return std::vector<Tensor>{z};
    });
    return out;
}

// gather: out[..i..] = x[..index[..i..]..] along dim; backward scatter-adds
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
    dim = normalize_axis(dim, x.dim(), "gather");
    QKV_CHECK(index.dtype() == DType::i64 && index.dim() == x.dim(), "gather: index must be int64 of "
              "rank ", x.dim(), ", got ", dtype_name(index.dtype()), " ", index.shape());
    for (int64_t i = 0; i < x.dim(); ++i)
        QKV_CHECK(i == dim || index.shape()[size_t(i)] <= x.shape()[size_t(i)], "gather: index shape ",
                  index.shape(), " exceeds input shape ", x.shape(), " in dim ", i);
    const Tensor xc = x.detach().contiguous(), ic = index.contiguous();
    Tensor out = Tensor::empty(index.shape(), x.dtype());
    const Shape xs = xc.strides(), is = ic.strides();
    const int64_t n = x.shape()[size_t(dim)];
    const int64_t* pi = ptr<int64_t>(ic);
    // Map each index element to the x offset with `dim` replaced by the index value.
    std::vector<int64_t> offs(static_cast<size_t>(ic.numel()));
    {
        Shape pos(static_cast<size_t>(ic.dim()), 0);
        for (int64_t e = 0, ne = ic.numel(); e < ne; ++e) {
            const int64_t v = pi[e];
            QKV_CHECK(v >= 0 && v < n, "gather: index ", v, " out of range for dim ", dim, " of size ", n);
            int64_t off = 0;
            for (int64_t d = 0; d < ic.dim(); ++d) off += (d == dim ? v : pos[size_t(d)]) * xs[size_t(d)];
            offs[size_t(e)] = off;
            for (int64_t d = ic.dim() - 1; d >= 0; --d) {
                if (++pos[size_t(d)] < ic.shape()[size_t(d)]) break;
                pos[size_t(d)] = 0;
            }
        }
    }
    QKV_DISPATCH_STORAGE(x.dtype(), "gather", {
        const scalar_t* px = ptr<scalar_t>(xc);
        scalar_t* po = ptr<scalar_t>(out);
        for (size_t e = 0; e < offs.size(); ++e) po[e] = px[offs[e]];
    });
    const Shape in_shape = x.shape();
    record(out, "GatherBackward", {x}, [offs, in_shape](const Tensor& g) {
        Tensor z = zeros(in_shape, g.dtype());
        Tensor gc = g.contiguous();
        QKV_DISPATCH_FLOAT(g.dtype(), "gather_backward", {
            scalar_t* pz = ptr<scalar_t>(z);
            const scalar_t* pg = ptr<scalar_t>(gc);
            for (size_t e = 0; e < offs.size(); ++e) pz[offs[e]] += pg[e];
        });
        return std::vector<Tensor>{z};
    });
    (void)is;
    return out;
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim) {
    QKV_CHECK(repeats >= 1, "repeat_interleave: repeats must be >= 1, got ", repeats);
    dim = normalize_axis(dim, x.dim(), "repeat_interleave");
    // (.., n, ..) -> (.., n, 1, ..) -> expand (.., n, r, ..) -> (.., n·r, ..): all differentiable.
    Shape expanded = x.shape();
    expanded.insert(expanded.begin() + dim + 1, repeats);
    Shape out_shape = x.shape();
    out_shape[size_t(dim)] *= repeats;
    return x.unsqueeze(dim + 1).expand(expanded).contiguous().reshape(out_shape);
}

}  // namespace qkv
