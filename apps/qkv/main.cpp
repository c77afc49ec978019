// qkv command-line entry point: builds the CLI11 app from the registered subcommands, runs it,
// and turns qkv::Error into "qkv: error: ..." with exit code 1; usage errors (CLI11's parse and
// validation errors) get the same prefix and exit 2; a command's ExitStatus sets the exit code.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/dist/communicator.h"
#include "qkv/ops/attention.h"

namespace qkv::cli {
namespace {
std::vector<Registrar>& registry() {
    static std::vector<Registrar> r;
    return r;
}
}  // namespace
Registration::Registration(Registrar r) { registry().push_back(r); }
}  // namespace qkv::cli

namespace {

/// Levenshtein distance, for suggesting the option meant by a typo.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0]      = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j]          = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag            = up;
        }
    }
    return row[b.size()];
}

/// CLI11 2.1 lists unexpected arguments in reverse ("3 --epoch" for "--epoch 3"). This names
/// them in command-line order, each unknown option with the closest one of its command (edit
/// distance <= 2): "train: unexpected arguments '--epoch 3' (unknown option --epoch: did you
/// mean --epochs?); qkv train --help lists the options".
std::string extras_message(const CLI::App* app) {
    const CLI::App* where = app;
    std::vector<std::string> args = app->remaining(false);
    for (const CLI::App* sub : app->get_subcommands()) {
        auto more = sub->remaining(false);
        if (!more.empty()) where = sub;
        args.insert(args.end(), more.begin(), more.end());
    }
    std::string joined, notes;
    for (const auto& arg : args) {
        joined += (joined.empty() ? "" : " ") + arg;
        if (arg.rfind("--", 0) != 0) continue;
        const std::string given = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
        std::string best;
        size_t best_d = 3;
        for (const CLI::App* scope : {where, app})
            for (const CLI::Option* o : scope->get_options())
                for (const auto& name : o->get_lnames())
                    if (const size_t d = edit_distance(given, name); d < best_d) best_d = d, best = name;
        notes += std::string(notes.empty() ? " (" : "; ") + "unknown option --" + given +
                 (best.empty() ? "" : ": did you mean --" + best + "?");
    }
    if (!notes.empty()) notes += ")";
    // Under the main program the "qkv: error: " prefix already names it: no second "qkv: ".
    const std::string who = where == app ? std::string() : where->get_name() + ": ";
    return who + "unexpected argument" + (args.size() > 1 ? "s '" : " '") + joined + "'" + notes + "; qkv " +
           (where == app ? "" : where->get_name() + " ") + "--help lists the options";
}

/// "qkv 0.1.0" and the kernel paths this machine takes (--version).
std::string version_text() {
    std::string paths;
    try {
        paths = qkv::kernel_paths();
    } catch (const qkv::Error& e) {  // a bad QKV_MAX_ISA (main warns): the version all the same
        paths = std::string("kernel paths: not known: ") + e.what() + "\n";
    }
    paths.pop_back();  // CLI11 ends the text with its own newline
    return "qkv 0.1.0\n" + paths;
}

/// The message app.exit() prints for a parse error: "qkv: error: ..." in qkv's words.
std::string failure_message(const CLI::App* a, const CLI::Error& e) {
    // (ExtrasError carries the command name as its name: test the type.)
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) return "qkv: error: " + extras_message(a) + "\n";
    // A flag given twice: CLI11 says "--max-steps: At Most 1 required but received 2".
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
        const std::string m = e.what();
        const size_t at = m.find(": At Most 1 required but received ");
        if (at != std::string::npos) return "qkv: error: " + m.substr(0, at) + " is given more than once: give it once\n";
    }
    // "qkv --bogus": CLI11 reports only the missing command; the unknown option comes first.
    if (dynamic_cast<const CLI::RequiredError*>(&e) && a->get_subcommands().empty() && !a->remaining(false).empty())
    {
        std::string m = extras_message(a);
        const std::string tail = "; qkv --help lists the options";
        if (m.size() > tail.size() && m.compare(m.size() - tail.size(), tail.size(), tail) == 0)
            m.resize(m.size() - tail.size());
        return "qkv: error: " + m + ", and no command is given; qkv --help lists the options and the commands\n";
    }
    return "qkv: error: " + CLI::FailureMessage::simple(a, e);
}

/// The global options: accepted before the subcommand or after it, with the same values and
/// meaning (one variable each).
struct GlobalOptions {
    int threads = 0;
    std::string attention = "auto", kernels = "fast", denormals = "flush";

    void add_to(CLI::App* a) {
        const char* group = "Global options (before or after the subcommand)";
        a->add_option("--threads", threads,
                      "threads for kernels (default 0: all cores, or OMP_NUM_THREADS when set)")
            ->transform(qkv::cli::int_range(0, qkv::kMaxThreads))
            ->group(group);
        a->add_option("--attention", attention,
                      "attention backend: auto (fused flash kernel when it can run), math or flash "
                      "(also QKV_ATTENTION; default auto)")
            ->check(CLI::IsMember({"auto", "math", "flash"}))
            ->group(group);
        a->add_option("--kernels", kernels, "fast (SIMD) or ref (scalar reference kernels; also QKV_KERNELS=ref; default fast)")
            ->check(CLI::IsMember({"fast", "ref"}))
            ->group(group);
        a->add_option("--denormals", denormals,
                      "flush (default: subnormal floats become 0, as TensorFlow does; x86 runs "
                      "them ~100x slower) or keep (IEEE gradual underflow, PyTorch's default)")
            ->check(CLI::IsMember({"flush", "keep"}))
            ->group(group);
    }

    /// Sets the threads, attention backend, kernel mode and denormal mode. Throws
    /// CLI::ValidationError when the flash kernel is forced with the reference kernels.
    void apply() const {
        if (threads > 0) qkv::set_num_threads(threads);
        qkv::set_attention_backend(qkv::parse_attention_backend(attention));
        if (kernels == "ref") qkv::set_kernel_mode(qkv::KernelMode::reference);
        qkv::set_flush_denormal(denormals == "flush");
        // The flash kernel has no reference build: forcing it with the reference kernels fails at
        // the first attention call, which for train is after --out has been cleared. Refuse now.
        const char* env_att = std::getenv("QKV_ATTENTION");
        const bool  flash   = attention == "flash" ||
                           (attention == "auto" && env_att && std::strcmp(env_att, "flash") == 0);
        if (flash && qkv::kernel_mode() == qkv::KernelMode::reference)
            throw CLI::ValidationError(
                std::string(attention == "flash" ? "--attention flash" : "QKV_ATTENTION=flash") +
                " needs the fast kernels, but " + (kernels == "ref" ? "--kernels ref" : "QKV_KERNELS=ref") +
                " selects the reference kernels, which have no flash path: drop one of the two");
    }
};

/// A global option given both before and after the subcommand: the later would silently win.
void refuse_global_given_twice(CLI::App& app) {
    for (const char* name : {"--threads", "--attention", "--kernels", "--denormals"})
        for (CLI::App* sub : app.get_subcommands()) {
            const CLI::Option* before = app.get_option(name);
            const CLI::Option* after  = sub->get_option_no_throw(name);
            if (before->count() == 0 || !after || after->count() == 0) continue;
            throw CLI::ValidationError(std::string(name) + " is given both before and after '" + sub->get_name() +
                                       "' (" + before->results().back() + ", then " + after->results().back() +
                                       "): give it once");
        }
}

/// A switch given with its opposite (--bidirectional --no-bidirectional): CLI11 lets the last one
/// win without a word. The same switch twice means what it says once (scripts that add flags to a
/// list repeat them): accepted.
void refuse_switch_and_opposite(CLI::App& app) {
    std::vector<CLI::App*> parsed{&app};
    for (CLI::App* sub : app.get_subcommands()) parsed.push_back(sub);
    for (CLI::App* a : parsed)
        for (const CLI::Option* o : a->get_options()) {
            if (o->get_items_expected_max() != 0 || o->count() < 2) continue;
            const std::vector<std::string>& r = o->results();
            if (std::all_of(r.begin(), r.end(), [&](const std::string& v) { return v == r.front(); })) continue;
            std::string names;  // "--bidirectional/--no-bidirectional" (CLI11 writes "...,--no-x{false}")
            int depth = 0;
            for (const char c : o->get_name(false, true)) {
                depth += c == '{' ? 1 : c == '}' ? -1 : 0;
                if (depth == 0 && c != '}') names += c == ',' ? '/' : c;
            }
            throw CLI::ValidationError(names + ": the switch and its opposite are both given: give one");
        }
}

/// Only `qkv train` (data-parallel) and `qkv eval` (the test set shared) use the ranks: N copies of
/// another command would each do the whole job (N servers on one port, N writers of one --out).
void refuse_ranks_for_single_process_commands(CLI::App& app) {
    if (const int64_t ranks = qkv::dist::launched_world_size(); ranks > 1)
        for (CLI::App* sub : app.get_subcommands())
            if (sub->get_name() != "train" && sub->get_name() != "eval")
                throw CLI::ValidationError("qkv " + sub->get_name() + " runs in one process, but mpirun started " +
                                           std::to_string(ranks) + " of it: only qkv train and qkv eval use the "
                                           "ranks; run qkv " + sub->get_name() + " without mpirun");
}

/// Checks QKV_KERNELS, QKV_ATTENTION and QKV_MAX_ISA before a command runs: 2 (after the
/// message) when one is bad, else 0. With --help or --version the message is a warning and help
/// (the version) follows.
int check_environment(int argc, char** argv) {
    bool help_or_version = false;
    for (int i = 1; i < argc; ++i)
        help_or_version = help_or_version || std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0 ||
                          std::strcmp(argv[i], "--help-all") == 0 || std::strcmp(argv[i], "--version") == 0;
    auto env_error = [help_or_version](const std::string& msg) {
        std::fprintf(stderr, "qkv: %s: %s\n", help_or_version ? "warning" : "error", msg.c_str());
        return !help_or_version;
    };
    // QKV_KERNELS is read when the library starts; a misspelt value would silently mean "fast".
    if (const char* k = std::getenv("QKV_KERNELS"); k && *k && std::strcmp(k, "ref") != 0 && std::strcmp(k, "fast") != 0)
        if (env_error(std::string("QKV_KERNELS must be 'fast' or 'ref', got '") + k + "'")) return 2;
    // QKV_ATTENTION is read at the first attention call, after the model is loaded: check it now,
    // with the parser that call uses.
    if (const char* e = std::getenv("QKV_ATTENTION"); e && *e) {
        try {
            qkv::parse_attention_backend(e);
        } catch (const qkv::Error&) {
            if (env_error(std::string("QKV_ATTENTION must be 'auto', 'math' or 'flash', got '") + e + "'")) return 2;
        }
    }
    // QKV_MAX_ISA likewise (read at the first kernel call otherwise).
    try {
        qkv::check_isa_cap();
    } catch (const qkv::Error& e) {
        if (env_error(e.what())) return 2;
    }
    return 0;
}

/// A first word that is not a command: says so and returns false (CLI11 would only say a
/// subcommand is required).
bool known_command(CLI::App& app, int argc, char** argv) {
    if (argc <= 1 || argv[1][0] == '-') return true;
    std::string names;
    bool known = false;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        known = known || sub->get_name() == argv[1];
        names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known)
        std::fprintf(stderr, "qkv: error: unknown command '%s' (commands: %s; qkv --help)\n", argv[1], names.c_str());
    return known;
}

/// Parses and runs the command; returns the exit code (0, 1 for qkv::Error, 2 for usage, or a
/// command's ExitStatus).
int parse_and_run(CLI::App& app, int argc, char** argv) {
    // "--out=" means an empty --out, as "--out ''" does (CLI11 would take the next argument).
    std::vector<std::string> args = qkv::cli::split_empty_assignments(app, argc, argv);
    std::vector<char*> args_c{argv[0]};
    for (std::string& a : args) args_c.push_back(a.data());
    int rc = 0;
    try {
        app.parse(int(args_c.size()), args_c.data());
    } catch (const CLI::ParseError& e) {
        rc = app.exit(e) == 0 ? 0 : 2;
    } catch (const qkv::cli::ExitStatus& e) {
        return e.code;  // complete output, and every rank of a job stops the same way (a signal)
    } catch (const qkv::Error& e) {
        std::fprintf(stderr, "qkv: error: %s\n", e.what());
        rc = 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qkv: error: %s\n", e.what());
        rc = 1;
    }
    // One rank of an `mpirun -np N` job failing on its own (its --out, its data) must end the job:
    // exiting normally would finalize MPI, which waits for the other ranks, themselves waiting in a
    // collective for this one, until the collective watchdog's QKV_DIST_TIMEOUT.
    if (rc != 0)
        if (auto w = qkv::dist::world_if_started(); w && w->size() > 1)
            w->abort(qkv::detail::str("stopped with an error (exit ", rc, "), stopping the job"), rc);
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    // Passive OpenMP waiting unless the user chose otherwise (core/parallel.h says why; the
    // Python package does the same). libgomp read its settings before main ran, so once the
    // variable is set we re-execute ourselves. On a quiet machine a short spin is faster
    // (GOMP_SPINCOUNT=10000, bench/RESULTS_avx512.md).
    if (qkv::default_to_passive_omp_wait())
        execv("/proc/self/exe", argv);  // returns only on failure; then run as we are
    CLI::App app{"qkv: attention mechanisms and Transformers (D2L chapter 11) in C++"};
    app.require_subcommand(1);
    app.set_version_flag("--version", version_text);
    // Before the subcommands are added: they copy it. app.exit() prints it for every parse error.
    app.failure_message(failure_message);
    // Given on both sides of the subcommand, a global option is refused (refuse_global_given_twice).
    GlobalOptions globals;
    globals.add_to(&app);
    app.parse_complete_callback([&] {
        refuse_global_given_twice(app);
        refuse_switch_and_opposite(app);
        refuse_ranks_for_single_process_commands(app);
        globals.apply();
    });
    for (auto reg : qkv::cli::registry()) reg(app);
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) globals.add_to(sub);
    qkv::cli::refuse_empty_values(app);
    qkv::cli::plain_switch_names(app);
    // The environment checks stop a command, not a request for help or the version.
    if (const int rc = check_environment(argc, argv); rc != 0) return rc;
    if (!known_command(app, argc, argv)) return 2;
    return parse_and_run(app, argc, argv);
}
