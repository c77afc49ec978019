// tun_delay: a user-space link delay for the multi-host test bed (tests/dist/netns_testbed.sh
// --link tun), for kernels without sch_netem. It owns one TUN device per namespace "host" and acts
// as the hosts' switch: every IPv4 packet read from host i's device is held for the one-way delay
// and then written to the device of the host that owns its destination address. A round trip
// between two hosts is thus 2 x DELAY plus the relay's own cost (bench/RESULTS.md measures it).
//
// Each device is made inside its host's namespace (setns to /run/netns/NAME, then TUNSETIFF), so no
// interface ever exists in the machine's own namespace; the devices are not persistent, so they
// vanish when the relay exits. The relay then moves itself into the namespace named by --home
// (the test bed's switch namespace), where the test bed's `down` finds and ends it.
//
// One thread: epoll over the devices, a timerfd armed (absolute, CLOCK_MONOTONIC) for the oldest
// held packet, and a signalfd (SIGTERM/SIGINT end it, SIGHUP re-reads the delay from --control).
// The delay is constant, so arrival order is deadline order and one FIFO queue suffices; packets
// are read straight into pooled buffers (no copy). Timer slack is set to 1 ns (the default 50 us
// would blur a 0.1 ms delay). The rate is not shaped here: tc tbf on each host's device does it.
//
// Usage (root):
//   tun_delay --subnet A.B.C --first 10 --delay-us D [--mtu 65520] [--queue-mb 256]
//             [--control FILE] [--home NS] [--pidfile FILE] NS0 NS1 ...
//   Host i (namespace NSi) owns address A.B.C.(first + i); its device is named eth0 (the test bed
//   gives it that address, the MTU and brings it up). With --pidfile the relay detaches once the
//   devices exist (the caller may configure them at once) and writes its pid there.
//   On exit it prints the packets relayed and dropped (no route, queue full) on stderr.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

namespace {

// A failed system call: the message and errno's text.
[[noreturn]] void die(const std::string& what) {
    const int e = errno;
    std::fprintf(stderr, "tun_delay: %s%s%s\n", what.c_str(), e ? ": " : "", e ? std::strerror(e) : "");
    std::exit(1);
}

// Bad usage: the message alone.
[[noreturn]] void usage(const std::string& what) {
    errno = 0;
    die(what);
}

int64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Options {
    std::string subnet = "10.231.0";
    int first = 10;
    int64_t delay_ns = 0;
    int mtu = 65520;
    size_t queue_bytes = size_t{256} << 20;
    std::string control, home, pidfile;
    std::vector<std::string> hosts;
};

int64_t parse_int(const std::string& flag, const char* v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0) usage("option " + flag + ": '" + v + "' is not a non-negative integer");
    return x;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) usage("option " + a + " needs a value");
            return argv[++i];
        };
        if (a == "--subnet") o.subnet = value();
        else if (a == "--first") o.first = int(parse_int(a, value()));
        else if (a == "--delay-us") o.delay_ns = parse_int(a, value()) * 1000;
        else if (a == "--mtu") o.mtu = int(parse_int(a, value()));
        else if (a == "--queue-mb") o.queue_bytes = size_t(parse_int(a, value())) << 20;
        else if (a == "--control") o.control = value();
        else if (a == "--home") o.home = value();
        else if (a == "--pidfile") o.pidfile = value();
        else if (a.rfind("--", 0) == 0) usage("unknown option " + a);
        else o.hosts.push_back(a);
    }
    if (o.hosts.size() < 2) usage("give two or more namespace names (the hosts)");
    if (o.first < 1 || o.first + int(o.hosts.size()) > 255) usage("--first with the hosts leaves the subnet's 1..254");
    if (o.mtu < 576 || o.mtu > 65535) usage("--mtu " + std::to_string(o.mtu) + ": 576 to 65535");
    return o;
}

void enter_netns(const std::string& name) {
    const std::string path = "/run/netns/" + name;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("no network namespace " + path);
    if (setns(fd, CLONE_NEWNET) != 0) die("setns " + path);
    close(fd);
}

// A TUN device named eth0 in namespace NS (IPv4 packets without the packet-info header).
int make_tun(const std::string& ns) {
    enter_netns(ns);
    const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die("open /dev/net/tun (CONFIG_TUN; root)");
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF eth0 in namespace " + ns);
    return fd;
}

// Sets the delay from the control file (microseconds, one integer; the old one is kept on error),
// then writes the delay in force to FILE.applied, so that whoever changed the file knows when
// the relay has taken it (netns_testbed.sh shape waits for it).
void read_control(const std::string& path, int64_t& delay_ns) {
    std::ifstream f(path);
    long long us = -1;
    if (f >> us && us >= 0) delay_ns = us * 1000;
    else std::fprintf(stderr, "tun_delay: %s holds no delay in microseconds; keeping %lld us\n", path.c_str(),
                      (long long)(delay_ns / 1000));
    const std::string applied = path + ".applied", tmp = applied + ".tmp";
    if (FILE* out = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(out, "%lld\n", (long long)(delay_ns / 1000));
        std::fclose(out);
        std::rename(tmp.c_str(), applied.c_str());  // whole or absent, never half-written
    }
}

// The signals the relay reads from its signalfd; blocked from the start (before it detaches), so
// that a SIGHUP sent as soon as the pid file exists is never fatal.
const sigset_t& handled_signals() {
    static const sigset_t set = [] {
        sigset_t s;
        sigemptyset(&s);
        for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&s, sig);
        return s;
    }();
    return set;
}

struct Held {
    int64_t due_ns;
    int to;
    std::vector<uint8_t> bytes;  // the packet, bytes.size() its length
};

class Relay {
public:
    Relay(Options o, std::vector<int> fds) : o_(std::move(o)), fds_(std::move(fds)) {}

    int run();

private:
    void on_readable(int from);
    void deliver(int to, const std::vector<uint8_t>& p);
    void flush_due();
    void arm();
    int route(const std::vector<uint8_t>& p) const;

    Options o_;
    std::vector<int> fds_;
    int ep_ = -1, timer_ = -1, sig_ = -1;
    std::deque<Held> queue_;
    std::vector<std::vector<uint8_t>> pool_;
    size_t held_bytes_ = 0;
    uint64_t relayed_ = 0, no_route_ = 0, full_ = 0, write_fail_ = 0;
};

int Relay::route(const std::vector<uint8_t>& p) const {
    if (p.size() < 20 || (p[0] >> 4) != 4) return -1;  // IPv4 only (the test bed's subnet)
    char dst[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &p[16], dst, sizeof dst);
    const std::string d = dst;
    const std::string prefix = o_.subnet + ".";
    if (d.rfind(prefix, 0) != 0) return -1;
    const int host = std::atoi(d.c_str() + prefix.size()) - o_.first;
    return host >= 0 && host < int(fds_.size()) ? host : -1;
}

void Relay::deliver(int to, const std::vector<uint8_t>& p) {
    // A write to a TUN device hands the packet to the host's stack; it fails only when that
    // stack refuses it (as a full NIC queue would drop it), so a failure is counted, not retried.
    if (write(fds_[size_t(to)], p.data(), p.size()) == ssize_t(p.size())) ++relayed_;
    else ++write_fail_;
}

void Relay::on_readable(int from) {
    // Drain the device: a level-triggered epoll would otherwise wake once per packet.
    for (;;) {
        std::vector<uint8_t> buf;
        if (!pool_.empty()) { buf = std::move(pool_.back()); pool_.pop_back(); }
        buf.resize(size_t(o_.mtu) + 4);
        const ssize_t n = read(fds_[size_t(from)], buf.data(), buf.size());
        if (n < 0) {
            pool_.push_back(std::move(buf));
            if (errno == EAGAIN || errno == EINTR) return;
            die("read from host " + std::to_string(from) + "'s device");
        }
        buf.resize(size_t(n));
        const int to = route(buf);
        if (to < 0) { ++no_route_; pool_.push_back(std::move(buf)); continue; }
        if (o_.delay_ns == 0 && queue_.empty()) { deliver(to, buf); pool_.push_back(std::move(buf)); continue; }
        // Counted by capacity: a held packet keeps its whole MTU-sized buffer.
        if (held_bytes_ + buf.capacity() > o_.queue_bytes) { ++full_; pool_.push_back(std::move(buf)); continue; }
        held_bytes_ += buf.capacity();
        queue_.push_back(Held{now_ns() + o_.delay_ns, to, std::move(buf)});
    }
}

void Relay::flush_due() {
    const int64_t t = now_ns();
    while (!queue_.empty() && queue_.front().due_ns <= t) {
        Held& h = queue_.front();
        deliver(h.to, h.bytes);
        held_bytes_ -= h.bytes.capacity();
        pool_.push_back(std::move(h.bytes));
        queue_.pop_front();
    }
    if (pool_.size() > 256) pool_.resize(256);  // after a burst: bound the idle memory (16 MiB)
}

void Relay::arm() {
    itimerspec its{};  // all zero: disarmed
    if (!queue_.empty()) {
        const int64_t due = queue_.front().due_ns;
        its.it_value.tv_sec = due / 1000000000;
        its.it_value.tv_nsec = due % 1000000000;
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(timer_, TFD_TIMER_ABSTIME, &its, nullptr) != 0) die("timerfd_settime");
}

int Relay::run() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    sig_ = signalfd(-1, &handled_signals(), SFD_NONBLOCK | SFD_CLOEXEC);
    if (ep_ < 0 || timer_ < 0 || sig_ < 0) die("epoll/timerfd/signalfd");
    const int n = int(fds_.size());
    auto add = [&](int fd, int tag) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = uint32_t(tag);
        if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
    };
    for (int i = 0; i < n; ++i) add(fds_[size_t(i)], i);
    add(timer_, n);
    add(sig_, n + 1);
    bool stop = false;
    while (!stop) {
        epoll_event evs[16];
        const int k = epoll_wait(ep_, evs, 16, -1);
        if (k < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int e = 0; e < k; ++e) {
            const int tag = int(evs[e].data.u32);
            if (tag < n) {
                on_readable(tag);
            } else if (tag == n) {
                uint64_t expirations;
                (void)!read(timer_, &expirations, sizeof expirations);
            } else {
                signalfd_siginfo si{};
                while (read(sig_, &si, sizeof si) == ssize_t(sizeof si)) {
                    if (si.ssi_signo == SIGHUP && !o_.control.empty()) read_control(o_.control, o_.delay_ns);
                    else if (si.ssi_signo != SIGHUP) stop = true;
                }
            }
        }
        flush_due();
        arm();
    }
    std::fprintf(stderr, "tun_delay: %llu packets relayed; dropped: %llu without a host, %llu on a full queue, "
                         "%llu refused by the host\n",
                 (unsigned long long)relayed_, (unsigned long long)no_route_, (unsigned long long)full_,
                 (unsigned long long)write_fail_);
    return 0;
}

// Detaches once the devices exist: the parent returns (exit 0) after the pid file is written.
void detach(const std::string& pidfile) {
    const pid_t child = fork();
    if (child < 0) die("fork");
    if (child > 0) {
        FILE* f = std::fopen(pidfile.c_str(), "w");
        if (!f) die("cannot write " + pidfile);
        std::fprintf(f, "%d\n", int(child));
        std::fclose(f);
        std::_Exit(0);
    }
    setsid();
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) { dup2(null, STDIN_FILENO); dup2(null, STDOUT_FILENO); close(null); }
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    sigprocmask(SIG_BLOCK, &handled_signals(), nullptr);
    if (!o.control.empty()) read_control(o.control, o.delay_ns);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    // The namespace to come back to when no --home is given: the one the relay started in.
    const int origin = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (origin < 0) die("open /proc/self/ns/net");
    std::vector<int> fds;
    for (const std::string& ns : o.hosts) fds.push_back(make_tun(ns));
    if (!o.home.empty()) enter_netns(o.home);
    else if (setns(origin, CLONE_NEWNET) != 0) die("setns back to the starting namespace");
    close(origin);
    if (!o.pidfile.empty()) detach(o.pidfile);
    return Relay(std::move(o), std::move(fds)).run();
}
