// `qkv generate`: continue a prompt with a language model trained by `qkv train --model lm`,
// streaming each character as it comes (runtime/generate.h generate_text: decode::generate, KV cache); the
// folder loads as any model folder does (runtime::load_model_dir).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "options.h"
#include "qkv/runtime/generate.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

struct GenerateArgs {
    std::string model = "runs/lm", prompt;
    runtime::GenerateOptions g;
    bool stats = false, no_cache = false;
};

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* c = app.add_subcommand("generate", "continue a prompt with a language model (qkv train --model lm)");
    c->add_option("--model", a->model, "model folder written by qkv train --model lm (default runs/lm)")
        ->check(non_empty_path());
    c->add_option("--prompt", a->prompt, "text to continue (preprocessed as the training text: lower case, "
                                         "letters and spaces)")
        ->required();
    c->add_option("--max-new-tokens", a->g.max_new_tokens, "characters to generate (default 100)")
        ->transform(int_range(0, 1000000));
    c->add_option("--temperature", a->g.temperature, "0: greedy (default); > 0: sample at this temperature")
        ->check(real_range(0, 100));
    c->add_option("--top-k", a->g.top_k, "sample among the k most probable tokens (default 0: all)")->transform(int_range(0, 1000000));
    c->add_option("--top-p", a->g.top_p, "sample among the most probable tokens of this mass (default 1: all)")
        ->check(real_range(0, 1, true));
    c->add_option("--seed", a->g.seed, "sampling seed (same seed, same text; default 0)")->transform(seed_value());
    c->add_flag("--no-cache", a->no_cache, "recompute the whole prefix for every token (slow; for comparison)");
    c->add_flag("--stats", a->stats, "print tokens/s on stderr at the end");
    c->callback([a] {
        if (a->g.temperature == 0 && (a->g.top_k != 0 || a->g.top_p != 1.0 || a->g.seed != 0))
            throw CLI::ValidationError("--top-k, --top-p and --seed apply to sampling: add --temperature T > 0");
        const runtime::ModelDir m = runtime::load_model_dir(a->model, /*language_model=*/true);
        a->g.use_cache = !a->no_cache;
        // The prompt is printed with the first token: a refused prompt prints nothing.
        const std::string shown = runtime::preprocess_lm_text(a->prompt);
        bool started = false;
        util::Timer t;
        runtime::generate_text(m, a->prompt, a->g, [&](const std::string& piece) {
            if (!started) std::fputs(shown.c_str(), stdout), started = true;
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);  // stream: each character as it comes
        });
        const double s = t.seconds();
        std::printf("%s\n", started ? "" : shown.c_str());
        if (a->stats)
            std::fprintf(stderr, "generated %lld tokens in %.3f s (%.1f tokens/s, %s)\n", (long long)a->g.max_new_tokens, s,
                         s > 0 ? double(a->g.max_new_tokens) / s : 0.0, a->no_cache ? "no cache" : "KV cache");
    });
});

}  // namespace
}  // namespace qkv::cli
