// Option checks with readable bounds (options.h).
#include "options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/sacrebleu.h"
#include "qkv/ops/attention.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/train/out_folder.h"
#include "qkv/runtime/run_config.h"
#include "qkv/runtime/text.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/shell.h"

namespace qkv::cli {
namespace {

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

CLI::Validator int_range(int64_t lo, int64_t hi) {
    const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    return CLI::Validator(
        [lo, hi, range](std::string& in) -> std::string {
            // Decimal digits after an optional sign (from_chars takes '-', not '+').
            const char* b = in.data();
            const char* e = b + in.size();
            if (e - b > 1 && *b == '+' && b[1] != '-') ++b;
            int64_t v    = 0;
            const auto r = std::from_chars(b, e, v);
            if (r.ptr != e || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
                return "'" + in + "' is not " + range;
            if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
                return in + " is out of range: expected " + range;
            in = std::to_string(v);  // CLI11's conversion would read a leading 0 as octal
            return {};
        },
        "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator seed_value() {
    const std::string range = "an integer from 0 to 18446744073709551615";
    return CLI::Validator(
        [range](std::string& in) -> std::string {
            if (in.empty() || in.find_first_not_of("0123456789") != std::string::npos)
                return "'" + in + "' is not " + range;
            uint64_t v   = 0;  // digits only, so from_chars can fail only by overflowing
            const auto r = std::from_chars(in.data(), in.data() + in.size(), v);
            if (r.ec != std::errc()) return in + " is out of range: expected " + range;
            in = std::to_string(v);  // CLI11's conversion would read a leading 0 as octal
            return {};
        },
        "UINT64");
}

CLI::Validator real_range(double lo, double hi, bool lo_open) {
    const std::string range = lo_open ? "a number > " + num(lo) + " and <= " + num(hi)
                                      : "a number from " + num(lo) + " to " + num(hi);
    return CLI::Validator(
        [lo, hi, lo_open, range](std::string& in) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not " + range;
            if (!(lo_open ? v > lo : v >= lo) || !(v <= hi)) return in + " is out of range: expected " + range;
            return {};
        },
        std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]");
}

double parse_duration_or_off(const std::string& s) { return runtime::parse_duration_or_off(s); }

CLI::Validator duration_or_off() {
    return CLI::Validator(
        [](std::string& in) -> std::string {
            try {
                parse_duration_or_off(in);
            } catch (const Error& e) {
                return e.what();
            }
            return {};
        },
        "DURATION|none");
}

namespace {
const char* const kNonEmptyPath = "non-empty path";  // non_empty_path's validator name
}  // namespace

CLI::Validator non_empty_path() {
    return CLI::Validator([](std::string& in) -> std::string { return in.empty() ? "empty path" : ""; }, "",
                          kNonEmptyPath);
}

void refuse_empty_values(CLI::App& app) {
    std::vector<CLI::App*> apps{&app};
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apps.push_back(sub);
    for (CLI::App* a : apps)
        for (CLI::Option* o : a->get_options()) {
            if (o->get_items_expected_max() == 0 || o->get_positional()) continue;  // a flag or a positional
            try {
                o->get_validator(kNonEmptyPath);
                continue;  // says "empty path" itself
            } catch (const CLI::OptionNotFound&) {
            }
            // CLI11 runs an option's validators in the order added and reports the first failure:
            // the emptiness check goes in front of the first one (it cannot be inserted before it).
            const auto empty = [](std::string& in) -> std::string { return in.empty() ? "empty value" : ""; };
            try {
                CLI::Validator* first = o->get_validator(0);
                first->operation([empty, own = *first](std::string& in) {
                    std::string e = empty(in);
                    return e.empty() ? own(in) : e;
                });
            } catch (const CLI::OptionNotFound&) {  // no validator yet
                o->check(CLI::Validator(empty, ""));
            }
        }
}

std::vector<std::string> split_empty_assignments(CLI::App& app, int argc, char** argv) {
    CLI::App* sub = nullptr;  // the first word naming a subcommand
    for (int i = 1; i < argc && !sub; ++i)
        for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
            if (s->get_name() == argv[i]) sub = s;
    std::vector<std::string> out;
    bool options = true;  // before "--"
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        options = options && arg != "--";
        if (options && arg.size() > 3 && arg.compare(0, 2, "--") == 0 && arg.find('=') == arg.size() - 1) {
            const std::string name   = arg.substr(0, arg.size() - 1);
            const CLI::Option* o     = sub ? sub->get_option_no_throw(name) : nullptr;
            if (!o) o = app.get_option_no_throw(name);
            if (o && o->get_items_expected_max() > 0) {
                out.push_back(name);
                out.emplace_back();
                continue;
            }
        }
        out.push_back(arg);
    }
    return out;
}

void usage_error(const std::string& msg) { throw CLI::ValidationError(msg); }

namespace {
/// CLI11's formatter, but a switch's name without the "{false}" of its opposite's value.
class PlainSwitchFormatter : public CLI::Formatter {
public:
    std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
        std::string name = CLI::Formatter::make_option_name(opt, is_positional), out;
        int depth = 0;
        for (const char c : name) {
            depth += c == '{' ? 1 : 0;
            if (depth == 0) out += c;
            depth -= c == '}' && depth > 0 ? 1 : 0;
        }
        return out;
    }
};
}  // namespace

void plain_switch_names(CLI::App& app) {
    const auto f = std::make_shared<PlainSwitchFormatter>();
    app.formatter(f);
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->formatter(f);
}

void group_options(CLI::App* c, const std::string& group, std::initializer_list<const char*> names) {
    for (const char* name : names) c->get_option(name)->group(group);
}

std::string shell_quote(const std::string& s) { return util::shell_quote(s); }

namespace {

/// The folder of an output-folder flag as the OS will find it (train::OutFolder, as train::run
/// resolves --out): "L/../x" with L a link to a folder elsewhere is x beside that folder, not
/// beside L.
std::filesystem::path out_folder_path(const std::string& path) { return train::OutFolder(path).dir; }

/// The nearest existing ancestor of the missing folder `p` ("/" or "." when none exists).
std::filesystem::path existing_ancestor(const std::filesystem::path& p) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path up = p.parent_path();
    while (!up.empty() && !fs::exists(fs::status(up, ec))) up = up.parent_path();
    if (up.empty()) up = p.is_absolute() ? fs::path("/") : fs::path(".");
    return up;
}

}  // namespace

void check_out_folder(const std::string& flag, const std::string& path, bool write_test) {
    namespace fs = std::filesystem;
    const std::string named = flag + " '" + path + "'";
    if (path.empty()) usage_error(flag + ": empty path");
    std::error_code ec;
    const fs::path p         = out_folder_path(path);
    const fs::file_status st = fs::status(p, ec);
    if (fs::exists(st)) {
        if (!fs::is_directory(st)) usage_error(named + " is an existing file, not a folder");
        if (::access(p.c_str(), W_OK | X_OK) != 0) usage_error(named + ": the folder is not writable");
    } else {
        // The nearest existing ancestor must be a folder we can create folders in.
        const fs::path up = existing_ancestor(p);
        if (!fs::is_directory(fs::status(up, ec)))
            usage_error(named + ": '" + up.string() + "' is a file, so the folder cannot be created");
        if (::access(up.c_str(), W_OK | X_OK) != 0)
            usage_error(named + ": no permission to create it in '" + up.string() + "'");
    }
    if (write_test) test_out_folder_write(flag, path);
}

void test_out_folder_write(const std::string& flag, const std::string& path) {
    namespace fs = std::filesystem;
    const std::string named = flag + " '" + path + "'";
    std::error_code ec;
    const fs::path p = out_folder_path(path);
    if (fs::exists(fs::status(p, ec))) {
        // access() grants root everything: a probe file tells what writing there will do.
        std::string probe = (p / ".qkv-write-test-XXXXXX").string();
        const int fd      = ::mkstemp(probe.data());
        if (fd < 0) usage_error(named + ": the folder is not writable (" + std::strerror(errno) + ")");
        ::close(fd);
        ::unlink(probe.c_str());
        return;
    }
    // access() grants root everything (and /proc refuses root too): create the first missing
    // folder to see, then remove it again.
    const fs::path up = existing_ancestor(p);
    fs::path first    = p;
    while (first.has_parent_path() && first.parent_path() != up)
        first = first.parent_path();
    if (::mkdir(first.c_str(), 0777) != 0) {
        const int err = errno;
        // Made meanwhile by another process (and maybe removed again if it was a probe like this
        // one): the folder can be made.
        if (err == EEXIST) return;
        usage_error(named + ": cannot create the folder '" + first.string() + "' (" + std::strerror(err) + ")");
    }
    ::rmdir(first.c_str());
}

void check_weights_backend(const std::string& command) {
    const std::string why = ": " + command + " shows the attention weights, which only the math backend gives; use "
                            "--attention auto or math";
    if (attention_backend_override() == AttentionBackend::flash) usage_error("--attention flash" + why);
    const char* env = std::getenv("QKV_ATTENTION");
    if (attention_backend_override() == AttentionBackend::automatic && env && *env &&
        parse_attention_backend(env) == AttentionBackend::flash)
        usage_error("QKV_ATTENTION=flash" + why + " (or unset QKV_ATTENTION)");
}

void warn_if_truncated(const std::string& prefix, const std::string& what, const runtime::ModelDir& m,
                       const std::vector<std::string>& tokens) {
    const runtime::SourceNotes notes = runtime::source_notes(m, tokens);
    for (const auto& w : notes.long_words)
        std::fprintf(stderr, "%s: warning: %s: %s\n", prefix.c_str(), what.c_str(), w.c_str());
    if (!notes.cut.empty()) std::fprintf(stderr, "%s: warning: %s %s\n", prefix.c_str(), what.c_str(), notes.cut.c_str());
}

nlohmann::json print_standard_scores(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                                     const std::string& note) {
    const decode::SacreBleuScore b = decode::sacrebleu_corpus_bleu(hyps, refs);
    const decode::ChrfScore c = decode::sacrebleu_corpus_chrf(hyps, refs);
    std::printf("%s\n%s\n", decode::format_sacrebleu(b).c_str(), decode::format_chrf(c).c_str());
    std::printf("  (qkv's implementation of sacreBLEU %s's defaults; %s)\n", decode::kSacreBleuVersion, note.c_str());
    if (b.tokenized_period_lines >= 100)  // sacreBLEU's force=False warning
        std::printf("  note: %lld hypotheses end in a tokenized period (' .'), as sacreBLEU would warn\n",
                    (long long)b.tokenized_period_lines);
    const std::string impl = std::string("qkv (sacreBLEU ") + decode::kSacreBleuVersion + " defaults)";
    return {{"sacrebleu", {{"score", b.score},
                           {"counts", b.counts},
                           {"totals", b.totals},
                           {"precisions", b.precisions},
                           {"bp", b.bp},
                           {"sys_len", b.sys_len},
                           {"ref_len", b.ref_len},
                           {"signature", b.signature},
                           {"implementation", impl}}},
            {"chrf", {{"name", c.name}, {"score", c.score}, {"signature", c.signature}, {"implementation", impl}}}};
}

void check_output_file(const std::string& flag, const std::string& path) {
    if (path.empty()) return;
    if (path == "-")  // not stdout: the report is there, and the file would be named "-"
        throw CLI::ValidationError(flag + " '-': '-' is not standard output here; give a file name, or /dev/stdout");
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec))
        throw CLI::ValidationError(flag + " '" + path + "' is a folder; give a file name");
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
        throw CLI::ValidationError(flag + " '" + path + "': " +
                                   (fs::exists(parent, ec) ? "'" + parent.string() + "' is not a folder"
                                                           : "the folder '" + parent.string() + "' does not exist"));
    check_writable(flag, path);
    // Temporaries of an earlier write of this file that a kill cut short (kill -9 while eval
    // wrote): the file itself is whole (old or new), the temporary only litters the folder.
    try {
        for (const auto& t : util::remove_stale_temp_files(path))
            std::fprintf(stderr, "removed %s (left by a write that was cut short)\n", t.c_str());
    } catch (const Error& e) {
        usage_error(flag + ": " + e.what());
    }
}

void check_not_model_file(const std::string& flag, const std::string& path, const std::string& model) {
    if (path.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto canon = [&](const std::string& p) { return fs::weakly_canonical(fs::absolute(p, ec), ec); };
    const fs::path p = canon(path);
    if (p.parent_path() != canon(model)) return;
    for (const char* f : runtime::kModelDirFiles)
        if (p.filename() == f)
            usage_error(flag + " '" + path + "' is the model folder's own " + f +
                        ": give a file name outside the model's files");
}

void check_writable(const std::string& flag, const std::string& path) {
    try {
        util::check_can_write(path);
    } catch (const Error& e) {
        usage_error(flag + ": " + e.what());
    }
}

void add_decode_flags(CLI::App* c, DecodeFlags& f) {
    c->add_option("--min-len", f.min_len, "no <eos> before this many output tokens (default 0)")->transform(int_range(0, 1000));
    c->add_option("--no-repeat-ngram-size", f.no_repeat_ngram_size, "no n-gram of this size twice in an output (default 0: off)")
        ->transform(int_range(0, 1000));
    c->add_option("--repetition-penalty", f.repetition_penalty,
                  "CTRL penalty on the logits of tokens already output (default 1: off)")
        ->check(real_range(0, 100, true));
    c->add_option("--coverage-penalty", f.coverage_penalty,
                  "GNMT coverage penalty beta: ranks down hypotheses that leave source words unattended (default 0: off)")
        ->check(real_range(0, 100));
    c->add_option("--prefix", f.prefix, "target words every translation starts with (forced; default: none)");
    c->add_flag("--sampling", f.sampling, "sample each token instead of searching (default: greedy or beam search)");
    c->add_option("--temperature", f.temperature, "sampling temperature (default 1)")->check(real_range(0, 100, true));
    c->add_option("--top-k", f.top_k, "sample among the k most probable tokens (default 0: all)")->transform(int_range(0, 1000000));
    c->add_option("--top-p", f.top_p, "sample among the most probable tokens of this mass (default 1: all)")->check(real_range(0, 1, true));
    c->add_option("--seed", f.seed, "sampling seed (same seed, same output; default 0)")->transform(seed_value());
    c->add_option("--batch-type", f.batch_type, "what --batch-size counts: examples (sentences) or tokens (source "
                                                "tokens with padding; default examples)")
        ->check(CLI::IsMember({"examples", "tokens"}));
    c->add_option("--compute-type", f.compute_type,
                  "fp32 (default); bf16: matrix products with bf16-rounded weights and activations, fp32 "
                  "accumulation (oneDNN's bf16 matmul where AMX is usable or AVX-512-BF16 runs at full rate, as on AMD, "
                  "else the fp32 GEMM on rounded operands; "
                  "qkv --version shows the path); int8: the linear "
                  "layers with int8 weights (per output channel) and int8 activations (per row, dynamic; 7-bit on "
                  "CPUs without VNNI), exact int32 products (oneDNN; qkv --version shows the path)")
        ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
    c->add_flag("--replace-unknowns", f.replace_unknowns,
                "replace each output <unk> by the source word with the highest cross-attention");
    group_options(c, "Decoding", {"--min-len", "--no-repeat-ngram-size", "--repetition-penalty", "--coverage-penalty",
                                  "--prefix", "--sampling", "--temperature", "--top-k", "--top-p", "--seed",
                                  "--batch-type", "--compute-type", "--replace-unknowns"});
}

runtime::TranslateOptions base_translate_options(int64_t max_len, int64_t beam, double length_penalty,
                                                 int64_t batch_size, bool no_unk, const DecodeFlags& f,
                                                 const runtime::ModelDir& m) {
    runtime::TranslateOptions to;
    to.max_len        = max_len > 0 ? max_len : m.config.decode.max_len;
    to.beam           = beam > 0 ? beam : f.sampling ? 1 : m.config.decode.beam;
    to.length_penalty = length_penalty >= 0 ? length_penalty : m.config.decode.length_penalty;
    to.batch_size     = batch_size;
    to.no_unk         = no_unk;
    return to;
}

void apply_decode_flags(const DecodeFlags& f, runtime::TranslateOptions& to, const runtime::ModelDir& m) {
    if (!f.sampling && (f.temperature != 1.0 || f.top_k != 0 || f.top_p != 1.0 || f.seed != 0))
        throw CLI::ValidationError("--temperature, --top-k, --top-p and --seed apply to --sampling only");
    if (f.sampling && to.beam > 1)
        throw CLI::ValidationError("--sampling draws one translation: not with --beam > 1");
    if (f.min_len > to.max_len)
        throw CLI::ValidationError(detail::str("--min-len ", f.min_len, " is above the output limit of ", to.max_len,
                                               " tokens (--max-len or the model's decode.max_len): no output could end"));
    to.min_len              = f.min_len;
    to.no_repeat_ngram_size = f.no_repeat_ngram_size;
    to.repetition_penalty   = f.repetition_penalty;
    to.coverage_penalty     = f.coverage_penalty;
    // normalised as the training targets were (D2L tokens, or a real-text model's words)
    to.prefix               = runtime::tokenize_sentences(m, {f.prefix}).front();
    to.sampling.enabled     = f.sampling;
    to.sampling.temperature = f.temperature;
    to.sampling.top_k       = f.top_k;
    to.sampling.top_p       = f.top_p;
    to.sampling.seed        = f.seed;
    to.batch_tokens         = f.batch_type == "tokens";
    to.replace_unknowns     = f.replace_unknowns;
}

void name_model_in_int8_errors(const std::string& model, bool int8, const std::function<void()>& f) {
    if (!int8) return f();
    try {
        f();
    } catch (const Error& e) {
        throw Error(detail::str("model '", model, "' (--compute-type int8): ", e.what()));
    }
}

std::unique_ptr<runtime::Translator> load_translator(const std::string& model, runtime::ComputeType compute_type,
                                                     bool pe_quirk) {
    const bool int8 = compute_type == runtime::ComputeType::int8;
    auto tr = std::make_unique<runtime::Translator>(model, compute_type, [=](runtime::ModelDir& m) {
        name_model_in_int8_errors(model, int8, [&] { runtime::apply_compute_type(*m.model, compute_type); });
        if (pe_quirk) {
            QKV_CHECK(m.transformer() != nullptr, "--pe-quirk applies to the Transformer only");
            m.transformer()->set_pe_position_zero_at_inference(true);
        }
    });
    tr->load();
    return tr;
}

}  // namespace qkv::cli
