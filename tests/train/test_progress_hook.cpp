// ProgressHook (train/hooks.h) on a fake clock and made-up steps (no training, no wall clock): an
// epoch's last line shows that epoch's loss however short its epochs are, and plain lines (not a
// terminal) come at most once per plain_interval_s over the whole run, not once per epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "qkv/train/hooks.h"
#include "support/capture_file.h"

namespace qkv::test {
namespace {

using train::ProgressHook;
using train::StepInfo;
using util::ProgressOptions;


/// Runs `epochs` epochs of `batches` steps on the hook; each step advances the clock `t` by
/// `step_s` seconds, reports that as its time, and has loss `loss(epoch)` and 100 target tokens.
template <class Loss>
void run_epochs(ProgressHook& hook, double& t, int64_t epochs, int64_t batches, double step_s, Loss loss) {
    int64_t step = 0;
    for (int64_t e = 0; e < epochs; ++e) {
        hook.on_epoch_start(e, epochs, 0, batches);
        for (int64_t b = 0; b < batches; ++b) {
            t += step_s;
            StepInfo s;
            s.step = ++step, s.epoch = e, s.batch = b, s.batches = batches;
            s.loss = loss(e), s.tokens = 100, s.seconds = step_s;
            hook.on_step(s);
        }
        hook.on_epoch_steps_done(e);
    }
}

/// The lines of `s` split at '\n' and '\r' (a terminal's redraws), empty ones dropped.
std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == '\n' || c == '\r') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

// Epochs of 2 steps of 10 ms: a window of one second of steps spans 50 epochs. Each epoch's final
// line (the terminal's bar at its end) must show that epoch's loss, not one from 40 epochs earlier.
TEST(ProgressHook, EpochEndShowsThatEpochsLoss) {
    Capture cap;
    double t = 0;
    ProgressOptions o;
    o.out   = cap.f;
    o.mode  = ProgressOptions::Mode::tty;
    o.clock = [&t] { return t; };
    ProgressHook hook(o);
    run_epochs(hook, t, 100, 2, 0.01, [](int64_t e) { return 3.0 - 0.02 * double(e); });
    // A terminal ends each epoch's bar with '\n': the text before it is that epoch's last draw.
    const std::string s = cap.text();
    std::vector<std::string> finals;
    for (size_t at = 0, nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) {
        const size_t cr = s.rfind('\r', nl);
        finals.push_back(s.substr(cr + 1, nl - cr - 1));
    }
    ASSERT_EQ(finals.size(), 100u) << s;
    for (int64_t e : {0, 1, 49, 91, 99}) {
        char want[32];
        std::snprintf(want, sizeof want, "loss=%.4g", 3.0 - 0.02 * double(e));
        EXPECT_NE(finals[size_t(e)].find(want), std::string::npos) << "epoch " << e + 1 << ": " << finals[size_t(e)];
    }
    // 100 tokens in 10 ms: 10k target tokens/s, written as such
    EXPECT_NE(finals.back().find("tok/s=10.0k"), std::string::npos) << finals.back();
}

// Not a terminal: 100 epochs in 8 s print no bar line (the interval is 10 s), not 100 or 200.
TEST(ProgressHook, PlainLinesAtMostOncePerIntervalOverTheRun) {
    Capture cap;
    double t = 0;
    ProgressOptions o;
    o.out              = cap.f;
    o.mode             = ProgressOptions::Mode::plain;
    o.plain_interval_s = 10;
    o.clock            = [&t] { return t; };
    {
        ProgressHook hook(o);
        run_epochs(hook, t, 100, 2, 0.04, [](int64_t) { return 2.0; });
    }
    EXPECT_EQ(cap.text(), "");
}

// 100 epochs of 1 s each: a line every 10 s of the run (10 lines), each with its epoch's label.
TEST(ProgressHook, PlainLinesEveryIntervalAcrossEpochs) {
    Capture cap;
    double t = 0;
    ProgressOptions o;
    o.out              = cap.f;
    o.mode             = ProgressOptions::Mode::plain;
    o.plain_interval_s = 10;
    o.clock            = [&t] { return t; };
    {
        ProgressHook hook(o);
        run_epochs(hook, t, 100, 4, 0.25, [](int64_t e) { return 5.0 - 0.01 * double(e); });
    }
    const std::vector<std::string> lines = lines_of(cap.text());
    ASSERT_EQ(lines.size(), 10u) << cap.text();
    EXPECT_EQ(lines[0].rfind("epoch 10/100 100% 4/4 [", 0), 0u) << lines[0];
    EXPECT_EQ(lines[9].rfind("epoch 100/100 100% 4/4 [", 0), 0u) << lines[9];
    EXPECT_NE(lines[9].find("tok/s=400]"), std::string::npos) << lines[9];
}

// plain_interval_s <= 0: no plain lines at all.
TEST(ProgressHook, PlainLinesOff) {
    Capture cap;
    double t = 0;
    ProgressOptions o;
    o.out              = cap.f;
    o.mode             = ProgressOptions::Mode::plain;
    o.plain_interval_s = 0;
    o.clock            = [&t] { return t; };
    {
        ProgressHook hook(o);
        run_epochs(hook, t, 3, 4, 30, [](int64_t) { return 1.0; });
    }
    EXPECT_EQ(cap.text(), "");
}

}  // namespace
}  // namespace qkv::test
