// util::InterruptGuard: the first SIGINT/SIGTERM is recorded, not fatal, and puts both signals
// back to their default action (the second one kills); release restores the earlier actions; a
// signal ignored at construction stays ignored. Signals are sent with raise() (delivered before
// it returns).
#include <gtest/gtest.h>

#include <csignal>

#include "qkv/core/error.h"
#include "qkv/util/interrupt.h"

namespace qkv::util {
namespace {

using Handler = void (*)(int);

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
        ASSERT_EQ(std::raise(sig), 0);  // would kill the test without the guard's handler
        EXPECT_EQ(*g.flag(), sig);
        EXPECT_EQ(g_earlier_calls, 0);
        // the next SIGINT or SIGTERM gets the default action: it would end the process
        EXPECT_EQ(current(SIGINT), SIG_DFL);
        EXPECT_EQ(current(SIGTERM), SIG_DFL);
        EXPECT_EQ(g.release(), sig);
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
    ASSERT_EQ(std::raise(SIGINT), 0);
    EXPECT_EQ(*g.flag(), 0);
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_EQ(*g.flag(), SIGTERM);
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
