// Checkpoint averaging (train/average.h).
#include "qkv/train/average.h"

#include <filesystem>
#include <map>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/shape.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/util/atomic_file.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

/// The files of a model folder that define its vocabulary (the SentencePiece models when present).
constexpr const char* kVocabFiles[] = {"src_vocab.txt", "tgt_vocab.txt", "spm.model", "spm_src.model", "spm_tgt.model"};

std::string in_dir(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

void check_same_files(const std::string& first, const std::string& dir) {
    for (const char* f : kVocabFiles) {
        const std::string a = in_dir(first, f), b = in_dir(dir, f);
        const bool ha = fs::exists(a), hb = fs::exists(b);
        QKV_CHECK(ha == hb, "cannot average '", dir, "' with '", first, "': ", ha ? b : a, " does not exist but ",
                  ha ? a : b, " does (different vocabularies)");
        if (ha)
            QKV_CHECK(util::read_file(a) == util::read_file(b), "cannot average '", dir, "' with '", first,
                      "': different vocabularies: '", b, "' differs from '", a, "'");
    }
}

}  // namespace

AverageResult average_models(const std::vector<std::string>& model_dirs, const std::string& out_dir) {
    QKV_CHECK(!model_dirs.empty(), "average: no model folder given");
    QKV_CHECK(!out_dir.empty(), "average: empty output folder name");
    fs::path out_path = fs::absolute(fs::path(out_dir)).lexically_normal();  // "runs/avg/" -> .../runs/avg
    if (out_path.filename().empty()) out_path = out_path.parent_path();
    std::error_code ec;
    for (const auto& d : model_dirs)
        QKV_CHECK(!fs::equivalent(d, out_dir, ec), "average: the output folder '", out_dir, "' is one of the inputs ('",
                  d, "'); give a new folder");
    if (fs::exists(out_dir)) {
        QKV_CHECK(fs::is_directory(out_dir), "average: '", out_dir, "' exists and is not a folder");
        QKV_CHECK(fs::is_empty(out_dir), "average: the output folder '", out_dir,
                  "' exists and is not empty; give a new folder");
    }

    // The first folder is the template: its model is loaded fully (load_model_dir's checks), and
    // its parameters receive the mean.
    const std::string& first = model_dirs.front();
    ModelDir base = load_model_dir(first);
    const auto params = base.model->named_parameters();
    std::vector<std::vector<double>> sum(params.size());
    auto accumulate = [&](const nn::Module& m, const std::string& dir) {
        const auto other = m.named_parameters();
        QKV_CHECK(other.size() == params.size(), "cannot average '", dir, "' with '", first, "': ", other.size(),
                  " parameter tensors against ", params.size());
        for (size_t i = 0; i < params.size(); ++i) {
            const auto& [name, t] = other[i];
            QKV_CHECK(name == params[i].first, "cannot average '", dir, "' with '", first, "': parameter ", i, " is '",
                      name, "' where the first has '", params[i].first, "'");
            QKV_CHECK(t.shape() == params[i].second.shape(), "cannot average '", dir, "' with '", first,
                      "': tensor '", name, "' has shape ", shape_str(t.shape()), " against ",
                      shape_str(params[i].second.shape()));
            const Tensor c = t.contiguous();
            const float* p = c.data<float>();
            auto& s = sum[i];
            s.resize(size_t(c.numel()), 0.0);
            for (size_t k = 0; k < s.size(); ++k) s[k] += double(p[k]);
        }
    };
    accumulate(*base.model, first);
    for (size_t i = 1; i < model_dirs.size(); ++i) {
        const std::string& dir = model_dirs[i];
        const RunConfig cfg = load_model_dir_config(dir);
        const auto diffs = architecture_differences(base.config, cfg);
        if (!diffs.empty()) {
            std::string list;
            for (const auto& d : diffs) list += (list.empty() ? "" : "; ") + d;
            throw Error(detail::str("cannot average '", dir, "' with '", first, "': different architecture (", list, ")"));
        }
        check_same_files(first, dir);
        const ModelDir m = load_model_dir(dir);
        accumulate(*m.model, dir);
    }

    AverageResult r;
    r.models = int64_t(model_dirs.size());
    r.tensors = int64_t(params.size());
    const double n = double(model_dirs.size());
    for (size_t i = 0; i < params.size(); ++i) {
        Tensor t = params[i].second;
        QKV_CHECK(t.is_contiguous(), "average: parameter '", params[i].first, "' is not contiguous");
        float* p = t.data<float>();
        for (size_t k = 0; k < sum[i].size(); ++k) p[k] = float(sum[i][k] / n);
        r.parameters += t.numel();
    }

    // Everything goes into a temporary folder that is renamed into place at the end. Folders of
    // averages into the same name that were killed (out_dir.tmp.<digits>) are removed first.
    const std::string prefix = out_path.filename().string() + ".tmp.";
    for (fs::directory_iterator it(out_path.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
            name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
            fs::remove_all(it->path());
    }
    const std::string tmp = out_path.string() + ".tmp." + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    try {
        for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt", "spm.model", "spm_src.model",
                              "spm_tgt.model"})
            if (fs::exists(in_dir(first, f))) util::write_file_atomic(in_dir(tmp, f), util::read_file(in_dir(first, f)));
        std::map<std::string, std::string> meta = io::SafeTensorsFile(in_dir(first, "model.safetensors")).metadata();
        meta.erase("format");
        meta.erase("qkv.checksum");
        meta["qkv.averaged_from"] = nlohmann::json(model_dirs).dump();
        save_model(in_dir(tmp, "model.safetensors"), *base.model, meta);
        if (fs::exists(out_path)) fs::remove(out_path);  // empty (checked above)
        fs::rename(tmp, out_path);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    return r;
}

}  // namespace qkv::train
