#pragma once
// Private: nlohmann::json's exception text without its "[json.exception.parse_error.101] " tag,
// for messages that name the file and key themselves (config.json, checkpoint metadata), and a
// parse that refuses duplicate keys (nlohmann keeps the last one silently: a config.json edited
// by appending "num_heads": 8 would otherwise change the model without a word).
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::detail {

/// "parse error at line 1, column 2: syntax error ..." from e.what().
inline std::string json_error_text(const nlohmann::json::exception& e) {
    const std::string w = e.what();
    const size_t tag = w.rfind("] ", w.find(' '));
    return tag == std::string::npos ? w : w.substr(tag + 2);
}

/// Json::parse(text) that throws qkv::Error "duplicate key \"model.num_heads\"" (the dotted path of
/// the repeated key; "[i]" for array elements) when an object holds a key twice. Syntax errors
/// throw nlohmann::json::exception as Json::parse does.
template <class Json>
Json parse_json_unique_keys(std::string_view text) {
    struct Level {
        bool object;
        std::string name;  // this value's key in its parent ("" at the top)
        std::set<std::string> keys;
        size_t index = 0;  // next element of an array
    };
    std::vector<Level> stack;
    std::string pending_key, dup;
    auto path_of = [&](const std::string& last) {
        std::string p;
        for (size_t i = 1; i < stack.size(); ++i) p += stack[i].name;
        p += last;
        return p.empty() ? last : p;
    };
    auto child_name = [&]() -> std::string {
        if (stack.empty()) return "";
        Level& parent = stack.back();
        if (parent.object) return (stack.size() > 1 ? "." : "") + pending_key;
        return "[" + std::to_string(parent.index++) + "]";
    };
    typename Json::parser_callback_t cb = [&](int, typename Json::parse_event_t ev, Json& parsed) {
        using E = typename Json::parse_event_t;
        switch (ev) {
            case E::object_start: stack.push_back({true, child_name(), {}}); break;
            case E::array_start: stack.push_back({false, child_name(), {}}); break;
            case E::object_end:
            case E::array_end:
                if (!stack.empty()) stack.pop_back();
                break;
            case E::key:
                pending_key = parsed.template get<std::string>();
                if (!stack.empty() && !stack.back().keys.insert(pending_key).second && dup.empty())
                    dup = path_of((stack.size() > 1 ? "." : "") + pending_key);
                break;
            case E::value:
                if (!stack.empty() && !stack.back().object) ++stack.back().index;
                break;
        }
        return true;
    };
    Json j = Json::parse(text.begin(), text.end(), cb);
    if (!dup.empty()) throw Error("duplicate key \"" + dup + "\" (JSON keeps only one of the two values)");
    return j;
}

}  // namespace qkv::detail
