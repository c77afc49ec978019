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
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::util {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

class FdSink final : public FileSink {
public:
    /// `what_failed` completes "cannot write 'PATH': <what_failed> failed: <errno text>".
    FdSink(int fd, const std::string& path, std::string what_failed)
        : fd_(fd), path_(path), what_failed_(std::move(what_failed)) {}
    void write(const void* data, size_t n) override {
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t w = ::write(fd_, p, n);
            if (w < 0) {
                if (errno == EINTR) continue;
                throw Error(detail::str("cannot write '", path_, "': ", what_failed_, " failed: ", errno_text(errno)));
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
    std::string what_failed_;
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

bool all_digits(std::string_view t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Where a write of `path` goes. A regular file (or none yet) is replaced atomically; a symlink is
/// followed so the link stays and its target gets the new content; a character device, FIFO or
/// socket (/dev/null, a named pipe) and the already-open descriptors named /dev/stdout, /dev/stderr,
/// /dev/fd/N and /proc/self/fd/N are written in place: renaming over them would replace the device
/// or the link instead of writing through it.
struct OutputTarget {
    enum Kind { kReplace, kInPlace, kDescriptor } kind = kReplace;
    std::string path;  // kReplace: the file to replace (symlinks resolved); kInPlace: the path to open
    int fd = -1;       // kDescriptor: the open descriptor
};

/// The descriptor a /dev/stdout-like name stands for, or -1: /dev/stdout, /dev/stderr, /dev/stdin,
/// /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N and /proc/<this pid>/fd/N.
int descriptor_of(const std::string& path) {
    if (path == "/dev/stdin") return 0;
    if (path == "/dev/stdout") return 1;
    if (path == "/dev/stderr") return 2;
    const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
    // /proc/<this pid>/task/<tid>/fd/N (what /proc/thread-self/fd/N resolves to): one table per process.
    const std::string task = "/proc/" + std::to_string(::getpid()) + "/task/";
    if (path.compare(0, task.size(), task) == 0) {
        const size_t fd_at = path.find("/fd/", task.size());
        if (fd_at != std::string::npos && all_digits(std::string_view(path).substr(task.size(), fd_at - task.size())))
            return descriptor_of("/proc/self" + path.substr(fd_at));
    }
    for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
                                      std::string("/proc/thread-self/fd/"), own}) {
        const size_t n = prefix.size();
        if (path.size() <= n + 6 && path.compare(0, n, prefix) == 0 && all_digits(std::string_view(path).substr(n)))
            return std::atoi(path.c_str() + n);
    }
    return -1;
}

/// /proc/<pid>/fd/N or /proc/<pid>/task/<tid>/fd/N of any process (pid also "self",
/// "thread-self"): a descriptor, not a file.
bool is_proc_descriptor(const std::string& path) {
    std::vector<std::string> parts;
    for (const auto& c : std::filesystem::path(path)) parts.push_back(c.string());
    const auto pid = [](const std::string& t) { return all_digits(t) || t == "self" || t == "thread-self"; };
    if (parts.size() == 5 && parts[0] == "/" && parts[1] == "proc" && pid(parts[2]) && parts[3] == "fd")
        return all_digits(parts[4]);
    return parts.size() == 7 && parts[0] == "/" && parts[1] == "proc" && pid(parts[2]) && parts[3] == "task" &&
           all_digits(parts[4]) && parts[5] == "fd" && all_digits(parts[6]);
}

/// `p` with its folder made absolute and its symlinks resolved (the last component kept):
/// "1" run from /proc/self/fd, "lnk/1" with lnk -> /proc/self/fd and "/dev/fd/1" all become
/// /proc/<pid>/fd/1.
std::string resolved_folder(const std::string& p) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path abs = fs::absolute(fs::path(p), ec).lexically_normal();
    if (ec || !abs.has_filename()) return abs.string();
    const fs::path dir = fs::weakly_canonical(abs.parent_path(), ec);
    return ec ? abs.string() : (dir / abs.filename()).string();
}

OutputTarget output_target(const std::string& path) {
    QKV_CHECK(!path.empty(), "cannot write a file with an empty path");
    // Follow symlinks one hop at a time (a dangling one names the file to create), so the link
    // itself is kept and its target gets the content. Each hop is checked for an open descriptor
    // by any spelling (/dev//stdout, a link to /dev/stdout): renaming over what it leads to would
    // replace the file the shell redirected stdout to.
    std::string p = path;
    for (int hops = 0;; ++hops) {
        const std::string norm = resolved_folder(p);
        if (const int fd = descriptor_of(norm); fd >= 0) return {OutputTarget::kDescriptor, path, fd};
        if (is_proc_descriptor(norm)) return {OutputTarget::kInPlace, path, -1};  // another process's: never renamed over
        struct stat lst {};
        if (::lstat(p.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) break;
        QKV_CHECK(hops < 40, "cannot write '", path, "': too many levels of symbolic links");
        std::error_code ec;
        const std::filesystem::path to = std::filesystem::read_symlink(p, ec);
        QKV_CHECK(!ec, "cannot write '", path, "': cannot read the symbolic link '", p, "': ", ec.message());
        p = to.is_absolute() ? to.string() : (std::filesystem::path(p).parent_path() / to).string();
    }
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
        QKV_CHECK(!S_ISSOCK(st.st_mode), "cannot write '", path, "': it is a socket, not a file");
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return {OutputTarget::kInPlace, path, -1};
    }
    return {OutputTarget::kReplace, p, -1};
}

/// Whether the digits of `name` from `digits_at` on (a ".tmp.<pid>" suffix) are the pid of a live
/// process other than this one: its temporary is still being written and must be left alone.
bool is_live_process_suffix(const std::string& name, size_t digits_at) {
    if (name.size() - digits_at > 9) return false;  // pids are < 2^22
    const long pid = std::strtol(name.c_str() + digits_at, nullptr, 10);
    if (pid <= 0 || pid == long(::getpid())) return false;  // ours: a leftover of an earlier process with our pid
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

bool is_stream_output(const std::string& path) {
    const OutputTarget out = output_target(path);
    if (out.kind == OutputTarget::kDescriptor) return true;
    struct stat st {};
    return out.kind == OutputTarget::kInPlace && ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

std::vector<std::string> stale_temp_paths(const std::string& path) {
    namespace fs = std::filesystem;
    const OutputTarget out = output_target(path);
    if (out.kind != OutputTarget::kReplace) return {};  // written in place: no temporaries
    const fs::path target(out.path);
    fs::path dir = target.parent_path();
    if (dir.empty()) dir = ".";
    const std::string prefix = target.filename().string() + ".tmp.";
    std::vector<std::string> stale;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, prefix.size(), prefix) == 0 && all_digits(std::string_view(name).substr(prefix.size())) &&
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
/// Opens write_file_atomic's temporary file `tmp` for `path`, or throws in the user's terms.
int open_temp(const std::string& path, const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    QKV_CHECK(fd >= 0, "cannot write '", path, "': cannot create its temporary file '", tmp, "': ",
              errno_text(errno));
    return fd;
}

/// A file the user may not write (chmod a-w, or another user's) is refused as `cat > file`
/// would refuse it, though the rename would replace it (it needs only the folder's permission).
void check_replaceable(const std::string& path, const std::string& target) {
    struct stat st {};
    if (::stat(target.c_str(), &st) != 0) return;  // a new file
    QKV_CHECK(::access(target.c_str(), W_OK) == 0, "cannot write '", path, "': ", errno_text(errno));
}

/// The new file gets the replaced one's permission bits (a chmod 600 file stays private) and,
/// where allowed (root), its owner and group.
void keep_mode_and_owner(int fd, const std::string& target) {
    struct stat st {};
    if (::stat(target.c_str(), &st) != 0) return;
    // Owner first: fchown clears the set-user-ID bit that fchmod then restores.
    if ((st.st_uid != ::geteuid() || st.st_gid != ::getegid()) && ::fchown(fd, st.st_uid, st.st_gid) != 0) {
        // EPERM unless root: the new file stays ours, as a copy would
    }
    ::fchmod(fd, st.st_mode & 07777);
}

/// Throws unless descriptor `fd` is open for writing.
void check_writable_descriptor(int fd, const std::string& path) {
    const int fl = ::fcntl(fd, F_GETFL);
    QKV_CHECK(fl >= 0 && (fl & O_ACCMODE) != O_RDONLY, "cannot write '", path, "': descriptor ", fd,
              " is not open for writing");
}

/// What the program printed so far goes first when a write shares its stream (stdout, a terminal).
void flush_program_streams() {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
}

/// A device or FIFO: opened for writing as it is (no O_CREAT; a FIFO waits for its reader, as a
/// shell redirection does). No fsync: pipes and terminals refuse it and have no disk to flush.
void write_in_place(const std::string& path, const std::function<void(FileSink&)>& fill) {
    // A /proc path may lead to a regular file another process writes (its redirected output):
    // appended to, never truncated. Devices and FIFOs ignore both flags.
    struct stat st {};
    const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    flush_program_streams();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (regular ? O_APPEND : 0));
    QKV_CHECK(fd >= 0, "cannot write '", path, "': ", errno_text(errno));
    try {
        FdSink sink(fd, path, "writing it");
        fill(sink);
    } catch (...) {
        ::close(fd);
        throw;
    }
    QKV_CHECK(::close(fd) == 0, "cannot write '", path, "': closing it failed: ", errno_text(errno));
}

/// An already-open descriptor (/dev/stdout): the C and C++ streams are flushed first so the bytes
/// come after what the program printed there; the descriptor stays open.
void write_to_descriptor(int fd, const std::string& path, const std::function<void(FileSink&)>& fill) {
    check_writable_descriptor(fd, path);
    flush_program_streams();
    FdSink sink(fd, path, "writing it");
    fill(sink);
}
}  // namespace

void check_can_write(const std::string& path) {
    const OutputTarget out = output_target(path);
    switch (out.kind) {
    case OutputTarget::kDescriptor:
        check_writable_descriptor(out.fd, path);
        return;
    case OutputTarget::kInPlace:  // opening a FIFO here would wait for its reader
        QKV_CHECK(::access(path.c_str(), W_OK) == 0, "cannot write '", path, "': ", errno_text(errno));
        return;
    case OutputTarget::kReplace: {
        check_replaceable(path, out.path);
        const std::string tmp = atomic_temp_path(out.path);
        ::close(open_temp(path, tmp));
        ::unlink(tmp.c_str());
        return;
    }
    }
}

void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill) {
    const OutputTarget out = output_target(path);
    if (out.kind == OutputTarget::kDescriptor) return write_to_descriptor(out.fd, path, fill);
    if (out.kind == OutputTarget::kInPlace) return write_in_place(path, fill);
    const std::string& target = out.path;  // `path`, or the file its symlinks lead to
    check_replaceable(path, target);
    const std::string tmp = atomic_temp_path(target);
    const int fd          = open_temp(path, tmp);
    try {
        keep_mode_and_owner(fd, target);
        FdSink sink(fd, path, "writing its temporary file '" + tmp + "'");
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
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(detail::str("cannot write '", path, "': cannot rename its temporary file '", tmp,
                                "' to it: ", errno_text(err)));
    }
    sync_parent_dir(target);
}

bool rename_folder_into_place(const std::string& tmp, const std::string& out) {
    if (::rename(tmp.c_str(), out.c_str()) == 0) {
        sync_parent_dir(out);
        return true;
    }
    const int err = errno;
    if (err == ENOTEMPTY || err == EEXIST) return false;
    throw Error(detail::str("cannot write the folder '", out, "': cannot rename '", tmp, "' to it: ", errno_text(err)));
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
