// `qkv average`: checkpoint averaging (train/average.h) into a new model folder.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/train/average.h"

namespace qkv::cli {
namespace {

struct AverageArgs {
    std::vector<std::string> models;
    std::string out;
    int64_t last = 0;
    std::string dtype = "fp32";
};

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<AverageArgs>();
    CLI::App* c = app.add_subcommand(
        "average", "average the parameters of model folders of one architecture and vocabulary into a new folder");
    c->add_option("MODEL_DIR", a->models, "model folders written by qkv train (e.g. runs of several seeds, or "
                                          "copies of one run's folder taken at different steps); with --last: "
                                          "one folder")
        ->required()
        ->check(non_empty_path());
    c->add_option("--last", a->last, "average the last K checkpoints the one MODEL_DIR kept (qkv train "
                                     "--keep-checkpoints K; default: none, the folders given)")
        ->transform(int_range(1, 1000000));
    c->add_option("--dtype", a->dtype, "how the new model.safetensors stores the parameters: fp32, or bf16 (each "
                                       "mean rounded once to bf16: half the file; one MODEL_DIR converts it; default fp32)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    c->add_option("--out", a->out, "the new model folder (must not exist, or be empty)")
        ->required()
        ->check(non_empty_path());
    c->callback([a] {
        if (a->last > 0 && a->models.size() != 1)
            throw CLI::ValidationError(detail::str("--last ", a->last, " averages one folder's kept checkpoints; got ",
                                                   a->models.size(), " folders"));
        check_out_folder("--out", a->out);  // a usage error naming --out, before any model is read
        const DType storage = a->dtype == "bf16" ? DType::bf16 : DType::f32;
        const train::AverageResult r = a->last > 0
                                           ? train::average_last_checkpoints(a->models[0], a->last, a->out, storage)
                                           : train::average_models(a->models, a->out, storage);
        std::fprintf(stderr, "averaged %lld %s (%lld tensors, %lld parameters) into %s%s\n", (long long)r.models,
                     a->last > 0 ? (r.models == 1 ? "checkpoint" : "checkpoints")
                                 : (r.models == 1 ? "model folder" : "model folders"),
                     (long long)r.tensors, (long long)r.parameters,
                     a->out.c_str(), storage == DType::bf16 ? " (stored as bf16)" : "");
    });
});

}  // namespace
}  // namespace qkv::cli
