// `qkv info`: what a model folder or checkpoint holds: configuration, training progress,
// parameter names and shapes.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/runtime/checkpoint.h"
#include "qkv/runtime/model_dir.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct InfoArgs {
    std::string path = "runs/qkv";
    bool params = true;
};

void print_tensors(const std::string& file) {
    io::SafeTensorsFile f(file);
    int64_t total = 0;
    for (const auto& e : f.entries()) {
        std::string shape;
        for (size_t i = 0; i < e.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(e.shape[i]);
        std::printf("  %-48s %-4s (%s)\n", e.name.c_str(), e.dtype.c_str(), shape.c_str());
        total += e.numel();
    }
    std::printf("  %zu tensors, %lld elements\n", f.entries().size(), (long long)total);
}

/// A file that does not start like a safetensors file (an 8-byte header length, then the JSON
/// header's '{'), such as fra.txt, is named as what it is not rather than as a damaged checkpoint; a
/// truncated or damaged safetensors file is left to read_checkpoint_metadata's messages.
void check_safetensors(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char b[9]       = {};
    const bool read = bool(f.read(b, 9));
    QKV_CHECK(read && b[8] == '{', "'", path, "' is not a safetensors file (qkv info reads a model folder, or a "
              ".safetensors checkpoint or model file)");
}

void run(const InfoArgs& a) {
    QKV_CHECK(fs::exists(a.path), runtime::missing_model_folder_message(a.path), "; info also reads a .safetensors file");
    if (fs::is_directory(a.path) && runtime::model_dir_kind(a.path) == runtime::ModelKind::lm) {
        // config.json, vocab.txt, weights: checked
        const runtime::ModelDir m = runtime::load_model_dir(a.path, /*language_model=*/true);
        std::printf("language model folder %s (qkv generate reads it)\n%s\n", a.path.c_str(),
                    runtime::to_json(m.config).dump(2).c_str());
        const std::string ckpt = (fs::path(a.path) / "checkpoint.safetensors").string();
        if (fs::exists(ckpt)) {
            auto meta = runtime::read_checkpoint_metadata(ckpt);
            std::printf("checkpoint: step %s\n", meta["qkv.step"].c_str());
        }
        std::printf("vocabulary: %lld characters; %lld parameters\n", (long long)m.tgt_vocab.size(),
                    (long long)m.lm->num_parameters());
        if (a.params) print_tensors((fs::path(a.path) / "model.safetensors").string());
        std::printf("check: the folder loads (config.json, vocab.txt and the weights agree)\n");
        return;
    }
    if (fs::is_directory(a.path)) {
        const runtime::RunConfig cfg = runtime::load_model_dir_config(a.path);
        std::printf("model folder %s\nlanguages: %s\nconfig.json:\n%s\n", a.path.c_str(),
                    runtime::language_pair(cfg.data).c_str(), runtime::to_json(cfg).dump(2).c_str());
        const std::string ckpt = (fs::path(a.path) / "checkpoint.safetensors").string();
        if (fs::exists(ckpt)) {
            auto m = runtime::read_checkpoint_metadata(ckpt);
            // qkv.epoch counts from 0 (train prints epochs from 1); qkv.train_seconds is stored exactly.
            char secs[32] = "?";
            try {
                std::snprintf(secs, sizeof secs, "%.1f", std::stod(m["qkv.train_seconds"]));
            } catch (const std::exception&) {
            }
            std::printf("checkpoint: step %s, %s s of training (epoch index %s from 0, batch %s within it)\n",
                        m["qkv.step"].c_str(), secs, m["qkv.epoch"].c_str(), m["qkv.batch"].c_str());
        }
        const std::string model = (fs::path(a.path) / "model.safetensors").string();
        if (!fs::exists(model)) {
            // A run in progress has its checkpoint before its final model; otherwise nothing to load.
            QKV_CHECK(fs::exists(ckpt), "'", model, "' not found and no checkpoint.safetensors: nothing to "
                      "translate with (train first, or check the folder)", runtime::replaced_run_note(a.path));
            std::printf("model.safetensors: not written yet (training in progress or stopped before the end; "
                        "qkv train --resume --out %s continues)\n", shell_quote(a.path).c_str());
            return;
        }
        runtime::read_checkpoint_metadata(model, "model file");  // validates and checks the checksum
        if (a.params) {
            std::printf("model.safetensors:\n");
            print_tensors(model);
        }
        // config.json against the configuration stored with the weights (an edit after training).
        const auto arch = runtime::check_architecture(model, cfg);
        using S         = runtime::Consistency::State;
        if (arch.state == S::consistent)
            std::printf("consistency: config.json matches the configuration stored in model.safetensors\n");
        else if (arch.state == S::no_record)
            std::printf("consistency: not checked (model.safetensors stores no configuration: a folder of an "
                        "older qkv)\n");
        else {
            std::printf("consistency: INCONSISTENT: config.json differs from the configuration stored in "
                        "model.safetensors at training time:\n");
            for (const auto& d : arch.differences) std::printf("  %s (config.json vs model.safetensors)\n", d.c_str());
        }
        // The same checks translate and eval run (vocabularies, SentencePiece files, shapes).
        runtime::load_model_dir(a.path);
        std::printf("check: the folder loads (config.json, vocabularies and model.safetensors agree)\n");
        return;
    }
    check_safetensors(a.path);
    auto m = runtime::read_checkpoint_metadata(a.path);
    const auto cfg = m.find("qkv.config");
    const nlohmann::json config = cfg == m.end() ? nlohmann::json()
                                                 : runtime::parse_metadata_json<nlohmann::json>(a.path, cfg->first,
                                                                                              cfg->second);
    std::printf("%s\nmetadata:\n", a.path.c_str());
    for (auto& [k, v] : m)
        if (k != "qkv.config") std::printf("  %s = %s\n", k.c_str(), v.c_str());
    if (cfg != m.end()) std::printf("config:\n%s\n", config.dump(2).c_str());
    if (a.params) print_tensors(a.path);
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<InfoArgs>();
    CLI::App* c = app.add_subcommand("info", "show a model folder's or checkpoint's configuration and tensors");
    // Two options on one value, so that an empty one is named as given: "PATH: empty path".
    CLI::Option* path = c->add_option("PATH", a->path, "model folder or .safetensors file (default runs/qkv)")
                            ->check(non_empty_path());
    c->add_option("--model", a->path, "the same as PATH (default runs/qkv)")->check(non_empty_path())->excludes(path);
    c->add_flag("!--no-params", a->params, "do not list the tensors");
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
