#pragma once
// Helpers shared by the libFuzzer targets (tests/fuzz/README.md). A target feeds its input to one
// of qkv's readers of outside data; qkv::Error is the expected answer to bad input and is caught,
// anything else (another exception type, a crash, a sanitizer report, a leak, a timeout, an
// allocation over the run's malloc limit) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace qkv::fuzz {

/// A folder of this process, created once and removed at exit (libFuzzer runs one input at a time
/// per process, so its files are reused).
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("qkv-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                            ("qkv-fuzz-" + std::to_string(::getpid())),
                                        ec);
        });
        return d;
    }();
    return dir;
}

/// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
    auto p = scratch_dir() / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
    return p.string();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

/// Splits the input at the first occurrence of `sep` (the second part is empty without one): lets
/// one input carry two files, e.g. a checkpoint's metadata and a metrics.jsonl.
inline std::pair<std::string_view, std::string_view> split_once(std::string_view s, std::string_view sep) {
    auto at = s.find(sep);
    if (at == std::string_view::npos) return {s, {}};
    return {s.substr(0, at), s.substr(at + sep.size())};
}

}  // namespace qkv::fuzz
