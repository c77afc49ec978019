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
};

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<AverageArgs>();
    CLI::App* c = app.add_subcommand(
        "average", "average the parameters of model folders of one architecture and vocabulary into a new folder");
    c->add_option("MODEL_DIR", a->models, "model folders written by qkv train (e.g. runs of several seeds, or "
                                          "copies of one run's folder taken at different steps)")
        ->required()
        ->check(non_empty_path());
    c->add_option("--out", a->out, "the new model folder (must not exist, or be empty)")
        ->required()
        ->check(non_empty_path());
    c->callback([a] {
        const train::AverageResult r = train::average_models(a->models, a->out);
        std::fprintf(stderr, "averaged %lld model folders (%lld tensors, %lld parameters) into %s\n",
                     (long long)r.models, (long long)r.tensors, (long long)r.parameters, a->out.c_str());
    });
});

}  // namespace
}  // namespace qkv::cli
