#pragma once
// Shared pieces of the _qkv extension module (python/src/*.cpp): the Tensor conversions every
// binding uses. Python-facing rules (README "Python"): arrays are (B, H, T, D) row-major like
// qkv::Tensor; numpy float32/float64/int64/bool map to f32/f64/i64/b8; anything else is refused
// with a TypeError naming the argument.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"

namespace qkv::py {

namespace pyb = pybind11;

/// numpy dtype of a qkv dtype.
pyb::dtype numpy_dtype(DType t);

/// A qkv::Tensor sharing the memory of the numpy array `a` (no copy) when it is aligned, writable,
/// native-endian and its strides are non-negative multiples of the item size; otherwise a
/// contiguous copy when allow_copy, else ValueError. TypeError names `arg` for an unsupported dtype.
Tensor tensor_from_numpy(const pyb::array& a, const char* arg, bool allow_copy = true);

/// Any Python argument as a Tensor: a qkv.Tensor as is (shared), a numpy array (shared as
/// tensor_from_numpy), a Python number or nested list (converted by numpy, then copied; floats
/// become float32 unless `dtype` says otherwise). None gives an undefined Tensor when allow_none.
Tensor to_tensor(const pyb::handle& obj, const char* arg, bool allow_none = false);

/// Lengths (valid_lens): as to_tensor, None allowed, and numpy integer arrays of any width
/// (int32, uint8, ...) taken as int64 (copied), as PyTorch takes any integer lengths.
Tensor to_lengths(const pyb::handle& obj, const char* arg);

/// A numpy array viewing t's memory (no copy); the array keeps the storage alive.
pyb::array tensor_to_numpy(const Tensor& t);

/// `qkv` (apps/qkv/main.cpp) flushes subnormals by default (core/parallel.h: speed, and PyTorch's
/// set_flush_denormal); translating and training do the same here, so results equal the CLI's, and
/// put the calling thread's setting back afterwards.
class FlushDenormals {
public:
    FlushDenormals() : prev_(flush_denormal()) { set_flush_denormal(true); }
    ~FlushDenormals() { set_flush_denormal(prev_); }
    FlushDenormals(const FlushDenormals&)            = delete;
    FlushDenormals& operator=(const FlushDenormals&) = delete;

private:
    bool prev_;
};

void bind_tensor(pyb::module_& m);
void bind_functional(pyb::module_& m);
void bind_nn(pyb::module_& m);
void bind_translate(pyb::module_& m);
void bind_inspect(pyb::module_& m);
void bind_train(pyb::module_& m);

}  // namespace qkv::py
