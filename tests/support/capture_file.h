#pragma once
// What a printer writes to a FILE*, read back as a string: a tmpfile, so fileno works and isatty is
// false (the plain-line mode of progress output).
#include <cstdio>
#include <string>

namespace qkv::test {

struct Capture {
    std::FILE* f = std::tmpfile();
    Capture() = default;
    Capture(const Capture&)            = delete;
    Capture& operator=(const Capture&) = delete;
    ~Capture() { std::fclose(f); }
    std::string text() const {
        std::fflush(f);
        std::string s;
        std::rewind(f);
        for (int c; (c = std::fgetc(f)) != EOF;) s += char(c);
        return s;
    }
};

}  // namespace qkv::test
