// The _qkv extension module: qkv::Error (and its subclasses) become qkv.Error, a RuntimeError
// with the same message; every other C++ exception becomes a Python exception by pybind11's rules
// (std::bad_alloc -> MemoryError, std::exception -> RuntimeError), a std::filesystem error becomes
// OSError, so none reaches the interpreter.
#include <filesystem>

#include "bind.h"

PYBIND11_MODULE(_qkv, m) {
    m.doc() = "qkv: attention mechanisms and Transformers (D2L chapter 11) in C++, from Python";
    pybind11::register_exception<qkv::Error>(m, "Error", PyExc_RuntimeError);
    // A file-system failure (a folder that cannot be made, say) is an OSError with its errno, its
    // message and the path, as Python's own file functions raise it (not a RuntimeError).
    pybind11::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::filesystem::filesystem_error& e) {
            pybind11::object err = pybind11::reinterpret_steal<pybind11::object>(
                PyObject_CallFunction(PyExc_OSError, "iss", e.code().value(), e.what(), e.path1().c_str()));
            if (err) PyErr_SetObject(PyExc_OSError, err.ptr());
        }
    });
    qkv::py::bind_tensor(m);
    qkv::py::bind_nn(m);
    qkv::py::bind_functional(m);
    qkv::py::bind_translate(m);
    qkv::py::bind_inspect(m);
    qkv::py::bind_train(m);
}
