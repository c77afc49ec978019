// util::InterruptGuard: the first SIGINT/SIGTERM is recorded, not fatal, and puts both signals
// back to their default action (the second one kills); release restores the earlier actions; a
// signal ignored at construction stays ignored. While a guard is alive the test's own thread
// blocks both signals (only the guard's sink thread takes them), so they are sent to the process
// with kill() and the test waits for the flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "qkv/core/error.h"
#include "qkv/util/interrupt.h"

namespace qkv::util {
namespace {

using Handler = void (*)(int);

/// Sends `sig` to the process and waits up to 5 s for `flag` to become nonzero; returns it.
int send_and_wait(int sig, const volatile std::sig_atomic_t* flag) {
    EXPECT_EQ(kill(getpid(), sig), 0);
    for (int i = 0; i < 500 && *flag == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return *flag;
}

/// True when `sig` is blocked in the calling thread.
bool blocked_here(int sig) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    return sigismember(&now, sig) == 1;
}

Handler current(int sig) {
    struct sigaction now {};
    EXPECT_EQ(sigaction(sig, nullptr, &now), 0);
    return now.sa_handler;
}

volatile std::sig_atomic_t g_earlier_calls = 0;
extern "C" void earlier_handler(int) { g_earlier_calls = g_earlier_calls + 1; }

/// Sets `sig`'s action for the test and puts the old one back at the end.
struct ScopedAction {
    int sig;
    struct sigaction old {};
    ScopedAction(int s, Handler h) : sig(s) {
        struct sigaction act {};
        act.sa_handler = h;
        sigemptyset(&act.sa_mask);
        sigaction(sig, &act, &old);
    }
    ~ScopedAction() { sigaction(sig, &old, nullptr); }
};

TEST(InterruptGuard, FirstSignalSetsTheFlagAndRestoresTheDefaultForTheNext) {
    for (int sig : {SIGINT, SIGTERM}) {
        ScopedAction si(SIGINT, earlier_handler), st(SIGTERM, earlier_handler);
        g_earlier_calls = 0;
        InterruptGuard g;
        EXPECT_EQ(*g.flag(), 0);
        EXPECT_NE(current(SIGINT), earlier_handler);
        EXPECT_NE(current(SIGINT), SIG_DFL);
        EXPECT_TRUE(blocked_here(SIGINT));  // compute threads never take the signal
        EXPECT_TRUE(blocked_here(SIGTERM));
        EXPECT_EQ(send_and_wait(sig, g.flag()), sig);  // would kill the test without the guard
        EXPECT_EQ(*g.flag(), sig);
        EXPECT_EQ(g_earlier_calls, 0);
        // the next SIGINT or SIGTERM gets the default action: it would end the process
        EXPECT_EQ(current(SIGINT), SIG_DFL);
        EXPECT_EQ(current(SIGTERM), SIG_DFL);
        EXPECT_EQ(g.release(), sig);
        EXPECT_FALSE(blocked_here(SIGINT));
        EXPECT_FALSE(blocked_here(SIGTERM));
        EXPECT_EQ(current(SIGINT), earlier_handler);
        EXPECT_EQ(current(SIGTERM), earlier_handler);
        EXPECT_EQ(g.release(), sig);  // idempotent
    }
}

TEST(InterruptGuard, ReleaseWithoutASignalRestoresTheEarlierActions) {
    ScopedAction si(SIGINT, earlier_handler), st(SIGTERM, earlier_handler);
    {
        InterruptGuard g;
        EXPECT_NE(current(SIGTERM), earlier_handler);
    }  // the destructor releases
    EXPECT_EQ(current(SIGINT), earlier_handler);
    EXPECT_EQ(current(SIGTERM), earlier_handler);
    g_earlier_calls = 0;
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_EQ(g_earlier_calls, 1);
}

TEST(InterruptGuard, AnIgnoredSignalStaysIgnored) {
    ScopedAction si(SIGINT, SIG_IGN), st(SIGTERM, earlier_handler);
    InterruptGuard g;
    EXPECT_EQ(current(SIGINT), SIG_IGN);
    EXPECT_FALSE(blocked_here(SIGINT));  // an ignored signal is left alone
    ASSERT_EQ(kill(getpid(), SIGINT), 0);  // discarded by the kernel
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(*g.flag(), 0);
    EXPECT_EQ(send_and_wait(SIGTERM, g.flag()), SIGTERM);
    EXPECT_EQ(current(SIGINT), SIG_IGN);  // not un-ignored by the handler's reset
    g.release();
    EXPECT_EQ(current(SIGINT), SIG_IGN);
}

TEST(InterruptGuard, OneGuardAtATime) {
    InterruptGuard g;
    EXPECT_THROW(InterruptGuard second, Error);
    g.release();
    InterruptGuard third;  // fine once the first is released
    EXPECT_EQ(*third.flag(), 0);
}

}  // namespace
}  // namespace qkv::util
