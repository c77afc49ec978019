// `qkv score`: sacreBLEU's BLEU and chrF2 (qkv's implementation, decode/sacrebleu.h) of a file of
// hypotheses against a file of references, line by line: scores another system's output (e.g.
// bench/torch_real_translator.py's) exactly as `qkv eval` scores qkv's (issue 45 item 6).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/data/text.h"
#include "qkv/decode/sacrebleu.h"
#include "qkv/util/atomic_file.h"

namespace qkv::cli {
namespace {

struct ScoreArgs {
    std::string hyp_file, ref_file, json_out;
};

void run(const ScoreArgs& a) {
    check_output_file("--json", a.json_out);
    const data::ParallelLines pl = data::read_parallel_lines(a.hyp_file, a.ref_file, "--hyp-file", "--ref-file");
    std::printf("%zu hypotheses of %s against %s\n", pl.source.size(), a.hyp_file.c_str(), a.ref_file.c_str());
    nlohmann::json j = print_standard_scores(pl.source, pl.reference, "on the lines as they are: detokenized text");
    if (a.json_out.empty()) return;
    j["hyp_file"] = a.hyp_file, j["ref_file"] = a.ref_file, j["segments"] = pl.source.size();
    util::write_file_atomic(a.json_out, [&](util::FileSink& f) { f.write(j.dump(2) + "\n"); });
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<ScoreArgs>();
    CLI::App* c = app.add_subcommand("score", "sacreBLEU BLEU and chrF2 of a hypothesis file against a reference "
                                              "file (line by line, detokenized text)");
    c->add_option("--hyp-file", a->hyp_file, "hypotheses, one per line")->required()->check(non_empty_path());
    c->add_option("--ref-file", a->ref_file, "references, line i for hypothesis i")->required()->check(non_empty_path());
    c->add_option("--json", a->json_out, "write the scores as JSON to this file (default: none)")->check(non_empty_path());
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
