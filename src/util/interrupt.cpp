// SIGINT/SIGTERM to a flag (see util/interrupt.h). The handler only stores the signal number and
// resets both signals to SIG_DFL; sigaction is async-signal-safe (POSIX.1-2008, signal-safety(7)).
#include "qkv/util/interrupt.h"

#include <cerrno>
#include <cstring>

#include "qkv/core/error.h"

namespace qkv::util {
namespace {

// Signal handlers get no context, so the state lives here (one guard at a time).
volatile std::sig_atomic_t g_caught    = 0;  // the first signal caught, 0: none
volatile std::sig_atomic_t g_handles[2] = {0, 0};  // whether SIGINT / SIGTERM got our handler
constexpr int kSignals[2] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_alive = false;

extern "C" void on_interrupt(int sig) {
    if (g_caught == 0) g_caught = sig;
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int i = 0; i < 2; ++i)
        if (g_handles[i]) sigaction(kSignals[i], &dfl, nullptr);
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
}

InterruptGuard::~InterruptGuard() { release(); }

const volatile std::sig_atomic_t* InterruptGuard::flag() const { return &g_caught; }

int InterruptGuard::release() {
    if (installed_) {
        for (int i = 0; i < 2; ++i)
            if (g_handles[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
        for (auto& h : g_handles) h = 0;
        installed_ = g_alive = false;
    }
    return g_caught;
}

}  // namespace qkv::util
