// util::InterruptGuard: the first SIGINT/SIGTERM is recorded, not fatal; the second kills, after
// carrying out the KillNote armed then (its line on stderr, its file removed); release restores
// the earlier actions; a signal ignored at construction stays ignored. While a guard is alive the
// test's own thread blocks both signals (only the guard's sink thread takes them), so they are
// sent to the process with kill() and the test waits for the flag. The kills run in death tests
// ("threadsafe": a fresh process, as the guard's threads and OpenMP's do not survive fork()).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "qkv/core/error.h"
#include "qkv/util/interrupt.h"

namespace qkv::util {
namespace {

using Handler = void (*)(int);

/// Sends `sig` to the process and waits for `flag` to become nonzero (polling; 120 s bound a
/// failure only); returns it.
int send_and_wait(int sig, const volatile std::sig_atomic_t* flag) {
    EXPECT_EQ(kill(getpid(), sig), 0);
    for (int i = 0; i < 120000 && *flag == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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

TEST(InterruptGuard, FirstSignalSetsTheFlag) {
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
        EXPECT_EQ(g.release(), sig);
        EXPECT_FALSE(blocked_here(SIGINT));
        EXPECT_FALSE(blocked_here(SIGTERM));
        EXPECT_EQ(current(SIGINT), earlier_handler);
        EXPECT_EQ(current(SIGTERM), earlier_handler);
        EXPECT_EQ(g.release(), sig);  // idempotent
    }
}

/// In a death test: a guard, `note` armed unless empty, two signals `first` then `second`; never
/// returns (the second kills).
[[noreturn]] void second_signal_kills(int first, int second, const char* note, const std::string& path) {
    InterruptGuard g;
    std::unique_ptr<KillNote> armed;
    if (note[0]) armed = std::make_unique<KillNote>(note, path);
    if (send_and_wait(first, g.flag()) != first) std::_Exit(3);
    kill(getpid(), second);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(4);  // not killed
}

TEST(InterruptGuard, TheSecondSignalKills) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(second_signal_kills(SIGINT, SIGINT, "", ""), testing::KilledBySignal(SIGINT), "");
    EXPECT_EXIT(second_signal_kills(SIGTERM, SIGINT, "", ""), testing::KilledBySignal(SIGINT), "");
    EXPECT_EXIT(second_signal_kills(SIGINT, SIGTERM, "", ""), testing::KilledBySignal(SIGTERM), "");
    // Without an armed note the kill still says why (it was silent between the notes).
    EXPECT_EXIT(second_signal_kills(SIGINT, SIGINT, "", ""), testing::KilledBySignal(SIGINT),
                "qkv: interrupted again: stopping at once \\(every file is written to a temporary name");
}

TEST(InterruptGuard, TheSecondSignalCarriesOutTheArmedKillNote) {
    // A kill during a write: the note's line on stderr, the half-written file removed. The file is
    // this process's (its pid in the name: two runs at once do not share it); the death test's
    // process runs this test again from the start and makes the same file, so it takes the name
    // from the environment, where this process leaves it. (The temporary folder, not the build
    // tree, so the binary also runs where its build tree is absent.)
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    constexpr const char* kFileVar = "QKV_TEST_KILLNOTE_FILE";
    if (!std::getenv(kFileVar)) {
        const std::string own = (std::filesystem::temp_directory_path() /
                                 ("qkv_killnote_test_" + std::to_string(getpid()) + ".safetensors.tmp.1"))
                                    .string();
        ASSERT_EQ(setenv(kFileVar, own.c_str(), 1), 0);
    }
    const std::string path = std::getenv(kFileVar);
    std::ofstream(path) << "half a checkpoint";
    ASSERT_TRUE(std::filesystem::exists(path));
    EXPECT_EXIT(second_signal_kills(SIGINT, SIGINT, "qkv: interrupted while writing; x still holds step 7", path),
                testing::KilledBySignal(SIGINT), "qkv: interrupted while writing; x still holds step 7");
    EXPECT_FALSE(std::filesystem::exists(path));
    std::filesystem::remove(path);
    unsetenv(kFileVar);
}

TEST(KillNote, OneAtATimeAndNoEffectWithoutASecondSignal) {
    EXPECT_THROW(KillNote("a path too long", std::string(5000, 'x')), Error);
    {
        KillNote a("first", "");
        EXPECT_THROW(KillNote("second", ""), Error);
    }
    KillNote b(std::string(5000, 'm'), "");  // fine once the first is gone; a long message is cut
    // armed, and one signal: only the flag
    InterruptGuard g;
    EXPECT_EQ(send_and_wait(SIGTERM, g.flag()), SIGTERM);
    EXPECT_EQ(g.release(), SIGTERM);
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
    // Discarded by the kernel. Were it caught, the handler would have stored it by the time kill
    // returns (POSIX delivers a signal a thread sends itself, unblocked here, before kill returns)
    // or, if another thread took it, before the SIGTERM below (pending signals are delivered lowest
    // number first), and the flag keeps the first signal.
    ASSERT_EQ(kill(getpid(), SIGINT), 0);
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
