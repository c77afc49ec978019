#pragma once
// Temporary folders for tests: TempDir (one per test and tag, removed on destruction).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace qkv::test {

/// A fresh, empty folder named after the process, the running test and `tag` (so two folders
/// alive in one test need different tags), removed with its contents on destruction.
class TempDir {
public:
    explicit TempDir(const std::string& tag = "") {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = "qkv_test_" + std::to_string(::getpid());
        if (info) name += std::string("_") + info->test_suite_name() + "_" + info->name();
        if (!tag.empty()) name += "_" + tag;
        for (char& c : name)
            if (c == '/') c = '_';
        path_ = std::filesystem::temp_directory_path() / name;
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&)            = delete;
    TempDir& operator=(const TempDir&) = delete;
    /// Path of `file` inside the folder.
    std::string operator/(const std::string& file) const { return (path_ / file).string(); }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

}  // namespace qkv::test
