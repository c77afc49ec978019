#pragma once
// qkv::Tensor: a cheap handle to an n-d array (storage + shape + strides + offset + dtype) that
// also carries its autograd state (requires_grad, grad, grad_fn). Views share storage.
// Ops live in qkv/ops/*.h; this header holds the type, its views and factories.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/error.h"
#include "qkv/core/shape.h"

namespace qkv {

class Generator;
class Node;

/// Reference-counted bytes from the caching allocator (core/allocator.h). Never resized.
struct Storage {
    void*   data   = nullptr;
    int64_t nbytes = 0;
    explicit Storage(int64_t nbytes);
    ~Storage();
    Storage(const Storage&)            = delete;
    Storage& operator=(const Storage&) = delete;
};

class Tensor;

/// The shared state behind a Tensor handle.
struct TensorImpl {
    std::shared_ptr<Storage> storage;
    Shape                    shape;
    Shape                    strides;  // in elements
    int64_t                  offset = 0;  // in elements
    DType                    dtype  = DType::f32;
    // autograd
    bool                     requires_grad = false;
    std::shared_ptr<TensorImpl> grad;      // accumulated gradient (leaves)
    std::shared_ptr<Node>       grad_fn;   // producer node (non-leaves)
};

class Tensor {
public:
    Tensor() = default;
    explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

    /// Uninitialised contiguous tensor (memory from the caching allocator). Throws qkv::Error
    /// naming the shape for a negative dim or when the element or byte count overflows int64
    /// (as do every factory below, which build on it).
    static Tensor empty(const Shape& shape, DType dtype = DType::f32);

    bool defined() const { return impl_ != nullptr; }
    const Shape& shape() const { return impl().shape; }
    const Shape& strides() const { return impl().strides; }
    int64_t offset() const { return impl().offset; }
    DType dtype() const { return impl().dtype; }
    int64_t dim() const { return int64_t(impl().shape.size()); }
    /// Size of dimension d (negative d counts from the end); throws when out of range.
    int64_t size(int64_t d) const;
    int64_t numel() const { return shape_numel(impl().shape); }
    /// Row-major without gaps: each dim's stride is the product of the later dims' sizes (dims
    /// of size 1 may have any stride). A tensor with no elements is contiguous whatever its
    /// strides (as in PyTorch): contiguous_strides() counts a 0 dim as 1, so (3, 0) gets (1, 1).
    bool is_contiguous() const;
    /// True when both handles share one TensorImpl.
    bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

    /// Typed pointer to element 0 (storage + offset); throws when T does not match dtype().
    /// T is float, double, int64_t, bool or bfloat16 (core/bf16.h: the bit pattern).
    template <class T> T* data() const;
    void* raw_data() const;

    /// The single value of a one-element tensor, converted to double (exact for every dtype but
    /// i64 beyond 2^53); throws otherwise.
    double item() const;
    /// Copies the elements (any layout) into a vector in row-major order; T must match dtype
    /// (bf16: T = bfloat16, the bit patterns; for values use .to(DType::f32).to_vector<float>()).
    template <class T> std::vector<T> to_vector() const;

    // ---- views (share storage; differentiable) ----
    /// Same data, new shape; one dim may be -1. A view when contiguous, else a copy.
    Tensor reshape(const Shape& shape) const;
    /// Swaps two dims (view).
    Tensor transpose(int64_t d0, int64_t d1) const;
    /// Reorders dims (view); dims is a permutation of 0..dim()-1.
    Tensor permute(const std::vector<int64_t>& dims) const;
    /// Elements [start, end) with step along dim (view); negative start/end count from the end.
    Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
    /// Index i along dim, removing that dim (view).
    Tensor select(int64_t dim, int64_t index) const;
    /// Inserts a size-1 dim at position d (view).
    Tensor unsqueeze(int64_t d) const;
    /// Removes dim d, which must have size 1 (view).
    Tensor squeeze(int64_t d) const;
    /// Broadcasts size-1 dims (stride 0) to `shape` (view); may add leading dims.
    Tensor expand(const Shape& shape) const;
    /// This tensor if contiguous, else a contiguous copy (differentiable).
    Tensor contiguous() const;
    /// A contiguous copy (differentiable).
    Tensor clone() const;
    /// Converts the dtype: this tensor when dtype() is already `dtype`, else a contiguous copy
    /// converted as copy_ (ops/elementwise.h) does: to bf16 round to nearest even, once (from f32,
    /// f64 or integers; NaN stays NaN, overflow gives ±inf, -0 stays -0); bf16 -> f32/f64 exact;
    /// float -> i64 truncates; -> bool is nonzero. Differentiable between f32 and f64 only (bf16
    /// tensors never require grad: to(DType::bf16) of a tensor that requires grad throws while
    /// gradients are enabled, instead of cutting the graph).
    Tensor to(DType dtype) const;

    // ---- autograd ----
    bool requires_grad() const { return defined() && impl().requires_grad; }
    /// Marks a leaf as requiring grad; returns *this.
    Tensor& requires_grad_(bool on = true);
    /// Accumulated gradient of a leaf (undefined until the first backward reaches it).
    Tensor grad() const;
    /// Replaces the accumulated gradient by g (shared, not copied; any layout); an undefined g
    /// drops it, as reset_grad() does. Throws qkv::Error naming the expected and the given shape
    /// and dtype unless this tensor is float and g has its shape and dtype (no broadcasting or
    /// conversion, as PyTorch's .grad assignment), so a wrong gradient fails here, not at the
    /// optimizer's step.
    void set_grad(const Tensor& g);
    /// Drops the accumulated gradient (like PyTorch's zero_grad(set_to_none=True)).
    void reset_grad();
    const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
    bool is_leaf() const { return impl().grad_fn == nullptr; }
    /// Reverse-mode differentiation from this tensor. A scalar seeds with 1; a non-scalar needs
    /// `grad` of the same shape. Accumulates into .grad() of the leaves; frees the graph.
    void backward(const Tensor& grad = Tensor()) const;
    /// Same data, no history, requires_grad false.
    Tensor detach() const;

    /// The shared state; throws qkv::Error ("undefined tensor") on a default-constructed Tensor,
    /// so every accessor above (numel, shape, requires_grad_, ...) throws rather than aborts.
    TensorImpl& impl() const {
        if (impl_ == nullptr) [[unlikely]] detail::throw_undefined_tensor();
        return *impl_;
    }
    const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

private:
    std::shared_ptr<TensorImpl> impl_;
};

// ---- factories (contiguous; f32 unless dtype given) ----
Tensor zeros(const Shape& shape, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
/// Every element `value` converted to dtype (f32: the nearest float; bf16: the nearest bf16,
/// rounded once from the double; i64: truncated; bool: value != 0).
Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
/// [start, end) with step, like torch.arange; f32 unless dtype given (bf16: each value rounded
/// to nearest even; bool throws). Throws naming the arguments
/// when start, end or step is not finite, step is 0, or the length overflows int64.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
/// U[low, high) from gen (f32 or f64; other dtypes throw) (the default generator when null); throws unless low <= high, both finite.
Tensor rand(const Shape& shape, Generator* gen = nullptr, double low = 0.0, double high = 1.0,
            DType dtype = DType::f32);
/// N(mean, std²) by Box–Muller from gen (the default generator when null); throws unless mean is
/// finite and std finite and >= 0.
Tensor randn(const Shape& shape, Generator* gen = nullptr, double mean = 0.0, double std = 1.0,
             DType dtype = DType::f32);
/// Copies `values` into a tensor of `shape` (numel must match); DType from T (bfloat16 -> bf16).
template <class T> Tensor from_vector(const std::vector<T>& values, const Shape& shape);
/// A 0-d tensor.
Tensor scalar_tensor(double value, DType dtype = DType::f32);

/// Short printout: dtype, shape and up to 6 values of up to 6 rows, rows separated by "; "
/// ("tensor(float32 (2, 3) [0, 1, 2; 3, 4, 5])"). int64 values print exactly as integers, bool as
/// 0/1; float values (bf16 too, widened exactly) as the stream prints a double (its precision
/// and flags, e.g. std::fixed).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace qkv
