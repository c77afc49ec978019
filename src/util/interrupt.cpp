// SIGINT/SIGTERM to a flag (see util/interrupt.h). The handler stores the first signal's number; at
// the next it carries out the armed KillNote (write, unlink), resets both signals to SIG_DFL and
// raises the signal again, which kills once the handler returns. All of write, unlink, sigaction
// and raise are async-signal-safe (POSIX.1-2008, signal-safety(7)); the note's slot is published
// with a lock-free atomic (the handler runs on the sink thread, not the one that arms it).
//
// Where the handler runs: while a guard is alive, the calling thread and every OpenMP thread block
// both signals, and a sleeping "sink" thread leaves them unblocked, so the kernel delivers a
// process-directed SIGINT/SIGTERM to the sink and never interrupts a compute thread. Measured
// before this (session 6): with the handler on whichever thread the kernel picked, about 1 SIGTERM
// in 15 sent during training corrupted the heap inside oneDNN's sgemm (glibc aborts "unaligned
// tcache chunk", "invalid size (unsorted)", "free(): invalid pointer" in dnnl's posix_memalign/free),
// i.e. asynchronously interrupting oneDNN's JIT code is not safe; with the sink, 0 in 60.
#include "qkv/util/interrupt.h"

#include <omp.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "qkv/core/error.h"

namespace qkv::util {
namespace {

// Signal handlers get no context, so the state lives here (one guard at a time).
volatile std::sig_atomic_t g_caught    = 0;  // the first signal caught, 0: none
volatile std::sig_atomic_t g_handles[2] = {0, 0};  // whether SIGINT / SIGTERM got our handler
constexpr int kSignals[2] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_alive = false;
std::atomic<bool> g_sink_stop{false};
std::thread g_sink;

// The armed KillNote: its text (with the newline) and the file to remove ("" : none).
std::atomic<bool> g_note_armed{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler reads g_note_armed");
bool g_note_alive = false;
char g_note_text[1024];
size_t g_note_len = 0;
char g_note_path[4096];
// What the killing signal writes when no KillNote is armed: without it a second Ctrl-C outside
// the armed windows ended the process without a word.
constexpr char kDefaultKillText[] =
    "qkv: interrupted again: stopping at once (every file is written to a temporary name and renamed, so "
    "those written before stay whole)\n";

sigset_t guarded_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < 2; ++i)
        if (g_handles[i]) sigaddset(&set, kSignals[i]);
    return set;
}

/// Blocks (how = SIG_BLOCK) or unblocks the guarded signals in the calling thread and in every
/// thread of an OpenMP team of the current size (the threads that run qkv's and oneDNN's kernels).
void mask_compute_threads(int how) {
    const sigset_t set = guarded_set();
    pthread_sigmask(how, &set, nullptr);
#pragma omp parallel
    { pthread_sigmask(how, &set, nullptr); }
}

extern "C" void on_interrupt(int sig) {
    if (g_caught == 0) {
        g_caught = sig;
        return;
    }
    if (g_note_armed.load(std::memory_order_acquire)) {
        if (::write(STDERR_FILENO, g_note_text, g_note_len) < 0) {
            // nothing to do: the process ends now
        }
        if (g_note_path[0] != '\0') ::unlink(g_note_path);
    } else if (::write(STDERR_FILENO, kDefaultKillText, sizeof kDefaultKillText - 1) < 0) {
        // between the notes (e.g. inside a step): still say why the process ends
    }
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int i = 0; i < 2; ++i)
        if (g_handles[i]) sigaction(kSignals[i], &dfl, nullptr);
    raise(sig);  // blocked in this handler: delivered, with the default action, when it returns
}

}  // namespace

InterruptGuard::InterruptGuard() {
    QKV_CHECK(!g_alive, "InterruptGuard: another guard is already installed");
    g_caught = 0;
    struct sigaction act;
    std::memset(&act, 0, sizeof act);
    act.sa_handler = on_interrupt;
    act.sa_flags   = SA_RESTART;  // a write to a terminal or a pipe goes on, not EINTR
    sigemptyset(&act.sa_mask);
    for (int i = 0; i < 2; ++i) {
        QKV_CHECK(sigaction(kSignals[i], nullptr, &g_previous[i]) == 0,
                  "InterruptGuard: sigaction failed: ", std::strerror(errno));
        g_handles[i] = g_previous[i].sa_handler != SIG_IGN;
    }
    g_alive = installed_ = true;
    for (int i = 0; i < 2; ++i)
        if (g_handles[i] && sigaction(kSignals[i], &act, nullptr) != 0) {
            const int err = errno;
            release();
            throw Error(detail::str("InterruptGuard: sigaction failed: ", std::strerror(err)));
        }
    // The sink starts before the compute threads block, so it inherits an unblocked mask.
    g_sink_stop = false;
    g_sink      = std::thread([] {
        const sigset_t set = guarded_set();
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        const timespec tick{0, 20 * 1000 * 1000};  // 20 ms: release() waits at most this long
        while (!g_sink_stop.load()) nanosleep(&tick, nullptr);
    });
    mask_compute_threads(SIG_BLOCK);
}

InterruptGuard::~InterruptGuard() { release(); }

const volatile std::sig_atomic_t* InterruptGuard::flag() const { return &g_caught; }

int InterruptGuard::release() {
    if (installed_) {
        // Actions first, then the sink goes, then the compute threads unblock: a signal that
        // arrives in between stays pending and is delivered with the restored action.
        for (int i = 0; i < 2; ++i)
            if (g_handles[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
        g_sink_stop = true;
        if (g_sink.joinable()) g_sink.join();
        mask_compute_threads(SIG_UNBLOCK);
        for (auto& h : g_handles) h = 0;
        installed_ = g_alive = false;
    }
    return g_caught;
}

KillNote::KillNote(const std::string& message, const std::string& remove_path) {
    QKV_CHECK(!g_note_alive, "KillNote: another note is already armed");
    QKV_CHECK(remove_path.size() < sizeof g_note_path, "KillNote: the path is too long (", remove_path.size(),
              " bytes)");
    const size_t n = std::min(message.size(), sizeof g_note_text - 1);
    std::memcpy(g_note_text, message.data(), n);
    g_note_text[n] = '\n';
    g_note_len = n + 1;
    std::memcpy(g_note_path, remove_path.c_str(), remove_path.size() + 1);
    g_note_alive = true;
    g_note_armed.store(true, std::memory_order_release);
}

KillNote::~KillNote() {
    g_note_armed.store(false, std::memory_order_release);
    g_note_alive = false;
}

}  // namespace qkv::util
