// Shape helpers: numel, strides, printing, broadcasting, axis normalisation.
#include "qkv/core/shape.h"

#include "qkv/core/dtype.h"
#include "qkv/core/error.h"

namespace qkv {

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "float32";
        case DType::f64: return "float64";
        case DType::i64: return "int64";
        case DType::b8: return "bool";
        case DType::bf16: return "bfloat16";
        case DType::f16: return "float16";
    }
    return "?";
}

int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    bool overflow = false;
    for (int64_t d : s) {
        if (d == 0) return 0;
        overflow |= __builtin_mul_overflow(n, d, &n);
    }
    QKV_CHECK(!overflow, "shape ", s, " has more elements than int64 can count");
    return n;
}

Shape contiguous_strides(const Shape& s) {
    Shape st(s.size());
    int64_t acc = 1;
    for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
        st[size_t(i)] = acc;
        acc *= std::max<int64_t>(s[size_t(i)], 1);
    }
    return st;
}

std::string shape_str(const Shape& s) { return detail::str(s); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    const size_t n = std::max(a.size(), b.size());
    Shape out(n);
    for (size_t i = 0; i < n; ++i) {
        const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
        const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
        QKV_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                  " do not broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    const size_t lead = to.size() - from.size();
    for (size_t i = 0; i < from.size(); ++i)
        if (from[i] != 1 && from[i] != to[lead + i]) return false;
    return true;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
    const int64_t r = rank == 0 ? 1 : rank;
    QKV_CHECK(axis >= -r && axis < r, op, ": dim ", axis, " out of range for a tensor of rank ",
              rank);
    return axis < 0 ? axis + r : axis;
}

}  // namespace qkv
