// Checkpoint averaging (train/average.h).
#include "qkv/train/average.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "qkv/core/bf16.h"
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

namespace {

/// The output folder's checks (before anything is read), its absolute path.
fs::path check_out_dir(const std::string& out_dir, const std::vector<std::string>& inputs) {
    QKV_CHECK(!out_dir.empty(), "average: empty output folder name");
    fs::path out_path = fs::absolute(fs::path(out_dir)).lexically_normal();  // "runs/avg/" -> .../runs/avg
    if (out_path.filename().empty()) out_path = out_path.parent_path();
    std::error_code ec;
    // A link to a folder: the folder it names is filled (the rename would replace the link with a
    // folder only if it were one); a link to nothing, or to a file, is refused before any work.
    if (fs::is_symlink(out_path, ec)) {
        QKV_CHECK(fs::is_directory(out_path, ec), "average: the output folder '", out_dir,
                  "' is a symbolic link to '", fs::read_symlink(out_path, ec).string(),
                  "', which is not a folder; give a new folder, or link to an existing one");
        out_path = fs::canonical(out_path, ec);
    }
    for (const auto& d : inputs)
        QKV_CHECK(!fs::equivalent(d, out_dir, ec), "average: the output folder '", out_dir, "' is one of the inputs ('",
                  d, "'); give a new folder");
    for (size_t i = 0; i < inputs.size(); ++i)
        for (size_t j = i + 1; j < inputs.size(); ++j)
            QKV_CHECK(!fs::equivalent(inputs[i], inputs[j], ec), "average: '", inputs[j], "' is the folder '", inputs[i],
                      "' again (arguments ", i + 1, " and ", j + 1, "); each folder counts once: give it once");
    // An output inside an input folder (e.g. its checkpoints/) would be written into a model
    // folder that qkv train manages.
    const fs::path out_canon = fs::weakly_canonical(out_path, ec);
    for (const auto& d : inputs) {
        const fs::path in = fs::weakly_canonical(fs::absolute(d), ec);
        const auto [a, b] = std::mismatch(in.begin(), in.end(), out_canon.begin(), out_canon.end());
        QKV_CHECK(a != in.end() || b == out_canon.end(), "average: the output folder '", out_dir,
                  "' is inside the input folder '", d, "'; give a folder outside it");
    }
    if (fs::exists(out_dir)) {
        QKV_CHECK(fs::is_directory(out_dir), "average: '", out_dir, "' exists and is not a folder");
        QKV_CHECK(fs::is_empty(out_dir), "average: the output folder '", out_dir,
                  "' exists and is not empty; give a new folder");
    }
    return out_path;
}

/// Float64 sums of a model's parameters, checked against the template's names and shapes.
class ParameterSums {
public:
    ParameterSums(const nn::Module& base, std::string first) : params_(base.named_parameters()), first_(std::move(first)) {
        sum_.resize(params_.size());
    }
    void add(const nn::Module& m, const std::string& what) {
        const auto other = m.named_parameters();
        QKV_CHECK(other.size() == params_.size(), "cannot average '", what, "' with '", first_, "': ", other.size(),
                  " parameter tensors against ", params_.size());
        for (size_t i = 0; i < params_.size(); ++i) {
            const auto& [name, t] = other[i];
            QKV_CHECK(name == params_[i].first, "cannot average '", what, "' with '", first_, "': parameter ", i,
                      " is '", name, "' where the first has '", params_[i].first, "'");
            QKV_CHECK(t.shape() == params_[i].second.shape(), "cannot average '", what, "' with '", first_,
                      "': tensor '", name, "' has shape ", shape_str(t.shape()), " against ",
                      shape_str(params_[i].second.shape()));
            const Tensor c = t.contiguous();
            const float* p = c.data<float>();
            auto& s = sum_[i];
            s.resize(size_t(c.numel()), 0.0);
            for (size_t k = 0; k < s.size(); ++k) s[k] += double(p[k]);
        }
        ++count_;
    }
    /// Writes the means into the template's parameters, rounded once to float32, or to bf16 (held
    /// exactly in the float32 parameter) for bf16 storage.
    AverageResult write_means(DType storage) {
        AverageResult r;
        r.models  = count_;
        r.tensors = int64_t(params_.size());
        for (size_t i = 0; i < params_.size(); ++i) {
            Tensor t = params_[i].second;
            QKV_CHECK(t.is_contiguous(), "average: parameter '", params_[i].first, "' is not contiguous");
            float* p = t.data<float>();
            for (size_t k = 0; k < sum_[i].size(); ++k) {
                const double mean = sum_[i][k] / double(count_);
                p[k] = storage == DType::bf16 ? bf16_to_float(bf16_bits(mean)) : float(mean);
            }
            r.parameters += t.numel();
        }
        return r;
    }

private:
    std::vector<std::pair<std::string, Tensor>> params_;
    std::vector<std::vector<double>> sum_;
    std::string first_;
    int64_t count_ = 0;
};

/// The new folder: `first`'s configuration and vocabulary files, the averaged model, written as
/// out_path.tmp.<pid> and renamed into place.
void write_folder(const std::string& first, const ModelDir& base, const std::vector<std::string>& inputs,
                  const fs::path& out_path, DType storage) {
    std::error_code ec;
    // Folders of averages into the same name that were killed (out_dir.tmp.<pid>, no such process
    // now) go first; a live process's is left to it.
    for (const auto& stale : util::stale_temp_paths(out_path.string())) fs::remove_all(stale);
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
        meta["qkv.averaged_from"] = nlohmann::json(inputs).dump();
        save_model(in_dir(tmp, "model.safetensors"), *base.model, meta, storage);
        // Empty when checked before; another process may have filled it since (a second average
        // into the same --out): rename(2) replaces only an empty folder, so the check is the rename.
        QKV_CHECK(util::rename_folder_into_place(tmp, out_path.string()), "the output folder '", out_path.string(),
                  "' was filled by another process while this one averaged; nothing was written");
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
}

/// Step of a kept checkpoint's file name, or -1 when the name is not one.
int64_t kept_step(const std::string& name) {
    const std::string pre = "model-step-", post = ".safetensors";
    if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
        name.compare(name.size() - post.size(), post.size(), post) != 0)
        return -1;
    const std::string digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoll(digits);
}

}  // namespace

std::string kept_checkpoint_path(const std::string& model_dir, int64_t step) {
    char name[64];
    std::snprintf(name, sizeof name, "model-step-%09lld.safetensors", (long long)step);
    return (fs::path(model_dir) / "checkpoints" / name).string();
}

bool is_kept_checkpoint_name(const std::string& filename) { return kept_step(filename) >= 0; }

std::vector<std::string> kept_checkpoints(const std::string& model_dir) {
    std::vector<std::pair<int64_t, std::string>> found;
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(model_dir) / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
        const int64_t step = kept_step(it->path().filename().string());
        if (step >= 0 && it->is_regular_file(ec)) found.emplace_back(step, it->path().string());
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> out;
    for (auto& f : found) out.push_back(std::move(f.second));
    return out;
}

void prune_kept_checkpoints(const std::string& model_dir, int64_t keep) {
    const auto kept = kept_checkpoints(model_dir);
    for (size_t i = 0; i + size_t(std::max<int64_t>(keep, 0)) < kept.size(); ++i) fs::remove(kept[i]);
}

AverageResult average_models(const std::vector<std::string>& model_dirs, const std::string& out_dir, DType storage) {
    QKV_CHECK(!model_dirs.empty(), "average: no model folder given");
    QKV_CHECK(storage == DType::f32 || storage == DType::bf16, "average: storage must be float32 or bfloat16, got ",
              dtype_name(storage));
    const fs::path out_path = check_out_dir(out_dir, model_dirs);
    // The first folder is the template: its model is loaded fully (load_model_dir's checks), and
    // its parameters receive the mean.
    const std::string& first = model_dirs.front();
    ModelDir base = load_model_dir(first);
    ParameterSums sums(*base.model, first);
    sums.add(*base.model, first);
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
        sums.add(*m.model, dir);
    }
    const AverageResult r = sums.write_means(storage);
    write_folder(first, base, model_dirs, out_path, storage);
    return r;
}

AverageResult average_last_checkpoints(const std::string& model_dir, int64_t last, const std::string& out_dir,
                                       DType storage) {
    QKV_CHECK(last >= 1, "average: --last must be >= 1, got ", last);
    QKV_CHECK(storage == DType::f32 || storage == DType::bf16, "average: storage must be float32 or bfloat16, got ",
              dtype_name(storage));
    const auto kept = kept_checkpoints(model_dir);
    QKV_CHECK(int64_t(kept.size()) >= last, "average: --last ", last, " but '", model_dir, "' keeps ", kept.size(),
              " checkpoint", kept.size() == 1 ? "" : "s", " in ", (fs::path(model_dir) / "checkpoints").string(),
              kept.empty() ? " (train with --keep-checkpoints K to keep them)" : "");
    const std::vector<std::string> files(kept.end() - last, kept.end());
    const fs::path out_path = check_out_dir(out_dir, {model_dir});
    ModelDir base = load_model_dir(model_dir);  // the configuration, vocabularies and module
    ParameterSums sums(*base.model, model_dir);
    for (const auto& f : files) {
        load_model(f, *base.model);  // checks names, shapes and the checksum
        sums.add(*base.model, f);
    }
    const AverageResult r = sums.write_means(storage);
    write_folder(model_dir, base, files, out_path, storage);
    return r;
}

}  // namespace qkv::train
