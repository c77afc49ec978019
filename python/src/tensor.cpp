// qkv.Tensor and its exchange with numpy (shared memory both ways), the buffer protocol and
// DLPack (https://dmlc.github.io/dlpack/latest/c_api.html, ABI v0.x: the structs below restate
// that documented interface: DLDevice, DLDataType, DLTensor, DLManagedTensor, capsule "dltensor").
#include <functional>
#include <sstream>
#include <vector>

#include "bind.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/softmax.h"

namespace qkv::py {
namespace {

// ---- DLPack ABI (C structs, as documented by the DLPack specification) ----
struct DLDevice {
    int32_t device_type;  // kDLCPU = 1
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;  // in elements; null = row-major contiguous
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor*);
};
constexpr int32_t kDLCPU = 1;

DType dtype_of_array(const pyb::array& a, const char* arg) {
    const char kind = a.dtype().kind();
    const auto size = a.itemsize();
    if (kind == 'f' && size == 4) return DType::f32;
    if (kind == 'f' && size == 8) return DType::f64;
    if (kind == 'f' && size == 2) return DType::f16;
    if (kind == 'i' && size == 8) return DType::i64;
    if (kind == 'b' && size == 1) return DType::b8;
    throw pyb::type_error(detail::str(arg, ": dtype ", std::string(pyb::str(a.dtype())),
                                      " is not supported (qkv takes float32, float64, float16, int64 or bool)"));
}

/// Storage whose bytes belong to a Python object (a numpy array, a DLPack producer): the Storage
/// is made empty, pointed at the foreign bytes, and pointed back at its own empty block before it
/// is destroyed; `release` then gives the bytes back to their owner (with the GIL).
std::shared_ptr<Storage> foreign_storage(void* data, int64_t nbytes, std::function<void()> release) {
    auto* s          = new Storage(0);
    void* const own  = s->data;
    s->data          = data;
    s->nbytes        = nbytes;
    return std::shared_ptr<Storage>(s, [own, release = std::move(release)](Storage* st) {
        st->data   = own;
        st->nbytes = 0;
        delete st;
        if (Py_IsInitialized() == 0) return;  // interpreter gone: nothing left to release
        pyb::gil_scoped_acquire gil;
        release();
    });
}

DLDataType dl_dtype(DType t) {
    switch (t) {
        case DType::f32: return {2, 32, 1};
        case DType::f64: return {2, 64, 1};
        case DType::i64: return {0, 64, 1};
        case DType::b8: return {6, 8, 1};
        case DType::bf16: return {4, 16, 1};  // kDLBfloat, as torch exports torch.bfloat16
        case DType::f16: return {2, 16, 1};   // kDLFloat, 16 bits: torch.float16, numpy float16
    }
    return {0, 0, 0};
}

struct DLContext {
    std::shared_ptr<Storage> storage;
    std::vector<int64_t> shape, strides;
    DLManagedTensor managed{};
};

void dl_capsule_destructor(PyObject* cap) {
    // A consumer renames the capsule to "used_dltensor" and owns the tensor from then on.
    if (PyCapsule_IsValid(cap, "dltensor") == 0) return;
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (mt != nullptr && mt->deleter != nullptr) mt->deleter(mt);
}

pyb::capsule to_dlpack(const Tensor& t) {
    QKV_CHECK(!t.requires_grad(), "__dlpack__: the tensor requires grad; call .detach() first (as PyTorch asks)");
    auto* ctx    = new DLContext;
    ctx->storage = t.impl().storage;
    ctx->shape   = t.shape();
    ctx->strides = t.strides();
    DLTensor& d  = ctx->managed.dl_tensor;
    d.data        = t.raw_data();
    d.device      = {kDLCPU, 0};
    d.ndim        = int32_t(t.dim());
    d.dtype       = dl_dtype(t.dtype());
    d.shape       = ctx->shape.data();
    d.strides     = ctx->strides.data();
    d.byte_offset = 0;
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter     = [](DLManagedTensor* mt) { delete static_cast<DLContext*>(mt->manager_ctx); };
    PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", dl_capsule_destructor);
    if (cap == nullptr) {
        delete ctx;
        throw pyb::error_already_set();
    }
    return pyb::reinterpret_steal<pyb::capsule>(cap);
}

Tensor from_dlpack(const pyb::object& obj) {
    pyb::object cap = obj;
    if (pyb::hasattr(obj, "__dlpack__")) cap = obj.attr("__dlpack__")();
    if (PyCapsule_IsValid(cap.ptr(), "dltensor") == 0)
        throw pyb::type_error("from_dlpack: expected an object with __dlpack__ or a 'dltensor' capsule (not yet consumed)");
    auto* mt          = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    const DLTensor& d = mt->dl_tensor;
    if (d.device.device_type != kDLCPU)
        throw pyb::value_error(detail::str("from_dlpack: device type ", d.device.device_type,
                                           " is not the CPU (1); qkv tensors live in host memory"));
    DType dt;
    const DLDataType& ty = d.dtype;
    if (ty.lanes != 1) throw pyb::type_error("from_dlpack: vector dtypes (lanes != 1) are not supported");
    if (ty.code == 2 && ty.bits == 32) dt = DType::f32;
    else if (ty.code == 2 && ty.bits == 64) dt = DType::f64;
    else if (ty.code == 0 && ty.bits == 64) dt = DType::i64;
    else if (ty.code == 6 && ty.bits == 8) dt = DType::b8;
    else if (ty.code == 4 && ty.bits == 16) dt = DType::bf16;
    else if (ty.code == 2 && ty.bits == 16) dt = DType::f16;
    else
        throw pyb::type_error(detail::str("from_dlpack: dtype code ", int(ty.code), " with ", int(ty.bits),
                                          " bits is not supported (float32, float64, int64, bool, bfloat16 or float16)"));
    Shape shape(d.shape, d.shape + d.ndim);
    Shape strides = d.strides != nullptr ? Shape(d.strides, d.strides + d.ndim) : contiguous_strides(shape);
    int64_t span = 1;  // elements from the first to one past the last
    bool empty   = false;
    for (int i = 0; i < d.ndim; ++i) {
        if (shape[size_t(i)] == 0) empty = true;
        if (strides[size_t(i)] < 0)
            throw pyb::value_error(detail::str("from_dlpack: negative strides ", strides,
                                               " are not supported; pass a copy with non-negative strides"));
        span += (shape[size_t(i)] - 1) * strides[size_t(i)];
    }
    if (empty) span = 0;
    if (PyCapsule_SetName(cap.ptr(), "used_dltensor") != 0) throw pyb::error_already_set();
    auto impl     = std::make_shared<TensorImpl>();
    void* data    = static_cast<char*>(d.data) + d.byte_offset;
    impl->storage = foreign_storage(data, span * dtype_size(dt), [mt] {
        if (mt->deleter != nullptr) mt->deleter(mt);
    });
    impl->shape   = std::move(shape);
    impl->strides = std::move(strides);
    impl->dtype   = dt;
    return Tensor(std::move(impl));
}

DType parse_dtype(const pyb::handle& h) {
    if (h.is_none()) throw pyb::type_error("dtype: expected a dtype name or numpy dtype, got None");
    if (pyb::isinstance<pyb::str>(h)) {
        const std::string s = h.cast<std::string>();
        if (s == "float32") return DType::f32;
        if (s == "float64") return DType::f64;
        if (s == "int64") return DType::i64;
        if (s == "bool") return DType::b8;
        if (s == "bfloat16") return DType::bf16;
        if (s == "float16") return DType::f16;
        throw pyb::type_error(detail::str("dtype: '", s, "' is not one of float32, float64, int64, bool, bfloat16, float16"));
    }
    pyb::array probe(pyb::dtype::from_args(pyb::reinterpret_borrow<pyb::object>(h)), std::vector<ssize_t>{0});
    return dtype_of_array(probe, "dtype");
}

std::vector<int64_t> dims_arg(const pyb::object& dim) {
    if (dim.is_none()) return {};
    if (pyb::isinstance<pyb::int_>(dim)) return {dim.cast<int64_t>()};
    return dim.cast<std::vector<int64_t>>();
}

Shape shape_args(const pyb::args& args) {
    if (args.size() == 1 && !pyb::isinstance<pyb::int_>(args[0])) return args[0].cast<Shape>();
    return args.cast<Shape>();
}

/// pybind11's buffer-protocol entry for Tensor, wrapped so that a bfloat16 tensor refuses it with
/// a BufferError (Python has no bf16 format character; and def_buffer cannot refuse: pybind11
/// 2.10 calls it from a C callback and dereferences its result). numpy then falls back to
/// __array__, whose TypeError says how to convert.
getbufferproc pybind11_tensor_getbuffer = nullptr;
int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
    bool bf16 = false;
    try {
        bf16 = pyb::handle(obj).cast<const Tensor&>().dtype() == DType::bf16;
    } catch (const std::exception&) {  // not a Tensor (a subclass's odd state): pybind11 decides
    }
    if (bf16) {
        if (view != nullptr) view->obj = nullptr;
        PyErr_SetString(PyExc_BufferError, "a bfloat16 tensor has no buffer (Python and numpy have no bfloat16): "
                                           "use t.to('float32') (exact) or DLPack (torch.from_dlpack(t))");
        return -1;
    }
    return pybind11_tensor_getbuffer(obj, view, flags);
}

std::string repr(const Tensor& t) {
    std::ostringstream os;
    os << t;
    std::string s = os.str();
    if (t.requires_grad()) s.insert(s.size() - 1, ", requires_grad=True");
    return "qkv." + s;
}

}  // namespace

pyb::dtype numpy_dtype(DType t) {
    switch (t) {
        case DType::f32: return pyb::dtype::of<float>();
        case DType::f64: return pyb::dtype::of<double>();
        case DType::i64: return pyb::dtype::of<int64_t>();
        case DType::b8: return pyb::dtype::of<bool>();
        case DType::f16: return pyb::dtype("float16");
        case DType::bf16:
            throw pyb::type_error("numpy has no bfloat16: convert first, t.to('float32').numpy() (exact), or "
                                  "share the bfloat16 tensor through DLPack (torch.from_dlpack(t))");
    }
    throw pyb::type_error("unknown dtype");
}

Tensor tensor_from_numpy(const pyb::array& a, const char* arg, bool allow_copy) {
    const DType dt      = dtype_of_array(a, arg);
    const auto itemsize = a.itemsize();
    const char order    = a.dtype().byteorder();
    bool shareable      = (order == '=' || order == '|' || (order == '<' && PY_LITTLE_ENDIAN)) &&
                     a.writeable() && (a.flags() & pyb::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
    Shape shape(size_t(a.ndim())), strides(size_t(a.ndim()));
    int64_t span = 1;
    bool empty   = false;
    for (pyb::ssize_t i = 0; i < a.ndim(); ++i) {
        shape[size_t(i)] = a.shape(i);
        if (a.shape(i) == 0) empty = true;
        const auto st = a.strides(i);
        if (st < 0 || st % itemsize != 0) shareable = false;
        strides[size_t(i)] = st / itemsize;
        span += (a.shape(i) - 1) * strides[size_t(i)];
    }
    if (empty) span = 0;
    if (shareable) {
        auto impl     = std::make_shared<TensorImpl>();
        PyObject* own = a.ptr();
        Py_INCREF(own);
        impl->storage = foreign_storage(const_cast<void*>(a.data()), span * int64_t(itemsize), [own] { Py_DECREF(own); });
        impl->shape   = std::move(shape);
        impl->strides = std::move(strides);
        impl->dtype   = dt;
        return Tensor(std::move(impl));
    }
    if (!allow_copy)
        throw pyb::value_error(detail::str(arg, ": the array cannot be shared without a copy (read-only, unaligned, "
                                                "byte-swapped, or strides ",
                                           std::vector<int64_t>(a.strides(), a.strides() + a.ndim()),
                                           " bytes not non-negative multiples of the item size); pass copy=True"));
    // The one copy: numpy lays the array out contiguously in native order, then it is shared.
    pyb::array c = pyb::module_::import("numpy").attr("array")(a, numpy_dtype(dt), pyb::arg("order") = "C");
    return tensor_from_numpy(c, arg, false);
}

Tensor to_tensor(const pyb::handle& obj, const char* arg, bool allow_none) {
    if (obj.is_none()) {
        if (allow_none) return Tensor();
        throw pyb::type_error(detail::str(arg, ": expected a qkv.Tensor or numpy array, got None"));
    }
    if (pyb::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
    if (pyb::isinstance<pyb::array>(obj)) return tensor_from_numpy(pyb::reinterpret_borrow<pyb::array>(obj), arg);
    // Other array libraries (torch, ...): through DLPack, keeping their dtype (bfloat16 too), copied
    // so the result never aliases the argument, as with lists.
    if (pyb::hasattr(obj, "__dlpack__")) {
        Tensor t;
        try {
            t = from_dlpack(pyb::reinterpret_borrow<pyb::object>(obj));
        } catch (const pyb::error_already_set& e) {
            throw pyb::type_error(detail::str(arg, ": cannot take this ", std::string(pyb::str(obj.get_type())),
                                              " (through DLPack): ", e.what()));
        } catch (const std::exception& e) {
            throw pyb::type_error(detail::str(arg, ": cannot take this ", std::string(pyb::str(obj.get_type())),
                                              " (through DLPack): ", e.what()));
        }
        return t.clone();
    }
    // Numbers and lists: numpy decides the type; Python floats become float32 (qkv's default).
    auto np          = pyb::module_::import("numpy");
    pyb::array a     = np.attr("asarray")(obj);
    const char kind  = a.dtype().kind();
    if (kind == 'f') a = np.attr("asarray")(a, "float32");
    else if (kind == 'i' || kind == 'u') a = np.attr("asarray")(a, "int64");
    else if (kind != 'b')
        throw pyb::type_error(detail::str(arg, ": expected a qkv.Tensor, a numpy array, a number or (nested) lists of ",
                                          "numbers or bools, got a ", std::string(pyb::str(obj.get_type())),
                                          " whose values numpy reads as ", std::string(pyb::str(a.dtype())),
                                          " (dtype kind '", kind, "')"));
    return tensor_from_numpy(np.attr("array")(a), arg);  // a fresh array: never aliases the argument
}

Tensor to_lengths(const pyb::handle& obj, const char* arg) {
    if (pyb::isinstance<pyb::array>(obj)) {
        const auto a = pyb::reinterpret_borrow<pyb::array>(obj);
        const char kind = a.dtype().kind();
        if ((kind == 'i' || kind == 'u') && !a.dtype().is(pyb::dtype::of<int64_t>()))
            return tensor_from_numpy(pyb::module_::import("numpy").attr("array")(a, "int64"), arg);
    }
    return to_tensor(obj, arg, /*allow_none=*/true);
}

pyb::array tensor_to_numpy(const Tensor& t) {
    auto* keep = new std::shared_ptr<Storage>(t.impl().storage);
    pyb::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
    const auto isz = dtype_size(t.dtype());
    std::vector<pyb::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
    for (int64_t s : t.strides()) strides.push_back(s * isz);
    return pyb::array(numpy_dtype(t.dtype()), shape, strides, t.raw_data(), base);
}

namespace {

// Construction, shape queries and the zero-copy exchanges (numpy, buffer protocol, DLPack).
void def_tensor_interop(pyb::class_<Tensor>& T) {
    using pyb::arg;
    T.def(pyb::init([](const pyb::object& data, const pyb::object& dtype, bool requires_grad) {
              Tensor t = to_tensor(data, "data");
              Tensor c = dtype.is_none() ? t.clone() : t.to(parse_dtype(dtype)).clone();
              if (requires_grad) c.requires_grad_(true);
              return c;
          }),
          arg("data"), arg("dtype") = pyb::none(), arg("requires_grad") = false,
          "A copy of data (array, list or number) as a new leaf tensor (like torch.tensor).")
        .def_property_readonly("shape", [](const Tensor& t) { return pyb::tuple(pyb::cast(t.shape())); })
        .def_property_readonly("strides", [](const Tensor& t) { return pyb::tuple(pyb::cast(t.strides())); },
                               "Strides in elements (numpy's are in bytes).")
        .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
        .def_property_readonly("ndim", &Tensor::dim)
        .def("dim", &Tensor::dim)
        .def("numel", &Tensor::numel)
        .def("size", [](const Tensor& t, const pyb::object& d) -> pyb::object {
            if (d.is_none()) return pyb::tuple(pyb::cast(t.shape()));
            return pyb::cast(t.size(d.cast<int64_t>()));
        }, arg("dim") = pyb::none())
        .def("__len__", [](const Tensor& t) {
            if (t.dim() == 0) throw pyb::type_error("len() of a 0-d tensor");
            return t.size(0);
        })
        .def("is_contiguous", &Tensor::is_contiguous)
        .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); },
             "Address of element 0 (compare with ndarray.ctypes.data to see memory is shared).")
        .def("numpy", [](const Tensor& t, bool copy) -> pyb::array {
            if (t.requires_grad())
                throw pyb::value_error("numpy(): the tensor requires grad; call .detach().numpy() (as PyTorch asks)");
            pyb::array a = tensor_to_numpy(t);
            return copy ? pyb::array(a.attr("copy")()) : a;
        }, arg("copy") = false, "A numpy array sharing this tensor's memory (a copy with copy=True).")
        .def("__array__", [](const Tensor& t, const pyb::object& dtype) -> pyb::array {
            pyb::array a = tensor_to_numpy(t.requires_grad() ? t.detach() : t);
            if (!dtype.is_none()) return a.attr("astype")(dtype, pyb::arg("copy") = false);
            return a;
        }, arg("dtype") = pyb::none())
        .def_buffer([](const Tensor& t) -> pyb::buffer_info {
            const auto isz = dtype_size(t.dtype());
            std::vector<pyb::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
            for (int64_t s : t.strides()) strides.push_back(s * isz);
            const DType d   = t.dtype();
            const char* fmt = d == DType::f32 ? "f" : d == DType::f64 ? "d" : d == DType::i64 ? "q" : d == DType::f16 ? "e" : "?";
            return pyb::buffer_info(t.raw_data(), isz, fmt, t.dim(), shape, strides);
        })
        .def("__dlpack__", [](const Tensor& t, const pyb::object& stream, const pyb::object& max_version,
                              const pyb::object& dl_device, const pyb::object& copy) {
            // The Python array API's keywords: CPU tensors take no stream; max_version may ask for a
            // versioned capsule, which a producer may answer with the unversioned "dltensor" (the
            // only form made here); dl_device must be the CPU; copy=True is refused (share or fail).
            if (!stream.is_none()) throw pyb::value_error("__dlpack__: stream must be None for CPU tensors");
            (void)max_version;
            if (!dl_device.is_none() && dl_device.cast<std::pair<int, int>>().first != kDLCPU)
                throw pyb::value_error("__dlpack__: dl_device must be the CPU (1, 0)");
            if (!copy.is_none() && copy.cast<bool>())
                throw pyb::value_error("__dlpack__: copy=True is not supported; export t.clone() instead");
            return to_dlpack(t);
        }, arg("stream") = pyb::none(), pyb::kw_only(), arg("max_version") = pyb::none(), arg("dl_device") = pyb::none(),
           arg("copy") = pyb::none())
        .def("__dlpack_device__", [](const Tensor&) { return pyb::make_tuple(kDLCPU, 0); });
}

// requires_grad, .grad, backward, detach.
void def_tensor_autograd(pyb::class_<Tensor>& T) {
    using pyb::arg;
    T.def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.requires_grad_(on); })
        .def("requires_grad_", [](Tensor& t, bool on) { t.requires_grad_(on); return t; }, arg("requires_grad") = true,
             "Marks a leaf as requiring grad; returns self (the same tensor).")
        .def_property("grad", [](const Tensor& t) -> pyb::object {
            Tensor g = t.grad();
            if (!g.defined()) return pyb::none();
            return pyb::cast(g);
        }, [](Tensor& t, const pyb::object& g) { t.set_grad(to_tensor(g, "grad", true)); })
        .def_property_readonly("is_leaf", &Tensor::is_leaf)
        .def("backward", [](const Tensor& t, const pyb::object& grad) {
            Tensor g = to_tensor(grad, "grad", true);
            pyb::gil_scoped_release nogil;
            t.backward(g);
        }, arg("grad") = pyb::none(), "Reverse-mode autodiff; accumulates .grad of the leaves (GIL released).")
        .def("detach", &Tensor::detach)
        .def("zero_grad", &Tensor::reset_grad, "Drops .grad (PyTorch's set_to_none).");
}

// Conversions, views, reductions, elementwise and arithmetic operators, repr.
void def_tensor_ops(pyb::class_<Tensor>& T) {
    using pyb::arg;
    T.def("item", &Tensor::item)
        .def("clone", &Tensor::clone)
        .def("contiguous", &Tensor::contiguous)
        .def("to", [](const Tensor& t, const pyb::object& dtype) { return t.to(parse_dtype(dtype)); })
        .def("float", [](const Tensor& t) { return t.to(DType::f32); })
        .def("double", [](const Tensor& t) { return t.to(DType::f64); })
        .def("reshape", [](const Tensor& t, const pyb::args& a) { return t.reshape(shape_args(a)); })
        .def("view", [](const Tensor& t, const pyb::args& a) { return t.reshape(shape_args(a)); })
        .def("transpose", &Tensor::transpose)
        .def("permute", [](const Tensor& t, const pyb::args& a) { return t.permute(shape_args(a)); })
        .def("unsqueeze", &Tensor::unsqueeze)
        .def("squeeze", &Tensor::squeeze)
        .def("select", &Tensor::select)
        .def("sum", [](const Tensor& t, const pyb::object& dim, bool keepdim) { return sum(t, dims_arg(dim), keepdim); },
             arg("dim") = pyb::none(), arg("keepdim") = false)
        .def("mean", [](const Tensor& t, const pyb::object& dim, bool keepdim) { return mean(t, dims_arg(dim), keepdim); },
             arg("dim") = pyb::none(), arg("keepdim") = false)
        .def("softmax", [](const Tensor& t, int64_t dim) { return softmax(t, dim); }, arg("dim") = -1)
        .def("exp", [](const Tensor& t) { return exp(t); })
        .def("log", [](const Tensor& t) { return log(t); })
        .def("tanh", [](const Tensor& t) { return tanh(t); })
        .def("relu", [](const Tensor& t) { return relu(t); })
        .def("__neg__", [](const Tensor& t) { return neg(t); })
        .def("__add__", [](const Tensor& a, const pyb::object& b) {
            return pyb::isinstance<pyb::float_>(b) || pyb::isinstance<pyb::int_>(b) ? add(a, b.cast<double>()) : add(a, to_tensor(b, "other"));
        })
        .def("__radd__", [](const Tensor& a, double b) { return add(a, b); })
        .def("__sub__", [](const Tensor& a, const pyb::object& b) {
            return pyb::isinstance<pyb::float_>(b) || pyb::isinstance<pyb::int_>(b) ? add(a, -b.cast<double>()) : sub(a, to_tensor(b, "other"));
        })
        .def("__rsub__", [](const Tensor& a, double b) { return add(neg(a), b); })
        .def("__mul__", [](const Tensor& a, const pyb::object& b) {
            return pyb::isinstance<pyb::float_>(b) || pyb::isinstance<pyb::int_>(b) ? mul(a, b.cast<double>()) : mul(a, to_tensor(b, "other"));
        })
        .def("__rmul__", [](const Tensor& a, double b) { return mul(a, b); })
        .def("__truediv__", [](const Tensor& a, const pyb::object& b) {
            return pyb::isinstance<pyb::float_>(b) || pyb::isinstance<pyb::int_>(b) ? mul(a, 1.0 / b.cast<double>()) : div(a, to_tensor(b, "other"));
        })
        .def("__pow__", [](const Tensor& a, double p) { return pow(a, p); })
        .def("__matmul__", [](const Tensor& a, const pyb::object& b) {
            Tensor bt = to_tensor(b, "other");
            pyb::gil_scoped_release nogil;
            return matmul(a, bt);
        })
        .def("__repr__", &repr);
}

// from_numpy, as_tensor, from_dlpack, zeros/ones/randn/rand.
void bind_tensor_factories(pyb::module_& m) {
    using pyb::arg;
    m.def("from_numpy", [](const pyb::array& a, bool copy) {
        if (copy) return tensor_from_numpy(pyb::array(a.attr("copy")()), "a", true);
        return tensor_from_numpy(a, "a", false);
    }, arg("a"), pyb::kw_only(), arg("copy") = false,
          "A Tensor sharing a's memory (no copy). Raises ValueError when a cannot be shared (read-only, "
          "byte-swapped, unaligned or with strides that are not non-negative multiples of the item size) "
          "unless copy=True; TypeError for a dtype other than float32, float64, int64, bool.");
    m.def("as_tensor", [](const pyb::object& obj) { return to_tensor(obj, "obj"); }, arg("obj"),
          "A Tensor for obj: shared with a qkv.Tensor or a shareable numpy array, else a copy.");
    m.def("from_dlpack", &from_dlpack, arg("obj"),
          "A Tensor sharing the memory of a DLPack producer (an object with __dlpack__, e.g. a numpy array "
          "or a CPU torch tensor, or a 'dltensor' capsule).");
    m.def("zeros", [](const pyb::args& a, const pyb::object& dtype) {
        return zeros(shape_args(a), dtype.is_none() ? DType::f32 : parse_dtype(dtype));
    }, arg("dtype") = pyb::none());
    m.def("ones", [](const pyb::args& a, const pyb::object& dtype) {
        return ones(shape_args(a), dtype.is_none() ? DType::f32 : parse_dtype(dtype));
    }, arg("dtype") = pyb::none());
    m.def("randn", [](const pyb::args& a, const pyb::object& seed, const pyb::object& dtype) {
        Generator g(seed.is_none() ? 0 : seed.cast<uint64_t>());
        return randn(shape_args(a), seed.is_none() ? nullptr : &g, 0.0, 1.0, dtype.is_none() ? DType::f32 : parse_dtype(dtype));
    }, arg("seed") = pyb::none(), arg("dtype") = pyb::none(),
          "N(0, 1) samples; from a fresh generator seeded with seed, else from the default generator.");
    m.def("rand", [](const pyb::args& a, const pyb::object& seed, const pyb::object& dtype) {
        Generator g(seed.is_none() ? 0 : seed.cast<uint64_t>());
        return rand(shape_args(a), seed.is_none() ? nullptr : &g, 0.0, 1.0, dtype.is_none() ? DType::f32 : parse_dtype(dtype));
    }, arg("seed") = pyb::none(), arg("dtype") = pyb::none(), "U[0, 1) samples (see randn).");
}

// The default generator's seed, kernel threads, denormals, grad mode.
void bind_runtime_settings(pyb::module_& m) {
    using pyb::arg;
    m.def("manual_seed", [](uint64_t s) { qkv::manual_seed(s); }, arg("seed"),
          "Seeds qkv's process-wide default generator (parameter init, dropout), like torch.manual_seed.");
    m.def("get_num_threads", &get_num_threads, "OpenMP threads of qkv's kernels on the calling thread.");
    m.def("set_num_threads", &set_num_threads, arg("n"),
          "Threads for qkv's kernels called from this thread (OpenMP's per-thread setting; other threads keep "
          "OMP_NUM_THREADS or the core count).");
    m.def("set_flush_denormal", &set_flush_denormal, arg("on"),
          "Flush subnormal floats to zero on this thread and its OpenMP workers (torch.set_flush_denormal); "
          "Translator and train do it during their calls, as the qkv program does.");
    m.def("is_grad_enabled", &grad_enabled);
    m.def("set_grad_enabled", &set_grad_enabled, arg("on"), "Per thread, as torch.set_grad_enabled.");
}

}  // namespace

void bind_tensor(pyb::module_& m) {
    pyb::class_<Tensor> T(m, "Tensor", pyb::buffer_protocol(), R"(An n-d array of qkv (float32, float64, int64,
bool, or bfloat16 / float16 for storage only: .to('float32') before computing) with autograd state.
Shares memory with the numpy arrays it was made from or gives out
(qkv.from_numpy, Tensor.numpy, np.asarray(t), memoryview(t), DLPack). Attention inputs are
(B, H, T, D): batch, heads, time, head width (see qkv.scaled_dot_product_attention).)");
    def_tensor_interop(T);
    def_tensor_autograd(T);
    def_tensor_ops(T);

    auto* tensor_type = reinterpret_cast<PyTypeObject*>(T.ptr());
    pybind11_tensor_getbuffer = tensor_type->tp_as_buffer->bf_getbuffer;
    tensor_type->tp_as_buffer->bf_getbuffer = tensor_getbuffer;

    bind_tensor_factories(m);
    bind_runtime_settings(m);
}

}  // namespace qkv::py
