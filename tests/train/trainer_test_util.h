#pragma once
// Shared by the Trainer tests (test_trainer.cpp: fitting, files, options; test_trainer_resume.cpp:
// stops, checkpoints and resumes; test_trainer_divergence.cpp: the divergence warning and epoch
// lines): the tiny runs' options and runtime, metrics.jsonl's records, the log of a run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/train/trainer.h"

namespace qkv::test {

/// The resume and validation tests' run: 4 epochs of batches of 3, lr 0.003, label smoothing 0.1.
inline train::TrainOptions four_epochs() {
    train::TrainOptions o;
    o.epochs = 4;
    o.batch_size = 3;
    o.lr = 0.003;
    o.label_smoothing = 0.1;
    return o;
}

inline train::TrainRuntime quiet(const std::string& dir = "", bool resume = false) {
    train::TrainRuntime rt;
    rt.out_dir   = dir;
    rt.resume    = resume;
    rt.progress  = false;
    rt.log       = nullptr;
    rt.log_every = 1;
    return rt;
}

inline int64_t count_records(const std::string& dir, const std::string& kind) {
    std::ifstream in(std::filesystem::path(dir) / "metrics.jsonl");
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) n += line.find("\"kind\":\"" + kind + "\"") != std::string::npos;
    return n;
}

/// The records of metrics.jsonl, in order.
inline std::vector<nlohmann::json> records(const std::string& dir) {
    std::ifstream in(std::filesystem::path(dir) / "metrics.jsonl");
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

/// metrics.jsonl's records without their timing fields (train_seconds, tokens_per_s): what two
/// runs of the same steps must agree on.
inline std::vector<nlohmann::json> untimed_records(const std::string& dir) {
    std::vector<nlohmann::json> out = records(dir);
    for (auto& r : out) r.erase("train_seconds"), r.erase("tokens_per_s");
    return out;
}

/// What a run printed on TrainRuntime::log.
struct LogFile {
    std::FILE* f = std::tmpfile();
    ~LogFile() {
        if (f) std::fclose(f);
    }
    std::string text() const {
        std::rewind(f);
        std::string t;
        for (int ch; (ch = std::fgetc(f)) != EOF;) t += char(ch);
        return t;
    }
};

inline size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

/// (kind, step, train loss, val loss) of each "val" and "epoch" record: what two runs of the same
/// steps must agree on (their timings differ).
inline std::vector<std::string> val_and_epoch_records(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& r : records(dir))
        if (r["kind"] != "step")
            out.push_back(nlohmann::json{r["kind"], r["step"], r.value("train_loss", nlohmann::json()),
                                         r["val_loss"], r.value("partial", false)}
                              .dump());
    return out;
}

}  // namespace qkv::test
