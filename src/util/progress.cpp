// ProgressBar (util/progress.h): rendering is a pure function of (count, fields, elapsed) so tests
// can check it with a fake clock; draw() only decides when and how to emit it.
#include "qkv/util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

namespace qkv::util {

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const int64_t t = int64_t(s);
    const int64_t h = t / 3600, m = (t / 60) % 60, sec = t % 60;
    char buf[48];
    if (h > 0)
        std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)h, (long long)m,
                      (long long)sec);
    else
        std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)m, (long long)sec);
    return buf;
}

std::string format_field(double v) {
    char buf[48];
    const double a = std::fabs(v);
    if (!std::isfinite(v) || a < 9999.5)
        std::snprintf(buf, sizeof buf, "%.4g", v);
    else if (a < 999950.0)
        std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
    else if (a < 999950000.0)
        std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.0fM", v / 1e6);
    return buf;
}

ProgressBar::ProgressBar(int64_t total, std::string label, ProgressOptions opt)
    : total_(total), label_(std::move(label)), opt_(std::move(opt)) {
    if (opt_.mode == ProgressOptions::Mode::automatic)
        tty_ = opt_.out != nullptr && ::isatty(::fileno(opt_.out));
    else
        tty_ = opt_.mode == ProgressOptions::Mode::tty;
    start_ = now();
}

ProgressBar::~ProgressBar() {
    try {
        finish();
    } catch (...) {
    }
}

double ProgressBar::now() const {
    if (opt_.clock) return opt_.clock();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string ProgressBar::render(double elapsed) const {
    std::ostringstream os;
    if (!label_.empty()) os << label_ << ' ';
    if (total_ > 0) {
        const double frac = std::min(1.0, std::max(0.0, double(count_) / double(total_)));
        char pct[8];
        std::snprintf(pct, sizeof pct, "%3d%%", int(frac * 100.0));
        os << pct;
        if (tty_) {
            const int filled = int(frac * opt_.bar_width);
            os << '|' << std::string(size_t(filled), '#')
               << std::string(size_t(opt_.bar_width - filled), ' ') << '|';
        }
        os << ' ' << count_ << '/' << total_;
    } else {
        os << count_;
    }
    const double rate = elapsed > 0 ? double(count_) / elapsed : 0.0;
    os << " [" << format_duration(elapsed);
    if (total_ > 0) os << '<' << (rate > 0 ? format_duration((total_ - count_) / rate) : "?");
    char r[32];
    if (rate >= 1.0 || rate == 0.0)
        std::snprintf(r, sizeof r, ", %.2f it/s", rate);
    else
        std::snprintf(r, sizeof r, ", %.2f s/it", 1.0 / rate);
    os << r;
    for (const auto& [name, value] : fields_) {
        os << ", " << name << '=' << format_field(value);
    }
    os << ']';
    return os.str();
}

void ProgressBar::draw(double elapsed, bool final) {
    if (opt_.out == nullptr) return;
    const std::string line = render(elapsed);
    if (tty_)
        std::fprintf(opt_.out, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
    else
        std::fprintf(opt_.out, "%s\n", line.c_str());
    std::fflush(opt_.out);
    last_draw_     = elapsed;
    last_draw_cnt_ = count_;
}

void ProgressBar::update(int64_t n, const ProgressFields& fields) {
    if (finished_) return;
    count_ += n;
    if (!fields.empty()) fields_ = fields;
    const double elapsed = now() - start_;
    if (tty_) {
        if (elapsed - last_draw_ >= opt_.redraw_interval_s) draw(elapsed, false);
        return;
    }
    const bool by_steps =
        opt_.plain_every > 0 && count_ / opt_.plain_every != last_draw_cnt_ / opt_.plain_every;
    const bool by_time = opt_.plain_interval_s > 0 &&
                         elapsed - std::max(last_draw_, 0.0) >= opt_.plain_interval_s;
    if (by_steps || by_time) draw(elapsed, false);
}

void ProgressBar::print_line() {
    if (!finished_) draw(now() - start_, false);
}

void ProgressBar::finish() {
    if (finished_) return;
    finished_ = true;
    if (!tty_ && !opt_.plain_final_line) return;
    // Plain mode: the last update may have printed this very count already (a timed line at 100 %).
    if (!tty_ && last_draw_cnt_ == count_ && last_draw_ > -1e300) return;
    draw(now() - start_, true);
}

}  // namespace qkv::util
