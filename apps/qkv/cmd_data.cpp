// `qkv data`: the split and the SentencePiece model a text-pipeline run (preset real) trains on,
// written as plain files, so that another toolkit (bench/torch_real_translator.py) trains and is
// scored on exactly the same pairs (issue 45 item 6).
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/train/run.h"
#include "qkv/util/atomic_file.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct DataArgs {
    std::string preset = "real", data, out, src_lang, tgt_lang;
    int64_t vocab_size = 0;  // 0: the preset's
    bool overwrite = false;
};

/// Writes `lines` to `path`, one per line. A sentence holding a line break would shift every line
/// after it (the files are line-aligned), so it is refused; the corpus readers split on lines, so
/// none should reach here.
void write_lines(const std::string& path, const std::vector<std::string>& lines) {
    for (size_t i = 0; i < lines.size(); ++i)
        QKV_CHECK(lines[i].find_first_of("\r\n") == std::string::npos, "qkv data: sentence ", i + 1, " for '", path,
                  "' holds a line break");
    util::write_file_atomic(path, [&](util::FileSink& f) {
        for (const auto& l : lines) {
            f.write(l);
            f.write("\n");
        }
    });
}

/// A language code becomes a file suffix: letters, digits, '-' and '_' only (no '/' or "..").
void check_language_code(const char* flag, const std::string& code) {
    for (unsigned char ch : code)
        if (!std::isalnum(ch) && ch != '-' && ch != '_')
            usage_error(detail::str(flag, " '", code, "': a language code names the files (train.<code>), so it takes ",
                                    "letters, digits, '-' and '_' only"));
}

void run(const DataArgs& a) {
    check_language_code("--src-lang", a.src_lang);
    check_language_code("--tgt-lang", a.tgt_lang);
    train::RunOverrides o;
    if (!a.data.empty()) o.set("data.path", a.data);
    if (a.vocab_size > 0) o.set("data.subword_vocab_size", a.vocab_size);
    if (!a.src_lang.empty()) o.set("data.src_lang", a.src_lang);
    if (!a.tgt_lang.empty()) o.set("data.tgt_lang", a.tgt_lang);
    train::RunConfig cfg;
    try {
        cfg = train::configure_run(a.preset, train::ModelKind::transformer, o);
    } catch (const train::ConfigError& e) {
        usage_error(e.what());  // names the flag, as qkv train's
    }
    if (cfg.data.pipeline != train::DataPipeline::text)
        usage_error(detail::str("--preset ", a.preset, ": qkv data writes the split of the text pipeline (preset real); ",
                                a.preset, " prepares its data otherwise"));
    check_out_folder("--out", a.out);
    if (fs::is_directory(a.out) && !fs::is_empty(a.out) && !a.overwrite)
        usage_error(detail::str("--out '", a.out, "' is not empty: choose another folder, or add --overwrite to replace ",
                                "the files qkv data writes there"));
    const train::TranslationData d = train::load_translation_data(cfg.data);
    std::fprintf(stderr, "data: %s\n", d.summary.c_str());
    const std::string sl = train::source_language(cfg.data), tl = train::target_language(cfg.data);
    const std::string src_ext = sl.empty() ? "src" : sl, tgt_ext = tl.empty() ? "tgt" : tl;
    QKV_CHECK(src_ext != tgt_ext, "qkv data: the source and target languages are both '", src_ext,
              "': the files would collide");
    fs::create_directories(a.out);
    const fs::path out(a.out);
    struct Split {
        const char* name;
        const std::vector<std::string>& src;
        const std::vector<std::string>& tgt;
    };
    const Split splits[] = {{"train", d.train_src_text, d.train_tgt_text},
                            {"valid", d.valid_src_text, d.valid_tgt_text},
                            {"test", d.test_src_text, d.test_ref_text}};
    for (const auto& s : splits) {
        QKV_CHECK(s.src.size() == s.tgt.size(), "qkv data: the ", s.name, " split has ", s.src.size(), " sources and ",
                  s.tgt.size(), " targets");
        write_lines((out / (std::string(s.name) + "." + src_ext)).string(), s.src);
        write_lines((out / (std::string(s.name) + "." + tgt_ext)).string(), s.tgt);
    }
    // Shared vocabulary (the real preset): one model; per-side ones would need two files.
    QKV_CHECK(d.subwords.active() && d.subwords.src == d.subwords.tgt,
              "qkv data: writes one shared SentencePiece model; this configuration has one per side");
    d.subwords.src->save((out / "spm.model").string());
    std::printf("wrote %s: train %zu, valid %zu, test %zu pairs in {train,valid,test}.{%s,%s}; spm.model (%lld "
                "pieces)\n",
                a.out.c_str(), d.train_src_text.size(), d.valid_src_text.size(), d.test_src_text.size(),
                src_ext.c_str(), tgt_ext.c_str(), (long long)d.src_vocab.size());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<DataArgs>();
    CLI::App* c = app.add_subcommand("data", "write a text-pipeline run's train/valid/test split and SentencePiece "
                                             "model as plain files (for another toolkit)");
    c->add_option("--preset", a->preset, "a preset of the text pipeline (default real)")
        ->check(CLI::IsMember(train::preset_names()));
    c->add_option("--data", a->data, "fra-eng.zip, fra.txt or a folder (default: $QKV_DATA, then "
                                     "../shared/data/fra-eng.zip), or a TSV corpus: source<TAB>target per line, "
                                     "plain or gzip")
        ->check(non_empty_path());
    c->add_option("--src-lang", a->src_lang, "source language code, the source files' suffix (default: en for "
                                             "fra-eng, else src)");
    c->add_option("--tgt-lang", a->tgt_lang, "target language code, the target files' suffix (default: fr for "
                                             "fra-eng, else tgt)");
    c->add_option("--vocab-size", a->vocab_size, "SentencePiece pieces, reserved tokens included (default: the "
                                                     "preset's, 10000 for real)")
        ->transform(int_range(8, 1000000));
    c->add_option("--out", a->out, "folder for train/valid/test.<lang> and spm.model")
        ->required()
        ->check(non_empty_path());
    c->add_flag("--overwrite", a->overwrite, "write into a non-empty --out (replacing the files qkv data writes)");
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
