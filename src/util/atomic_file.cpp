// Atomic writes with POSIX open/write/fsync/rename (see util/atomic_file.h).
#include "qkv/util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"

namespace qkv::util {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

class FdSink final : public FileSink {
public:
    FdSink(int fd, const std::string& path, const std::string& tmp) : fd_(fd), path_(path), tmp_(tmp) {}
    void write(const void* data, size_t n) override {
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t w = ::write(fd_, p, n);
            if (w < 0) {
                if (errno == EINTR) continue;
                throw Error(detail::str("cannot write '", path_, "': writing its temporary file '", tmp_,
                                        "' failed: ", errno_text(errno)));
            }
            p += w;
            n -= size_t(w);
            written_ += size_t(w);
        }
    }
    size_t bytes_written() const override { return written_; }

private:
    int fd_;
    const std::string& path_;
    const std::string& tmp_;
    size_t written_ = 0;
};

// fsync of the folder makes the rename itself durable (ext4/xfs need it after a crash).
void sync_parent_dir(const std::string& path) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;  // durability best effort: the data file itself is already synced
    ::fsync(dfd);
    ::close(dfd);
}

}  // namespace

std::string atomic_temp_path(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

namespace {
/// Whether the digits of `name` from `digits_at` on (a ".tmp.<pid>" suffix) are the pid of a live
/// process other than this one: its temporary is still being written and must be left alone.
bool is_live_process_suffix(const std::string& name, size_t digits_at) {
    if (name.size() - digits_at > 9) return false;  // pids are < 2^22
    const long pid = std::strtol(name.c_str() + digits_at, nullptr, 10);
    if (pid <= 0 || pid == long(::getpid())) return false;  // ours: a leftover of an earlier process with our pid
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}
}  // namespace

std::vector<std::string> stale_temp_paths(const std::string& path) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    fs::path dir = target.parent_path();
    if (dir.empty()) dir = ".";
    const std::string prefix = target.filename().string() + ".tmp.";
    std::vector<std::string> stale;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
            std::all_of(name.begin() + std::ptrdiff_t(prefix.size()), name.end(),
                        [](char c) { return c >= '0' && c <= '9'; }) &&
            !is_live_process_suffix(name, prefix.size()))
            stale.push_back((dir / name).string());
    }
    std::sort(stale.begin(), stale.end());
    return stale;
}

std::vector<std::string> remove_stale_temp_files(const std::string& path) {
    const std::vector<std::string> stale = stale_temp_paths(path);
    for (const auto& f : stale)
        QKV_CHECK(::unlink(f.c_str()) == 0 || errno == ENOENT, "cannot remove '", f, "': ", errno_text(errno));
    return stale;
}

namespace {
/// Opens write_file_atomic's temporary file for `path`, or throws in the user's terms.
int open_temp(const std::string& path, const std::string& tmp) {
    QKV_CHECK(!path.empty(), "cannot write a file with an empty path");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    QKV_CHECK(fd >= 0, "cannot write '", path, "': cannot create its temporary file '", tmp, "': ",
              errno_text(errno));
    return fd;
}
}  // namespace

void check_can_write(const std::string& path) {
    const std::string tmp = atomic_temp_path(path);
    ::close(open_temp(path, tmp));
    ::unlink(tmp.c_str());
}

void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill) {
    const std::string tmp = atomic_temp_path(path);
    const int fd          = open_temp(path, tmp);
    try {
        FdSink sink(fd, path, tmp);
        fill(sink);
        QKV_CHECK(::fsync(fd) == 0, "cannot write '", path, "': flushing its temporary file '", tmp,
                  "' to disk failed: ", errno_text(errno));
        const int rc = ::close(fd);
        QKV_CHECK(rc == 0, "cannot write '", path, "': closing its temporary file '", tmp, "' failed: ",
                  errno_text(errno));
    } catch (...) {
        ::close(fd);  // harmless EBADF if already closed
        ::unlink(tmp.c_str());
        throw;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(detail::str("cannot write '", path, "': cannot rename its temporary file '", tmp,
                                "' to it: ", errno_text(err)));
    }
    sync_parent_dir(path);
}

void write_file_atomic(const std::string& path, std::string_view contents) {
    write_file_atomic(path, [&](FileSink& s) { s.write(contents); });
}

std::string read_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    QKV_CHECK(fd >= 0, "cannot open '", path, "': ", errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw Error(detail::str("'", path, "' is not a readable file"));
    }
    std::string out;
    out.reserve(size_t(st.st_size));
    char buf[1 << 16];
    for (;;) {
        const ssize_t r = ::read(fd, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(detail::str("reading '", path, "' failed: ", errno_text(err)));
        }
        if (r == 0) break;
        out.append(buf, size_t(r));
    }
    ::close(fd);
    return out;
}

}  // namespace qkv::util
