#pragma once
// Shapes and strides: plain vectors of int64 in row-major (PyTorch/D2L) order.
#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

using Shape = std::vector<int64_t>;

/// Product of the dims (1 for a scalar shape (), 0 when any dim is 0); throws qkv::Error naming
/// the shape when the product overflows int64.
int64_t shape_numel(const Shape& s);
/// Contiguous row-major strides, in elements.
Shape contiguous_strides(const Shape& s);
/// "(2, 3)"; a scalar prints as "()".
std::string shape_str(const Shape& s);
/// NumPy broadcasting of two shapes; throws qkv::Error naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Whether `from` broadcasts to exactly `to` (no more dims; each dim equal or 1), e.g. a mask to
/// the scores it masks. Never throws, so callers can name the argument in their own message.
bool broadcasts_to(const Shape& from, const Shape& to);
/// Normalises a possibly negative axis into [0, rank); throws naming `op` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);

}  // namespace qkv
