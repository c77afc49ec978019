#pragma once
// Ctrl-C / SIGTERM as a request to stop at the next safe point (the training loop's batch top),
// instead of killing the process mid-write: a scoped guard installs handlers that only record the
// signal (an async-signal-safe write to a volatile std::sig_atomic_t); a second Ctrl-C or SIGTERM
// kills at once, after the KillNote armed then, if any (e.g. "interrupted while writing the
// checkpoint", and the half-written file removed).
#include <csignal>
#include <string>

namespace qkv::util {

/// While alive, SIGINT and SIGTERM set a flag instead of ending the process. The first of them
/// sets flag() to its number; the next one kills, as if no guard were installed (the handler puts
/// the default action of both back and sends the signal again), after carrying out the KillNote
/// armed at that moment, or, when none is, writing "qkv: interrupted again: stopping at once
/// (...)" to stderr. A signal that was ignored (SIG_IGN) when the guard was created
/// stays ignored (as shells start background jobs with SIGINT ignored). release() (or the
/// destructor) restores the actions found at construction. One guard at a time: constructing a
/// second while one is alive throws qkv::Error. Not thread-safe; create it on the main thread.
///
/// Delivery: while the guard lives, the creating thread and the threads of an OpenMP team of the
/// current size block both signals, and a sleeping sink thread (started by the guard, joined by
/// release()) takes them, so no compute thread is ever interrupted: a handler that ran inside
/// oneDNN's sgemm corrupted the heap in ~1 of 15 SIGTERMs (src/util/interrupt.cpp). A signal sent
/// to the creating thread itself (raise(), pthread_kill) therefore stays pending until release();
/// send it to the process (kill(getpid(), sig)) instead.
class InterruptGuard {
public:
    /// Clears the flag and installs the handlers. Throws qkv::Error when another guard is alive
    /// or sigaction fails.
    InterruptGuard();
    /// Calls release() (never throws).
    ~InterruptGuard();
    InterruptGuard(const InterruptGuard&)            = delete;
    InterruptGuard& operator=(const InterruptGuard&) = delete;

    /// 0 until the first SIGINT or SIGTERM, then its number. The pointer stays valid for the
    /// program's lifetime; read it anywhere (e.g. train::TrainRuntime::interrupt).
    const volatile std::sig_atomic_t* flag() const;

    /// Puts back the signal actions found at construction (idempotent) and returns the signal
    /// caught while the guard was installed (0: none). A signal arriving after release() gets the
    /// restored action, so none is lost between the last check and the restore.
    int release();

private:
    bool installed_ = false;
};

/// What the signal that kills (the second SIGINT or SIGTERM while an InterruptGuard is installed)
/// does first, while this object lives: writes `message` and a newline to stderr and removes the
/// file `remove_path` ("": none), e.g. around a write that the kill would cut short: say what is
/// left, remove the half-written temporary file. Without a guard, or for the first signal, it has
/// no effect. One at a time (the handler reads one static slot); not thread-safe (create it on
/// the thread that installs guards).
class KillNote {
public:
    /// A message longer than 1,023 bytes is cut there. Throws qkv::Error when another KillNote is
    /// alive or the path is longer than 4,095 bytes (PATH_MAX).
    KillNote(const std::string& message, const std::string& remove_path);
    /// Disarms (never throws).
    ~KillNote();
    KillNote(const KillNote&)            = delete;
    KillNote& operator=(const KillNote&) = delete;
};

}  // namespace qkv::util
