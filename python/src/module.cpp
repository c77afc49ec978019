// The _qkv extension module: qkv::Error (and its subclasses) become qkv.Error, a RuntimeError
// with the same message; every other C++ exception becomes a Python exception by pybind11's rules
// (std::bad_alloc -> MemoryError, std::exception -> RuntimeError), so none reaches the interpreter.
#include "bind.h"

PYBIND11_MODULE(_qkv, m) {
    m.doc() = "qkv: attention mechanisms and Transformers (D2L chapter 11) in C++, from Python";
    pybind11::register_exception<qkv::Error>(m, "Error", PyExc_RuntimeError);
    qkv::py::bind_tensor(m);
    qkv::py::bind_nn(m);
    qkv::py::bind_functional(m);
    qkv::py::bind_translate(m);
}
