// util: atomic file writes, whole-file reads, the progress bar (with a fake clock) and the timer.
#include <gtest/gtest.h>
#include <algorithm>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support/capture_file.h"
#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/progress.h"
#include "qkv/util/timer.h"

namespace qkv::util {
namespace {

using qkv::test::TempDir;

int count_files(const std::filesystem::path& dir) {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
    return n;
}

TEST(AtomicFile, WritesAndReplaces) {
    TempDir dir;
    const std::string p = dir / "f.txt";
    write_file_atomic(p, "hello\n");
    EXPECT_EQ(read_file(p), "hello\n");
    write_file_atomic(p, [](FileSink& s) {
        s.write("a");
        s.write(std::string(100000, 'b'));
        EXPECT_EQ(s.bytes_written(), 100001u);
    });
    EXPECT_EQ(read_file(p).size(), 100001u);
    EXPECT_EQ(count_files(dir.path()), 1);
    // Binary content with NULs survives.
    const std::string bin("a\0b\0", 4);
    write_file_atomic(p, bin);
    EXPECT_EQ(read_file(p), bin);
}

TEST(AtomicFile, FailingCallbackLeavesOldFileAndNoTemporary) {
    TempDir dir;
    const std::string p = dir / "f.txt";
    write_file_atomic(p, "old");
    EXPECT_THROW(write_file_atomic(p,
                                   [](FileSink& s) {
                                       s.write("partial");
                                       throw Error("boom");
                                   }),
                 Error);
    EXPECT_EQ(read_file(p), "old");
    EXPECT_EQ(count_files(dir.path()), 1);
}

/// The pid of a process that has ended (a child that exited and was reaped).
pid_t ended_pid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
}

TEST(AtomicFile, RemovesTheStaleTemporariesOfAPath) {
    // A process killed while it wrote leaves path.tmp.<pid>; only those of `path` whose process is
    // gone (or is this one) go: a live process is still writing its own.
    TempDir dir;
    const std::string p = dir / "checkpoint.safetensors";
    EXPECT_EQ(atomic_temp_path(p), p + ".tmp." + std::to_string(::getpid()));
    write_file_atomic(p, "whole");
    const std::string dead1 = std::to_string(ended_pid()), dead2 = std::to_string(ended_pid());
    const std::string live = std::to_string(::getppid()), self = std::to_string(::getpid());
    for (const std::string& name :
         {"checkpoint.safetensors.tmp." + dead1, "checkpoint.safetensors.tmp." + dead2,
          "checkpoint.safetensors.tmp." + live, "checkpoint.safetensors.tmp." + self, std::string("model.safetensors.tmp.3"),
          std::string("checkpoint.safetensors.tmp."), std::string("checkpoint.safetensors.tmp.x1"), std::string("notes.txt")})
        write_file_atomic(dir / name, "x");
    std::vector<std::string> expected{p + ".tmp." + dead1, p + ".tmp." + dead2, p + ".tmp." + self};
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(remove_stale_temp_files(p), expected);
    EXPECT_EQ(count_files(dir.path()), 6);
    EXPECT_TRUE(std::filesystem::exists(p + ".tmp." + live));  // its process is alive
    EXPECT_EQ(read_file(p), "whole");
    EXPECT_TRUE(remove_stale_temp_files(p).empty());
    EXPECT_TRUE(remove_stale_temp_files(dir / "absent/f").empty());  // no folder: nothing to remove
}

TEST(AtomicFile, MissingFolderAndMissingFileNameThePath) {
    TempDir dir;
    const std::string p = dir / "no/such/dir/f.txt";
    try {
        write_file_atomic(p, "x");
        FAIL();
    } catch (const Error& e) {
        // Users see this through `qkv eval --hyp-out` and friends: the file first, no function name.
        EXPECT_EQ(std::string(e.what()).rfind("cannot write '" + p + "': cannot create its temporary file '" + p +
                                                  ".tmp.",
                                              0),
                  0u)
            << e.what();
        EXPECT_EQ(std::string(e.what()).find("write_file_atomic"), std::string::npos) << e.what();
    }
    try {
        read_file(dir / "absent");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
        // Users see this through `qkv info` and friends: no internal function name in it.
        EXPECT_NE(std::string(e.what()).find("cannot open '"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("read_file"), std::string::npos) << e.what();
    }
    EXPECT_THROW(read_file(dir.path().string()), Error);  // a folder
}

bool is_symlink(const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

TEST(AtomicFile, ASymlinkIsFollowedAndKept) {
    // `--json out.json` where out.json links elsewhere: the link stays, the file it names changes.
    TempDir dir;
    std::filesystem::create_directory(dir / "real");
    const std::string target = dir / "real/report.json", link = dir / "report.json";
    write_file_atomic(target, "old");
    std::filesystem::create_symlink("real/report.json", link);  // relative, as `ln -s` makes them
    write_file_atomic(link, "new");
    EXPECT_TRUE(is_symlink(link));
    EXPECT_EQ(read_file(target), "new");
    EXPECT_EQ(count_files(dir / "real"), 1);  // no temporary left beside the target
    EXPECT_EQ(count_files(dir.path()), 2);    // the folder and the link
    // A dangling link names the file to create; a chain of links is followed to its end.
    const std::string chain = dir / "chain";
    std::filesystem::create_symlink(link, chain);
    std::filesystem::create_symlink(dir / "real/created.txt", dir / "dangling");
    write_file_atomic(dir / "dangling", "made");
    EXPECT_TRUE(is_symlink(dir / "dangling"));
    EXPECT_EQ(read_file(dir / "real/created.txt"), "made");
    write_file_atomic(chain, "via chain");
    EXPECT_TRUE(is_symlink(chain) && is_symlink(link));
    EXPECT_EQ(read_file(target), "via chain");
    // The temporaries of a linked file are listed where the file is.
    write_file_atomic(target + ".tmp.999999999", "x");  // no pid has 9 digits of that size
    EXPECT_EQ(stale_temp_paths(link), std::vector<std::string>{target + ".tmp.999999999"});
    // A loop is an error naming the path, not a hang.
    std::filesystem::create_symlink(dir / "loop-b", dir / "loop-a");
    std::filesystem::create_symlink(dir / "loop-a", dir / "loop-b");
    try {
        write_file_atomic(dir / "loop-a", "x");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("too many levels of symbolic links"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("loop-a"), std::string::npos) << e.what();
    }
}

TEST(AtomicFile, AFifoIsWrittenThroughNotReplaced) {
    TempDir dir;
    const std::string fifo = dir / "pipe";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    check_can_write(fifo);  // must not open it: that would wait for a reader
    // The read end is opened first (without waiting for a writer), so the write does not wait and a
    // regression (the FIFO replaced by a file) shows as nothing read, not as a hang.
    const int rfd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(rfd, 0);
    write_file_atomic(fifo, "through the pipe\n");
    char buf[64] = {};
    const ssize_t n = ::read(rfd, buf, sizeof buf - 1);
    ::close(rfd);
    EXPECT_EQ(std::string(buf, size_t(std::max<ssize_t>(n, 0))), "through the pipe\n");
    struct stat st {};
    ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));  // still a FIFO, not a regular file renamed over it
    EXPECT_EQ(count_files(dir.path()), 1);
    EXPECT_TRUE(stale_temp_paths(fifo).empty());
}

TEST(AtomicFile, ACharacterDeviceIsWrittenThroughNotReplaced) {
    // `qkv eval --json /dev/null` as root replaced /dev/null with a regular file. The check uses a
    // node made in a temporary folder (a null device, 1:3), so a regression cannot harm /dev/null.
    TempDir dir;
    const std::string dev = dir / "null";
    if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
        GTEST_SKIP() << "cannot make a device node here (needs CAP_MKNOD): " << std::strerror(errno);
    check_can_write(dev);
    EXPECT_EQ(count_files(dir.path()), 1);  // the check made no temporary beside the device
    write_file_atomic(dev, "discarded");
    struct stat st {};
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(count_files(dir.path()), 1);
    // A link to the device is written through as well.
    std::filesystem::create_symlink(dev, dir / "to-null");
    write_file_atomic(dir / "to-null", "discarded");
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_TRUE(is_symlink(dir / "to-null"));
}

TEST(AtomicFile, DevFdNamesWriteToTheOpenDescriptor) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const std::string name = "/dev/fd/" + std::to_string(fds[1]);
    check_can_write(name);
    write_file_atomic(name, "abc");
    write_file_atomic("/proc/self/fd/" + std::to_string(fds[1]), "def");
    EXPECT_NE(::fcntl(fds[1], F_GETFD), -1);  // still open: the caller's, not ours to close
    ::close(fds[1]);
    char buf[16] = {};
    EXPECT_EQ(::read(fds[0], buf, sizeof buf), 6);
    EXPECT_EQ(std::string(buf), "abcdef");
    // A descriptor that is closed, or open only for reading, is an error naming the path.
    for (const int fd : {fds[1], fds[0]}) {
        const std::string p = "/dev/fd/" + std::to_string(fd);
        try {
            write_file_atomic(p, "x");
            FAIL() << p;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("cannot write '" + p + "': descriptor " + std::to_string(fd) +
                                                 " is not open for writing"),
                      std::string::npos)
                << e.what();
        }
        EXPECT_THROW(check_can_write(p), Error);
    }
    ::close(fds[0]);
}

TEST(AtomicFile, EverySpellingOfAnOpenDescriptorWritesThroughIt) {
    // `--json mystdout >> log.txt` with mystdout -> /dev/stdout replaced log.txt (the rename went
    // to the file the descriptor leads to); so did /dev//stdout and /proc/<pid>/fd/1.
    TempDir dir;
    const std::string log = dir / "log.txt";
    write_file_atomic(log, "important log\n");
    const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);  // as a shell's >> opens it
    ASSERT_GE(fd, 0);
    struct stat before {};
    ASSERT_EQ(::stat(log.c_str(), &before), 0);
    const std::string n = std::to_string(fd), pid = std::to_string(::getpid());
    std::filesystem::create_symlink("/dev/fd/" + n, dir / "mystdout");
    std::filesystem::create_symlink(dir / "mystdout", dir / "chain");
    // A link to the folder of descriptors, and a path relative to it (cd /proc/self/fd; --json 1).
    std::filesystem::create_symlink("/proc/self/fd", dir / "fds");
    for (const std::string& spelling : {dir / "mystdout", dir / "chain", "/dev//fd/" + n, "/dev/fd/./" + n,
                                        "/proc/" + pid + "/fd/" + n, "/proc/thread-self/fd/" + n, dir / ("fds/" + n)})
        write_file_atomic(spelling, "[" + spelling + "]\n");
    const std::filesystem::path cwd = std::filesystem::current_path();
    std::filesystem::current_path("/proc/self/fd");
    write_file_atomic(n, "[relative]\n");
    std::filesystem::current_path(cwd);
    ::close(fd);
    struct stat after {};
    ASSERT_EQ(::stat(log.c_str(), &after), 0);
    EXPECT_EQ(before.st_ino, after.st_ino);  // the same file, written through, not replaced
    const std::string text = read_file(log);
    EXPECT_EQ(text.rfind("important log\n[", 0), 0u) << text;
    EXPECT_NE(text.find("/proc/thread-self/fd/" + n + "]"), std::string::npos) << text;
    EXPECT_NE(text.find("[relative]"), std::string::npos) << text;
    EXPECT_EQ(count_files(dir.path()), 4);  // no temporaries
    // A regular file whose path only looks like a descriptor's is replaced, not appended to.
    std::filesystem::create_directory(dir / "fd");
    write_file_atomic(dir / "fd/3", "OLD\n");
    write_file_atomic("/proc/self/root" + (dir / "fd/3"), "NEW\n");
    EXPECT_EQ(read_file(dir / "fd/3"), "NEW\n");
    // Streams may take two outputs; files and FIFOs may not.
    EXPECT_TRUE(is_stream_output(dir / "chain") && is_stream_output("/dev/stdout") && is_stream_output("/dev/null"));
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    EXPECT_FALSE(is_stream_output(log) || is_stream_output(dir / "fifo") || is_stream_output(dir / "new.json"));
}

TEST(AtomicFile, AReplacedFileKeepsItsPermissionsAndAReadOnlyOneIsRefused) {
    TempDir dir;
    const std::string priv = dir / "private.json";
    write_file_atomic(priv, "old");
    ASSERT_EQ(::chmod(priv.c_str(), 0600), 0);
    write_file_atomic(priv, "new");
    struct stat st {};
    ASSERT_EQ(::stat(priv.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);  // was 0644: readable by everyone after the rename
    EXPECT_EQ(read_file(priv), "new");
    // A file the user may not write is refused (the rename needs only the folder's permission).
    // Root may write anything, so that half runs as user nobody in a child process.
    const std::string ro = dir / "read-only.json";
    write_file_atomic(ro, "keep");
    ASSERT_EQ(::chmod(ro.c_str(), 0444), 0);
    ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
        int code = 0;
        try {
            check_can_write(ro);
            code = 1;
        } catch (const Error& e) {
            if (std::string(e.what()) != "cannot write '" + ro + "': Permission denied") code = 2;
        }
        try {
            write_file_atomic(ro, "lost");
            code = 1;
        } catch (const Error&) {
        }
        ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: a read-only file was written; 2: another message; 3: setuid failed";
    EXPECT_EQ(read_file(ro), "keep");
}

TEST(AtomicFile, ASocketIsRefusedBeforeAnyWork) {
    TempDir dir;
    const std::string sock = dir / "s";
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(sock.size(), sizeof addr.sun_path);
    std::strcpy(addr.sun_path, sock.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    try {
        check_can_write(sock);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "cannot write '" + sock + "': it is a socket, not a file");
    }
    ::close(fd);
}

TEST(AtomicFile, AFolderIsRenamedOnlyIntoAnAbsentOrEmptyOne) {
    // Two `qkv average` runs into one empty --out: the second rename must report the folder as
    // filled (false), not throw the file system's "Directory not empty", and lose nothing.
    TempDir dir;
    const auto filled = [&](const std::string& name, const std::string& content) {
        std::filesystem::create_directory(dir / name);
        write_file_atomic(dir / (name + "/model.safetensors"), content);
        return dir / name;
    };
    EXPECT_TRUE(rename_folder_into_place(filled("a.tmp.1", "first"), dir / "out"));  // absent
    EXPECT_EQ(read_file(dir / "out/model.safetensors"), "first");
    EXPECT_FALSE(rename_folder_into_place(filled("b.tmp.2", "second"), dir / "out"));  // filled meanwhile
    EXPECT_EQ(read_file(dir / "out/model.safetensors"), "first");
    EXPECT_EQ(read_file(dir / "b.tmp.2/model.safetensors"), "second");  // left for the caller to remove
    std::filesystem::create_directory(dir / "empty");
    EXPECT_TRUE(rename_folder_into_place(dir / "b.tmp.2", dir / "empty"));  // an empty folder is replaced
    EXPECT_EQ(read_file(dir / "empty/model.safetensors"), "second");
    write_file_atomic(dir / "file", "x");
    try {
        rename_folder_into_place(filled("c.tmp.3", "third"), dir / "file");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot write the folder '" + (dir / "file") + "'"), std::string::npos)
            << e.what();
    }
}

using test::Capture;  // what a ProgressBar prints

/// Plain-mode options printing to `cap`, on the clock `t`, with a line at most every `interval_s`.
ProgressOptions plain_options(const Capture& cap, const double& t, double interval_s) {
    ProgressOptions o;
    o.out              = cap.f;
    o.mode             = ProgressOptions::Mode::plain;
    o.plain_interval_s = interval_s;
    o.clock            = [&t] { return t; };
    return o;
}

TEST(Progress, FormatDuration) {
    EXPECT_EQ(format_duration(0), "00:00");
    EXPECT_EQ(format_duration(75.9), "01:15");
    EXPECT_EQ(format_duration(3600 + 62), "1:01:02");
    EXPECT_EQ(format_duration(-1), "?");
    EXPECT_EQ(format_duration(1.0 / 0.0), "?");
}

TEST(Progress, RenderWithBarRateEtaAndFields) {
    double t = 0;
    ProgressOptions o;
    o.out   = nullptr;
    o.mode  = ProgressOptions::Mode::tty;
    o.clock = [&] { return t; };
    o.bar_width = 10;
    ProgressBar bar(100, "train", o);
    bar.update(45, {{"loss", 1.23456}, {"lr", 0.0005}});
    EXPECT_EQ(bar.render(12.0), "train  45%|####      | 45/100 [00:12<00:14, 3.75 it/s, loss=1.235, lr=0.0005]");
    ProgressOptions plain = o;
    plain.mode = ProgressOptions::Mode::plain;
    ProgressBar p2(0, "", plain);  // unknown total
    p2.update(3);
    EXPECT_EQ(p2.render(6.0), "3 [00:06, 2.00 s/it]");
}

TEST(Progress, TtyRedrawsAtMostEveryInterval) {
    Capture cap;
    double t = 0;
    ProgressOptions o;
    o.out   = cap.f;
    o.mode  = ProgressOptions::Mode::tty;
    o.clock = [&] { return t; };
    ProgressBar bar(10, "x", o);
    EXPECT_TRUE(bar.is_tty());
    for (int i = 0; i < 10; ++i) {
        t += 0.04;  // 25 updates/s: only every third or so may draw
        bar.update();
    }
    bar.finish();
    bar.finish();  // idempotent
    const std::string s = cap.text();
    const auto draws = std::count(s.begin(), s.end(), '\r');
    EXPECT_GE(draws, 4);  // t = 0.04, 0.16, 0.28, 0.40 (first draw at once) + final
    EXPECT_LE(draws, 5);
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
    EXPECT_NE(s.find("100%|##############################| 10/10"), std::string::npos) << s;
}

TEST(Progress, PlainLinesEveryNStepsAndOnFinish) {
    Capture cap;
    double t = 0;
    ProgressOptions o = plain_options(cap, t, 0);
    o.plain_every     = 4;
    {
        ProgressBar bar(10, "ep", o);
        EXPECT_FALSE(bar.is_tty());
        for (int i = 0; i < 10; ++i) {
            t += 1;
            bar.update(1, {{"loss", 10.0 - i}});
        }
    }  // destructor finishes
    const std::string s = cap.text();
    EXPECT_EQ(s,
              "ep  40% 4/10 [00:04<00:06, 1.00 it/s, loss=7]\n"
              "ep  80% 8/10 [00:08<00:02, 1.00 it/s, loss=3]\n"
              "ep 100% 10/10 [00:10<00:00, 1.00 it/s, loss=1]\n");
    EXPECT_EQ(s.find('\r'), std::string::npos);
}

// A timed line printed at the last step is not printed again by finish().
TEST(Progress, PlainFinalLineOnce) {
    Capture cap;
    double t = 0;
    const ProgressOptions o = plain_options(cap, t, 10);
    {
        ProgressBar bar(6, "d", o);
        for (int i = 0; i < 6; ++i) {
            t += 4;  // lines by time at t = 12 (3/6) and t = 24: the last update (6/6)
            bar.update();
        }
    }
    const std::string s = cap.text();
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 2) << s;
    EXPECT_EQ(s.find("100%"), s.rfind("100%")) << s;
}

TEST(Progress, PlainLinesByTime) {
    Capture cap;
    double t = 0;
    const ProgressOptions o = plain_options(cap, t, 10);
    ProgressBar bar(1000, "", o);
    for (int i = 0; i < 100; ++i) {
        t += 0.5;  // 50 s in all: lines at 10, 20, 30, 40, 50 s
        bar.update();
    }
    const std::string s = cap.text();
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 5) << s;
}

TEST(Timer, MeasuresSleep) {
    // The sleep is what is measured. Bracketed by steady_clock readings around it, not by a
    // bound on how long the machine takes.
    const auto before = std::chrono::steady_clock::now();
    Timer t;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double s = t.seconds();
    const double outer = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    EXPECT_GE(s, 0.020);
    EXPECT_LE(s, outer);
    const double r = t.restart();
    EXPECT_GE(r, s);
    // After the restart it counts from the restart: at most what passed since `before`, less the r
    // seconds that came before the restart (1 µs for rounding).
    const double m = t.millis();
    const double total_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    EXPECT_GE(m, 0.0);
    EXPECT_LE(m, total_ms - 1e3 * r + 1e-3);
}

}  // namespace
}  // namespace qkv::util
