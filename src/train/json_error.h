#pragma once
// Private: nlohmann::json's exception text without its "[json.exception.parse_error.101] " tag,
// for messages that name the file and key themselves (config.json, checkpoint metadata).
#include <string>

#include <nlohmann/json.hpp>

namespace qkv::detail {

/// "parse error at line 1, column 2: syntax error ..." from e.what().
inline std::string json_error_text(const nlohmann::json::exception& e) {
    const std::string w = e.what();
    const size_t tag = w.rfind("] ", w.find(' '));
    return tag == std::string::npos ? w : w.substr(tag + 2);
}

}  // namespace qkv::detail
