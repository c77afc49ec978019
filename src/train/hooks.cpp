// The progress bar and the loss plot as training hooks.
#include "qkv/train/hooks.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/plot.h"

namespace qkv::train {

ProgressHook::ProgressHook(util::ProgressOptions opt) : opt_(std::move(opt)) {
    last_line_ = now();
}

double ProgressHook::now() const {
    if (opt_.clock) return opt_.clock();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressHook::on_epoch_start(int64_t epoch, int64_t epochs, int64_t first_batch, int64_t batches) {
    // Plain lines are this hook's to time, over the whole run: a bar prints none by itself.
    util::ProgressOptions bo = opt_;
    bo.plain_interval_s = 0;
    bo.plain_every      = 0;
    bo.plain_final_line = false;
    bar_ = std::make_unique<util::ProgressBar>(batches, detail::str("epoch ", epoch + 1, "/", epochs), bo);
    if (first_batch > 0) bar_->update(first_batch);
}

void ProgressHook::refresh_fields() {
    shown_loss_ = d_loss_ / double(d_steps_);
    shown_tps_  = double(d_tokens_) / std::max(d_secs_, 1e-9);
    shown_      = true;
    d_loss_ = d_secs_ = 0;
    d_steps_ = d_tokens_ = 0;
}

// Loss and target tokens/s over about the last second of steps (the first step's at once).
void ProgressHook::on_step(const StepInfo& s) {
    d_loss_ += s.loss;
    d_secs_ += s.seconds;
    ++d_steps_;
    d_tokens_ += s.tokens;
    if (d_secs_ >= 1.0 || !shown_) refresh_fields();
    if (!bar_) return;
    bar_->update(1, {{"loss", shown_loss_}, {"tok/s", shown_tps_}});
    if (!bar_->is_tty() && opt_.plain_interval_s > 0) {
        const double t = now();
        if (t - last_line_ >= opt_.plain_interval_s) {
            bar_->print_line();
            last_line_ = t;
        }
    }
}

void ProgressHook::on_epoch_steps_done(int64_t /*epoch*/) {
    if (!bar_) return;
    // The epoch's last steps, not a window that began epochs ago (short epochs take far less than
    // a second of steps each).
    if (d_steps_ > 0) {
        refresh_fields();
        bar_->update(0, {{"loss", shown_loss_}, {"tok/s", shown_tps_}});
    }
    bar_->finish();
}

void plot_losses(const std::string& metrics_path, const std::string& png_path) {
    util::remove_stale_temp_files(png_path);  // a temporary of a write killed in an earlier run
    std::ifstream in(metrics_path);
    util::Series tr, va, st;
    tr.label = "train loss (epoch mean)";
    va.label = "validation loss";
    st.label = "train loss (window)";
    st.line_width = 1.0;
    std::string line;
    while (std::getline(in, line)) {
        try {
            auto j = nlohmann::json::parse(line);
            const std::string kind = j.value("kind", "");
            if (kind == "epoch") {
                const double x = j.value("epoch_pos", 0.0);
                if (j["train_loss"].is_number()) {
                    tr.x.push_back(x);
                    tr.y.push_back(j["train_loss"].get<double>());
                }
                if (j["val_loss"].is_number()) {
                    va.x.push_back(x);
                    va.y.push_back(j["val_loss"].get<double>());
                }
            } else if (kind == "step" && j["loss"].is_number()) {
                st.x.push_back(j.value("epoch_pos", 0.0));
                st.y.push_back(j["loss"].get<double>());
            }
        } catch (const std::exception&) {
            // not a record (a torn line): skipped
        }
    }
    if (tr.x.empty() && st.x.empty()) return;
    util::LinePlot p;
    p.title  = "qkv train";
    p.xlabel = "epoch";
    p.ylabel = "cross-entropy";
    if (!st.x.empty()) p.add(st);
    tr.marker = util::Marker::circle;
    p.add(tr);
    if (!va.x.empty()) {
        va.marker = util::Marker::square;
        p.add(va);
    }
    p.save(png_path);
}

}  // namespace qkv::train
