// `qkv translate`: English -> French with a trained model folder; sentences from the command
// line, a file, or stdin (one per line); one translation per output line.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/data/tokenizer.h"
#include "qkv/train/model_dir.h"

namespace qkv::cli {
namespace {

struct TranslateArgs {
    std::string model = "runs/qkv";
    std::vector<std::string> sentences;
    std::string file;
    int64_t beam = 0, max_len = 0, batch = 250;
    double length_penalty = -1;
    bool show_source = false, pe_quirk = false, no_unk = false;
};

void run(const TranslateArgs& a) {
    train::ModelDir m = train::load_model_dir(a.model);
    if (a.pe_quirk) {
        QKV_CHECK(m.transformer() != nullptr, "--pe-quirk applies to the Transformer only");
        m.transformer()->set_pe_position_zero_at_inference(true);
    }
    std::vector<std::string> lines = a.sentences;
    if (lines.empty()) {
        std::ifstream f;
        std::istream* in = &std::cin;
        if (!a.file.empty() && a.file != "-") {
            f.open(a.file);
            QKV_CHECK(f.good(), "translate: cannot open '", a.file, "'");
            in = &f;
        }
        std::string line;
        while (std::getline(*in, line)) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            lines.push_back(line);
        }
    }
    std::vector<std::vector<std::string>> src;
    for (const auto& l : lines) src.push_back(data::tokenize_nmt(l));
    train::TranslateOptions to;
    to.max_len        = a.max_len > 0 ? a.max_len : m.config.decode.max_len;
    to.beam           = a.beam > 0 ? a.beam : m.config.decode.beam;
    to.length_penalty = a.length_penalty >= 0 ? a.length_penalty : m.config.decode.length_penalty;
    to.batch_size     = a.batch;
    to.no_unk         = a.no_unk;
    auto hyp = train::translate_tokens(m, src, to);
    for (size_t i = 0; i < hyp.size(); ++i) {
        if (a.show_source)
            std::printf("%s => %s\n", train::join_tokens(src[i]).c_str(), train::join_tokens(hyp[i]).c_str());
        else
            std::printf("%s\n", train::join_tokens(hyp[i]).c_str());
    }
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TranslateArgs>();
    CLI::App* c = app.add_subcommand("translate", "translate English sentences with a trained model");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)");
    c->add_option("sentences", a->sentences, "sentences to translate (default: lines of --file or stdin)");
    c->add_option("--file,-f", a->file, "file with one sentence per line ('-' = stdin)");
    c->add_option("--beam", a->beam, "beam size (1 = greedy; default from config.json)")->check(int_range(1, 100));
    c->add_option("--length-penalty", a->length_penalty, "GNMT length-penalty alpha for beam search")
        ->check(real_range(0, 10));
    c->add_option("--max-len", a->max_len, "most output tokens")->check(int_range(1, 1000));
    c->add_option("--batch-size", a->batch, "sentences per decoder batch")->check(int_range(1, 100000));
    c->add_flag("--show-source", a->show_source, "print 'source => translation'");
    c->add_flag("--no-unk", a->no_unk, "never output <unk> (take the best known word instead)");
    c->add_flag("--pe-quirk", a->pe_quirk, "D2L's inference quirk: positional encoding 0 at every step");
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
