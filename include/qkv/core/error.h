#pragma once
// qkv::Error, the one exception type of the library, and the checking macros.
// QKV_CHECK validates user input (throws); QKV_ASSERT guards internal invariants (aborts).
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qkv {

/// The exception every qkv function throws on bad input (shape, dtype, index, file format).
/// The message names the op or file and the offending values, e.g.
/// "matmul: inner dimensions differ: (2, 3) x (4, 5)".
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        os << '(';
        for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
        os << (v.size() == 1 ? ",)" : ")");
    } else {
        os << v;
    }
    append(os, rest...);
}
/// Joins the parts into one string (shapes print as "(2, 3)").
template <class... Parts>
std::string str(const Parts&... parts) {
    std::ostringstream os;
    append(os, parts...);
    return os.str();
}
[[noreturn]] void assert_fail(const char* cond, const char* file, int line);
/// Throws qkv::Error for a method called on an undefined (default-constructed) Tensor.
[[noreturn]] void throw_undefined_tensor();
}  // namespace detail

}  // namespace qkv

/// Throws qkv::Error with the joined message parts when `cond` is false.
#define QKV_CHECK(cond, ...)                                      \
    do {                                                          \
        if (!(cond)) throw ::qkv::Error(::qkv::detail::str(__VA_ARGS__)); \
    } while (0)

/// Internal invariant, always on: prints file:line and aborts.
#define QKV_ASSERT(cond)                                                              \
    do {                                                                              \
        if (!(cond)) ::qkv::detail::assert_fail(#cond, __FILE__, __LINE__);           \
    } while (0)

#ifndef NDEBUG
#define QKV_DASSERT(cond) QKV_ASSERT(cond)
#else
#define QKV_DASSERT(cond) ((void)0)
#endif
