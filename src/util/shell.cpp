// Shell quoting for printed commands (util/shell.h).
#include "qkv/util/shell.h"

#include <algorithm>
#include <string_view>

namespace qkv::util {

std::string shell_quote(const std::string& s) {
    const auto plain = [](unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("_./:=@%+,-").find(char(c)) != std::string_view::npos;
    };
    if (!s.empty() && std::all_of(s.begin(), s.end(), plain)) return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

}  // namespace qkv::util
