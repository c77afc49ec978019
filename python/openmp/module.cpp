// qkv._openmp: qkv::default_to_passive_omp_wait (core/parallel.h) for the Python package, in a
// module of its own that does not load libgomp: qkv/__init__.py calls it before importing
// qkv._qkv, whose loading starts the OpenMP runtime (which reads OMP_WAIT_POLICY then, once).
// Plain Python C API (no pybind11): one function, nothing else linked.
#include <Python.h>

#include "qkv/core/parallel.h"

namespace {

PyObject* default_to_passive_wait(PyObject*, PyObject*) { return PyBool_FromLong(qkv::default_to_passive_omp_wait()); }

PyMethodDef methods[] = {
    {"default_to_passive_wait", default_to_passive_wait, METH_NOARGS,
     "Sets OMP_WAIT_POLICY=passive in the C environment unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set "
     "(the qkv program's default); True when it set it. Effective only before the OpenMP runtime is loaded."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_openmp", "qkv's OpenMP start-up setting", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__openmp() { return PyModule_Create(&module); }
