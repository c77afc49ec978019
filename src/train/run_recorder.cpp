// A run's files: checkpoints with kill notes, metrics.jsonl records, the resume.
#include "qkv/train/run_recorder.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/train/average.h"
#include "qkv/train/trainer.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/interrupt.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

/// Whether `r` is the epoch record of a run stopped inside that epoch.
template <class Json>
bool is_partial_epoch(const Json& r) {
    return r.value("kind", "") == "epoch" && r.value("partial", false);
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

MetricsRecord json_number(double v) { return std::isfinite(v) ? MetricsRecord(v) : MetricsRecord(nullptr); }

MetricsRecord val_record(int64_t step, double epoch_pos, double train_seconds) {
    return MetricsRecord{{"kind", "val"}, {"step", step}, {"epoch_pos", json_number(epoch_pos)},
                         {"val_loss", nullptr}, {"train_seconds", json_number(train_seconds)}};
}

MetricsRecord epoch_record(const EpochRecord& r, double epoch_pos) {
    return MetricsRecord{{"kind", "epoch"},
                         {"epoch", r.epoch},
                         {"epoch_pos", json_number(epoch_pos)},
                         {"step", r.step},
                         {"train_loss", json_number(r.train_loss)},
                         {"val_loss", nullptr},
                         {"train_seconds", json_number(r.train_seconds)},
                         {"tokens_per_s", json_number(r.tokens_per_s)},
                         {"partial", r.partial}};
}

namespace {

/// A record's "step" (`missing` when it has none); throws std::runtime_error when it is not an
/// integer: converting a huge float such as 4.9e63 to int64_t is undefined behaviour
/// (found by tests/fuzz/fuzz_metrics).
int64_t step_of(const nlohmann::json& j, int64_t missing) {
    const auto it = j.find("step");
    if (it == j.end()) return missing;
    if (!it->is_number_integer()) throw std::runtime_error("\"step\" is not an integer");
    return it->get<int64_t>();
}

}  // namespace

MetricsTruncation truncate_metrics_text(const std::string& text, int64_t step) {
    MetricsTruncation t;
    std::istringstream in(text);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        try {
            auto j = nlohmann::json::parse(line);
            if (!j.is_object()) throw std::runtime_error("not an object");
            if (step_of(j, 0) > step || is_partial_epoch(j)) continue;
        } catch (const std::exception&) {
            if (t.bad_lines++ == 0) t.first_bad = n;
            continue;
        }
        t.kept += line;
        t.kept += '\n';
    }
    return t;
}

std::vector<MetricsRecord> missing_records(const std::string& metrics_text, const TrainingProgress& p,
                                           const std::string& ckpt_path) {
    std::vector<MetricsRecord> missing;
    if (p.pending_records.empty()) return missing;
    const MetricsRecord pending =
        parse_metadata_json<MetricsRecord>(ckpt_path, "qkv.pending_records", p.pending_records);
    QKV_CHECK(pending.is_array(), "checkpoint '", ckpt_path, "': metadata 'qkv.pending_records' is not a JSON array");
    std::set<std::string> have;
    std::istringstream in(metrics_text);
    for (std::string line; std::getline(in, line);) {
        try {
            auto j = nlohmann::json::parse(line);
            if (j.is_object() && step_of(j, -1) == p.step) have.insert(j.value("kind", ""));
        } catch (const std::exception&) {
            // a torn line (or not an object): not a record
        }
    }
    for (auto& r : pending)
        if (r.is_object() && !have.count(r.value("kind", ""))) missing.push_back(r);
    return missing;
}

bool has_missing_records(const std::string& out_dir, const TrainingProgress& p) {
    const fs::path dir(out_dir);
    return !missing_records(read_text((dir / "metrics.jsonl").string()), p, (dir / "checkpoint.safetensors").string())
                .empty();
}

RunRecorder::RunRecorder(std::string out_dir, std::FILE* log, std::map<std::string, std::string> metadata,
                         bool writes, int64_t keep_checkpoints)
    : dir_(std::move(out_dir)), writes_(writes), log_(log), metadata_(std::move(metadata)), keep_(keep_checkpoints) {
    if (dir_.empty()) return;
    ckpt_    = (fs::path(dir_) / "checkpoint.safetensors").string();
    model_   = (fs::path(dir_) / "model.safetensors").string();
    metrics_ = (fs::path(dir_) / "metrics.jsonl").string();
}

RunRecorder::~RunRecorder() {
    if (metrics_file_) std::fclose(metrics_file_);
}

void RunRecorder::start(bool resume) {
    if (!active()) return;
    fs::create_directories(dir_);
    for (const auto& p : {ckpt_, model_, metrics_}) {
        for (const auto& t : util::remove_stale_temp_files(p)) {
            ckpt_write_cut_ = ckpt_write_cut_ || p == ckpt_;
            if (log_) std::fprintf(log_, "removed %s (left by a write that was cut short)\n", t.c_str());
        }
    }
    // Temporaries of kept checkpoints (model-step-<digits>.safetensors) whose write was cut short
    // (their final name may not exist); another program's *.safetensors.tmp.N there is not ours.
    std::set<std::string> kept_bases;
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(dir_) / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const size_t at = name.rfind(".tmp.");
        if (at != std::string::npos && is_kept_checkpoint_name(name.substr(0, at)))
            kept_bases.insert((it->path().parent_path() / name.substr(0, at)).string());
    }
    for (const auto& k : kept_bases)
        for (const auto& t : util::remove_stale_temp_files(k))
            if (log_) std::fprintf(log_, "removed %s (left by a write that was cut short)\n", t.c_str());
    if (resume) return;  // resume() opens metrics.jsonl after truncating it
    for (const auto& p : {metrics_, ckpt_, model_}) fs::remove(p);
    prune_kept_checkpoints(dir_, 0);  // an earlier run's
    open_metrics();
}

TrainingProgress RunRecorder::resume(nn::Module& model, optim::Optimizer& opt, int64_t batches) {
    QKV_CHECK(!dir_.empty(), "RunRecorder::resume: no output folder");
    TrainingProgress prog = load_checkpoint(ckpt_, model, &opt);
    QKV_CHECK(prog.batch <= batches, "checkpoint '", ckpt_, "': batch ", prog.batch, " is past the ", batches,
              " batches per epoch of this data (different data or batch size?)");
    default_generator().manual_seed(prog.rng_seed);
    default_generator().set_offset(prog.rng_offset);
    if (!writes_) return prog;
    saved_step_ = prog.step;  // the checkpoint holds this state: no second write of it
    if (fs::exists(metrics_)) {
        const MetricsTruncation t = truncate_metrics_text(read_text(metrics_), prog.step);
        util::write_file_atomic(metrics_, t.kept);
        if (log_ && t.bad_lines > 0)
            std::fprintf(log_,
                         "note: %s: %lld line%s not a JSON record, dropped (line %lld first: a write cut "
                         "short, or an edit)\n",
                         metrics_.c_str(), (long long)t.bad_lines, t.bad_lines == 1 ? " is" : "s are",
                         (long long)t.first_bad);
    }
    open_metrics();
    if (log_) {
        std::fprintf(log_, "resuming from %s: epoch %lld, batch %lld, step %lld%s\n", ckpt_.c_str(),
                     (long long)prog.epoch + 1, (long long)prog.batch, (long long)prog.step,
                     ckpt_write_cut_ ? " (the write of a later checkpoint was cut short: its steps are "
                                       "trained again)"
                                     : "");
        if (!prog.has_running_sums && prog.step > 0)
            std::fprintf(log_,
                         "note: %s has no running sums (written by an older qkv): epoch %lld's train loss "
                         "and the first metrics.jsonl step record cover the resumed steps only\n",
                         ckpt_.c_str(), (long long)prog.epoch + 1);
    }
    return prog;
}

void RunRecorder::open_metrics() {
    if (metrics_file_ || !active()) return;
    metrics_file_ = std::fopen(metrics_.c_str(), "a");
    QKV_CHECK(metrics_file_, "cannot open '", metrics_, "' for writing");
}

void RunRecorder::write_step(const LoggedStep& s) {
    if (!active()) return;
    append({MetricsRecord{{"kind", "step"},
                          {"step", s.step},
                          {"epoch_pos", json_number(s.epoch_pos)},
                          {"loss", json_number(s.loss)},
                          {"lr", json_number(s.lr)},
                          {"tokens_per_s", json_number(s.tokens_per_s)},
                          {"train_seconds", json_number(s.train_seconds)}}});
}

void RunRecorder::append(const std::vector<MetricsRecord>& records) {
    if (!active()) return;
    open_metrics();
    std::string text;
    for (const auto& r : records) text += r.dump() + '\n';
    // A full disk must stop the run naming the file, not lose the records without a word.
    errno         = 0;
    const bool ok = std::fputs(text.c_str(), metrics_file_) >= 0 && std::fflush(metrics_file_) == 0;
    QKV_CHECK(ok, "cannot write '", metrics_, "': appending ", records.size(), " record(s) failed: ",
              std::strerror(errno ? errno : EIO));
}

std::vector<MetricsRecord> RunRecorder::missing_records_to_write(const TrainingProgress& p) const {
    if (!active()) return {};
    std::vector<MetricsRecord> out = missing_records(read_text(metrics_), p, ckpt_);
    std::erase_if(out, [](const MetricsRecord& r) { return is_partial_epoch(r); });
    return out;
}

bool RunRecorder::save(const TrainingProgress& p, const nn::Module& model, const optim::Optimizer& opt) {
    if (!active() || p.step == saved_step_) return false;
    const int64_t before = saved_step_;
    saved_step_ = p.step;
    // A kill (a second Ctrl-C) during a write leaves the earlier file whole: say which step it
    // holds, and remove the half-written temporary.
    {
        util::KillNote note(before < 0 ? detail::str("qkv: interrupted while writing the first checkpoint; ", ckpt_,
                                                     " is not saved")
                                       : detail::str("qkv: interrupted while writing the checkpoint; ", ckpt_,
                                                     " still holds step ", before, " (--resume continues from it)"),
                            util::atomic_temp_path(ckpt_));
        save_checkpoint(ckpt_, model, opt, p, metadata_);
    }
    {
        util::KillNote note(detail::str("qkv: interrupted while writing ", model_, "; ", ckpt_, " holds step ", p.step,
                                        " (--resume continues from it)"),
                            util::atomic_temp_path(model_));
        save_model(model_, model, metadata_);
    }
    if (keep_ > 0) {
        const std::string kept = kept_checkpoint_path(dir_, p.step);
        fs::create_directories(fs::path(kept).parent_path());
        {
            util::KillNote note(detail::str("qkv: interrupted while writing ", kept, "; ", ckpt_, " holds step ",
                                            p.step, " (--resume continues from it)"),
                                util::atomic_temp_path(kept));
            save_model(kept, model, metadata_);
        }
        prune_kept_checkpoints(dir_, keep_);
    }
    return true;
}

std::string RunRecorder::validation_kill_note(int64_t step) const {
    return active() ? detail::str("qkv: interrupted during the validation at step ", step, "; ", ckpt_, " holds step ",
                                  step, " (--resume continues from it and validates again)")
                    : detail::str("qkv: interrupted during the validation at step ", step,
                                  " (no output folder: nothing saved)");
}

}  // namespace qkv::train
