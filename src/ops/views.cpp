// Tensor's view methods (reshape, transpose, permute, slice, select, unsqueeze, squeeze, expand)
// and the copies contiguous(), clone(), to(): each records its backward here.
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"

namespace qkv {

namespace {
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
    auto impl     = std::make_shared<TensorImpl>();
    impl->storage = t.impl().storage;
    impl->shape   = std::move(shape);
    impl->strides = std::move(strides);
    impl->offset  = offset;
    impl->dtype   = t.dtype();
    return Tensor(std::move(impl));
}

/// Strides for viewing a tensor with `strides` as `new_shape`, or empty if impossible without a
/// copy (PyTorch's computeStride rule restricted to the contiguous-chunk case). A tensor with no
/// elements always has a view (the rule Tensor::is_contiguous follows; reshape would otherwise
/// copy it and try again forever).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
    out.assign(new_shape.size(), 0);
    if (shape_numel(shape) == 0) {
        out = contiguous_strides(new_shape);
        return true;
    }
    // Fast path: contiguous input.
    int64_t expect = 1;
    bool contiguous = true;
    for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
        if (shape[size_t(i)] != 1 && strides[size_t(i)] != expect) contiguous = false;
        expect *= shape[size_t(i)];
    }
    if (contiguous) {
        out = contiguous_strides(new_shape);
        return true;
    }
    return false;
}
}  // namespace

Tensor Tensor::reshape(const Shape& shape_in) const {
    Shape shape = shape_in;
    int64_t infer = -1, known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            QKV_CHECK(infer < 0, "reshape: only one dimension can be -1, got ", shape_in);
            infer = int64_t(i);
        } else {
            QKV_CHECK(shape[i] >= 0, "reshape: invalid shape ", shape_in);
            QKV_CHECK(!__builtin_mul_overflow(known, shape[i], &known), "reshape: the shape ", shape_in,
                      " has more elements than int64 can count");
        }
    }
    if (infer >= 0) {
        QKV_CHECK(known != 0 && numel() % known == 0, "reshape: cannot reshape ", this->shape(),
                  " into ", shape_in);
        shape[size_t(infer)] = numel() / known;
    }
    QKV_CHECK(shape_numel(shape) == numel(), "reshape: cannot reshape ", this->shape(), " (",
              numel(), " elements) into ", shape_in);
    Shape st;
    Tensor out;
    if (view_strides(this->shape(), strides(), shape, st)) {
        out = make_view(*this, shape, st, offset());
    } else {
        return contiguous().reshape(shape);
    }
    const Shape in_shape = this->shape();
    record(out, "ReshapeBackward", {*this}, [in_shape](const Tensor& g) {
        return std::vector<Tensor>{g.reshape(in_shape)};
    });
    return out;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims_in) const {
    QKV_CHECK(int64_t(dims_in.size()) == dim(), "permute: got ", dims_in.size(),
              " dims for a tensor of rank ", dim());
    std::vector<int64_t> dims(dims_in.size());
    std::vector<bool> used(dims.size(), false);
    Shape shape(dims.size()), st(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
        dims[i] = normalize_axis(dims_in[i], dim(), "permute");
        QKV_CHECK(!used[size_t(dims[i])], "permute: repeated dim ", dims_in[i]);
        used[size_t(dims[i])] = true;
        shape[i] = this->shape()[size_t(dims[i])];
        st[i]    = strides()[size_t(dims[i])];
    }
    Tensor out = make_view(*this, shape, st, offset());
    std::vector<int64_t> inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[size_t(dims[i])] = int64_t(i);
    record(out, "PermuteBackward", {*this},
           [inv](const Tensor& g) { return std::vector<Tensor>{g.permute(inv)}; });
    return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
    d0 = normalize_axis(d0, dim(), "transpose");
    d1 = normalize_axis(d1, dim(), "transpose");
    std::vector<int64_t> p(static_cast<size_t>(dim()));
    std::iota(p.begin(), p.end(), 0);
    std::swap(p[size_t(d0)], p[size_t(d1)]);
    return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
    d = normalize_axis(d, dim(), "slice");
    QKV_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
    const int64_t n = shape()[size_t(d)];
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = std::clamp<int64_t>(start, 0, n);
    end   = std::clamp<int64_t>(end, start, n);
    Shape shape = this->shape(), st = strides();
    shape[size_t(d)] = (end - start + step - 1) / step;
    st[size_t(d)] *= step;
    Tensor out = make_view(*this, shape, st, offset() + start * strides()[size_t(d)]);
    const Shape in_shape = this->shape();
    const DType dt = dtype();
    record(out, "SliceBackward", {*this}, [in_shape, dt, d, start, end, step](const Tensor& g) {
        Tensor z = zeros(in_shape, dt);
        Tensor part = z.slice(d, start, end, step);
        copy_(part, g);
        return std::vector<Tensor>{z};
    });
    return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
    d = normalize_axis(d, dim(), "select");
    const int64_t n = shape()[size_t(d)];
    QKV_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d,
              " of size ", n);
    if (index < 0) index += n;
    return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
    d = normalize_axis(d, dim() + 1, "unsqueeze");
    Shape shape = this->shape();
    shape.insert(shape.begin() + d, 1);
    Shape st = strides();
    const int64_t s = d < dim() ? strides()[size_t(d)] * this->shape()[size_t(d)] : 1;
    st.insert(st.begin() + d, s);
    Tensor out = make_view(*this, shape, st, offset());
    record(out, "UnsqueezeBackward", {*this},
           [d](const Tensor& g) { return std::vector<Tensor>{g.squeeze(d)}; });
    return out;
}

Tensor Tensor::squeeze(int64_t d) const {
    d = normalize_axis(d, dim(), "squeeze");
    QKV_CHECK(shape()[size_t(d)] == 1, "squeeze: dim ", d, " of shape ", shape(), " is not 1");
    Shape shape = this->shape(), st = strides();
    shape.erase(shape.begin() + d);
    st.erase(st.begin() + d);
    Tensor out = make_view(*this, shape, st, offset());
    record(out, "SqueezeBackward", {*this},
           [d](const Tensor& g) { return std::vector<Tensor>{g.unsqueeze(d)}; });
    return out;
}

Tensor Tensor::expand(const Shape& shape) const {
    QKV_CHECK(shape.size() >= size_t(dim()), "expand: cannot expand ", this->shape(), " to ", shape);
    const size_t lead = shape.size() - size_t(dim());
    Shape st(shape.size(), 0);
    for (size_t i = 0; i < size_t(dim()); ++i) {
        const int64_t have = this->shape()[i], want = shape[lead + i];
        QKV_CHECK(have == want || have == 1, "expand: cannot expand ", this->shape(), " to ", shape);
        st[lead + i] = have == want ? strides()[i] : 0;
    }
    Tensor out = make_view(*this, shape, st, offset());
    const Shape in_shape = this->shape();
    record(out, "ExpandBackward", {*this},
           [in_shape](const Tensor& g) { return std::vector<Tensor>{sum_to_shape(g, in_shape)}; });
    return out;
}

Tensor Tensor::clone() const {
    Tensor out = Tensor::empty(shape(), dtype());
    {
        Tensor o = out;
        copy_(o, detach());
    }
    record(out, "CloneBackward", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
    return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType dt) const {
    if (dt == dtype()) return *this;
    // A gradient cannot flow through bf16 or f16 storage: refuse rather than cut the graph silently.
    QKV_CHECK(!(is_half_storage(dt) && requires_grad() && grad_enabled()), "to(", dtype_name(dt), "): the tensor "
              "requires grad, and ", dtype_name(dt), " tensors are storage only (no gradient flows through them); "
              "call .detach() first, or convert under no_grad");
    Tensor out = Tensor::empty(shape(), dt);
    copy_(out, detach());
    if (is_floating(dt) && is_floating(dtype())) {
        const DType src = dtype();
        record(out, "ToBackward", {*this},
               [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
    }
    return out;
}

}  // namespace qkv
