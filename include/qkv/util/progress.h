#pragma once
// A terminal progress bar for training and decoding loops (tqdm-like, no dependencies).
// On a TTY it redraws one line with '\r' (at most every redraw_interval_s); otherwise (logs, CI)
// it prints a plain line every plain_interval_s seconds and/or every plain_every steps.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace qkv::util {

/// Extra "name=value" fields shown after the rate, in the given order (e.g. {{"loss", 2.31}}).
using ProgressFields = std::vector<std::pair<std::string, double>>;

struct ProgressOptions {
    enum class Mode { automatic, tty, plain };
    std::FILE* out  = stderr;           // where to draw
    Mode       mode = Mode::automatic;  // automatic: tty iff isatty(fileno(out))
    double redraw_interval_s = 0.1;     // TTY: at most ~10 redraws per second
    double plain_interval_s  = 10.0;    // plain: a line when this much time passed (<= 0: never)
    int64_t plain_every      = 0;       // plain: a line every this many steps (0: never)
    int bar_width            = 30;      // characters inside |...|
    /// plain: finish() prints a last line (unless the last update printed that state). false: the
    /// caller decides when lines are printed (print_line; train::ProgressHook bounds them per run).
    bool plain_final_line    = true;
    /// Seconds since an arbitrary origin; steady_clock when empty (tests inject a fake clock).
    std::function<double()> clock;
};

/// Progress over `total` steps (total <= 0: unknown; then no bar, percentage or ETA).
/// Line format: "label  45%|#############                 | 45/100 [00:12<00:15, 3.67 it/s, loss=1.23,
/// tok/s=17.2k]" (fields by format_field).
/// Not thread-safe: call from the loop's thread.
class ProgressBar {
public:
    ProgressBar(int64_t total, std::string label, ProgressOptions opt = {});
    /// Calls finish() if it was not called (never throws).
    ~ProgressBar();
    ProgressBar(const ProgressBar&)            = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    /// Advances by n steps and replaces the extra fields when `fields` is non-empty; draws if due.
    void update(int64_t n = 1, const ProgressFields& fields = {});
    /// Draws the final state (TTY: ends the line with '\n'; plain: one last line unless
    /// plain_final_line is false). Idempotent.
    void finish();
    /// Draws the current state now: a plain line, or the TTY line redrawn in place.
    void print_line();

    int64_t count() const { return count_; }
    bool is_tty() const { return tty_; }
    /// The status line for the current state at `elapsed_s` seconds (no '\r', no newline).
    std::string render(double elapsed_s) const;

private:
    double now() const;
    void draw(double elapsed_s, bool final);

    int64_t total_;
    std::string label_;
    ProgressOptions opt_;
    bool tty_;
    int64_t count_ = 0;
    ProgressFields fields_;
    double start_;
    double last_draw_      = -1e300;
    int64_t last_draw_cnt_ = 0;
    bool finished_ = false;
};

/// "MM:SS", or "H:MM:SS" from one hour on (negative or non-finite: "?").
std::string format_duration(double seconds);

/// A field's value as the bar shows it: 4 significant digits below 10,000 ("1.235", "9876"), then
/// with a k or M suffix and one decimal ("17.2k", "172.3k", "3.5M"), never in exponent form.
std::string format_field(double value);

}  // namespace qkv::util
