#pragma once
// Checks for the qkv CLI's option values, with readable bounds: --help shows "INT:[1, 100000]",
// a bad value gives "qkv: error: --batch-size: 0 is out of range: expected an integer from 1 to
// 100000" (CLI11 puts the flag in front, main.cpp the prefix; usage errors exit 2). CLI11's own PositiveNumber/Range print
// the double maximum in 309 digits.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "qkv/runtime/translator.h"
#include "qkv/runtime/model_dir.h"

namespace qkv::cli {

/// An integer in [lo, hi], written in decimal (digits after an optional sign); anything else is a
/// usage error naming the flag and the value ("--threads: 'abc' is not an integer from 0 to
/// 1024"). The value is passed on without leading zeros: CLI11's conversion reads "010" as octal 8,
/// "0x10" as 16 and " 5" as 5. Add it with ->transform(): ->check() runs it on a copy.
CLI::Validator int_range(int64_t lo, int64_t hi);

/// A seed: a whole number from 0 to 2^64 - 1 (18446744073709551615), digits only, passed on
/// without leading zeros (as int_range). CLI11 alone reads "-1" and an overflowing value as
/// 18446744073709551615 without a word, and "010" as 8.
CLI::Validator seed_value();

/// A real number in [lo, hi], or in (lo, hi] when lo_open (e.g. a learning rate > 0).
CLI::Validator real_range(double lo, double hi, bool lo_open = false);

/// A duration: "90" or "90s", "20m", "1.5h" (runtime::parse_duration), or "none"/"off" for no
/// limit. An explicit zero is refused with a message naming "none"/"off" (0 is the internal
/// "no limit", so "--time-budget 0" would otherwise silently mean the opposite of what it says),
/// and so is one under runtime::kMinDurationSeconds ("--val-every 1e-9s" would validate after every step).
CLI::Validator duration_or_off();

/// The seconds duration_or_off() accepted: 0 for "none"/"off" (runtime::parse_duration_or_off).
/// Throws qkv::Error otherwise.
double parse_duration_or_off(const std::string& s);

/// For every option that names a file or folder (--data, --out, --model, --file, --hyp-out, --json):
/// an empty value is refused, since "" would otherwise read as "not given" and silently mean the
/// default (a data file found elsewhere, standard input, no output file). CLI11 puts the flag in
/// front and main.cpp the prefix: "qkv: error: --data: empty path" (a usage error, exit 2), before
/// anything is loaded or written. refuse_empty_values leaves options with this check to it.
CLI::Validator non_empty_path();

/// For every option of `app` and of its subcommands that takes a value (flags and positionals
/// aside): an empty value ("--preset ''", "--batch-size ''", "--denormals ''") is refused as
/// "--X: empty value" before the option's own checks run (which would say "--denormals:  not in
/// {flush,keep}" or "'' is not an integer ..."); a path option keeps non_empty_path's "empty path".
/// Call it once every option is added. A usage error (exit 2), as any bad value.
void refuse_empty_values(CLI::App& app);

/// argv[1..] with every "--X=" whose X takes a value split into "--X" and "", so that the empty
/// value is refused as "--X \"\"" is: CLI11 2.1.2 ignores an empty value after '=' and takes the
/// next argument as X's value ("qkv train --out= foo" trained into foo). X is looked up in the
/// subcommand named on the command line, then in `app`; anything else (a flag, an unknown name,
/// whatever follows "--") is left as it is.
std::vector<std::string> split_empty_assignments(CLI::App& app, int argc, char** argv);

/// Puts the options `names` of `c` under the heading `group` in c's --help (a CLI11 option group;
/// the groups appear in the order of their first option). Throws CLI::OptionNotFound for a name c
/// does not have (a renamed flag), which the help test (tests/cli/test_help.sh) then reports.
void group_options(CLI::App* c, const std::string& group, std::initializer_list<const char*> names);

/// --help of `app` and its subcommands without CLI11's default-value marks on switch names: a
/// switch with an opposite ("--bidirectional,!--no-bidirectional", "!--no-params") is listed as
/// "--bidirectional,--no-bidirectional", not "--bidirectional,--no-bidirectional{false}". Call it once
/// every subcommand is added.
void plain_switch_names(CLI::App& app);

/// Throws a usage error: main.cpp prints "qkv: error: <msg>" and exits 2 (as for a bad flag).
[[noreturn]] void usage_error(const std::string& msg);

/// Checks an output-folder flag before any work is done (`qkv train --out`, `qkv nw --out`):
/// `path`, resolved as the OS will (train::OutFolder: links followed, then ".."), must be an
/// existing folder, or a path whose nearest existing ancestor is a folder we may write in (the
/// missing folders are created later). Otherwise a usage error (exit 2) naming the flag, the path
/// as given, the reason and the resolved folders: "--out: empty path", "--out 'X' is an existing
/// file, not a folder", "--out 'X': 'P' is a file, so the folder cannot be created", "--out 'X': no
/// permission to create it in 'P'" / "--out 'X': the folder is not writable" / "--out 'X': cannot
/// create the folder 'F' (reason)".
/// With `write_test` it then runs test_out_folder_write; qkv train leaves that test to the moment
/// its run is accepted (train::RunOptions::on_accepted), so that a refused run leaves the folder as
/// it was, its modification time included.
void check_out_folder(const std::string& flag, const std::string& path, bool write_test = true);

/// check_out_folder's write test: to see what writing will do (access() grants root everything, and
/// /proc refuses root too) it creates the first missing folder, or a probe file in an existing one,
/// and removes it again (nothing is left but the modification time of the folder it was made in).
/// A usage error as check_out_folder's ("--out 'X': the folder is not writable (reason)",
/// "--out 'X': cannot create the folder 'F' (reason)").
void test_out_folder_write(const std::string& flag, const std::string& path);

/// For a command that shows attention weights (`command` names it: "heatmap"), which only the math
/// backend gives: a usage error when the flash backend is forced by --attention flash or, without
/// --attention, by QKV_ATTENTION=flash; call it before any model is loaded.
void check_weights_backend(const std::string& command);

/// Warns on stderr when `tokens` (one tokenised sentence) is longer than the encoder reads
/// (runtime::source_notes, which Python's translate_batch says too): "<prefix>: warning: <what>
/// has 25 source tokens but the model reads 20 positions (19 tokens + <eos>): tokens 21-25 are not
/// read, nor is <eos>", and one line per word a subword model encodes only the start of.
/// `prefix` is "qkv translate", `what` names the input ("line 3", "the sentence").
void warn_if_truncated(const std::string& prefix, const std::string& what, const runtime::ModelDir& m,
                       const std::vector<std::string>& tokens);

/// util::shell_quote (util/shell.h): `s` as one word for a POSIX shell, in commands printed to be copied.
std::string shell_quote(const std::string& s);

/// Checks an output file flag before any work: `path` ("": not asked for, nothing to check) must not
/// be "-" (it would name a file "-", not standard output), must not be a folder, its parent
/// folder must exist ("the folder 'P' does not exist" / "'P' is not a folder"), and the file must
/// be writable there (check_writable). Removes the temporaries of earlier writes of `path` cut
/// short by a kill (PATH.tmp.<pid>), saying so on stderr. Throws CLI::ValidationError (exit 2)
/// naming the flag.
void check_output_file(const std::string& flag, const std::string& path);

/// sacreBLEU's corpus BLEU and chrF2 (qkv's implementation, decode/sacrebleu.h) of `hyps` against
/// `refs` (one per line), printed as sacreBLEU prints them with a line "(qkv's implementation of
/// sacreBLEU V's defaults; NOTE)", and sacreBLEU's warning for tokenized periods; returns the
/// {"sacrebleu": ..., "chrf": ...} JSON that qkv eval and qkv score write (--json).
nlohmann::json print_standard_scores(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                                     const std::string& note);

/// Refuses (usage error, exit 2) an output file `path` given by `flag` that is one of the files of
/// the model folder `model` (runtime::kModelDirFiles: config.json, model.safetensors, ...), links and
/// ".." resolved: writing it would destroy the model being used. "" (not asked for) passes.
void check_not_model_file(const std::string& flag, const std::string& path, const std::string& model);

/// Checks before slow work that the file `path` (given by `flag`) can be written where it goes
/// (util::check_can_write: its temporary file is created and removed). Otherwise a usage error
/// (exit 2) with the message the write itself would give, after the flag: "--hyp-out: cannot write
/// 'P': cannot create its temporary file 'P.tmp.<pid>': Permission denied".
void check_writable(const std::string& flag, const std::string& path);

/// The decoding options `qkv translate` and `qkv eval` share (decode::DecodeOptions).
struct DecodeFlags {
    int64_t min_len = 0, no_repeat_ngram_size = 0, top_k = 0;
    double repetition_penalty = 1.0, coverage_penalty = 0.0, temperature = 1.0, top_p = 1.0;
    std::string prefix, batch_type = "examples", compute_type = "fp32";
    bool sampling = false, replace_unknowns = false;
    uint64_t seed = 0;
};
/// Adds --min-len, --no-repeat-ngram-size, --repetition-penalty, --coverage-penalty, --prefix, --sampling,
/// --temperature, --top-k, --top-p, --seed, --batch-type, --replace-unknowns and --compute-type to `c`.
void add_decode_flags(CLI::App* c, DecodeFlags& f);
/// The settings `qkv translate` and `qkv eval` both take: --max-len, --beam, --length-penalty
/// (<= 0 / < 0: not given, config.json's decode section; --sampling without --beam draws one
/// translation, not config.json's beam), --batch-size and --no-unk.
runtime::TranslateOptions base_translate_options(int64_t max_len, int64_t beam, double length_penalty,
                                                 int64_t batch_size, bool no_unk, const DecodeFlags& f,
                                                 const runtime::ModelDir& m);
/// Copies the flags into `to` (the prefix split on spaces); a sampling option without
/// --sampling is a usage error.
void apply_decode_flags(const DecodeFlags& f, runtime::TranslateOptions& to, const runtime::ModelDir& m);

/// Runs `f`, a step of translate/eval with the model in the folder `model` (quantizing its Linear
/// layers, decoding); under --compute-type int8 (`int8`) a qkv::Error from it is rethrown naming
/// the model: "model 'DIR' (--compute-type int8): linear_int8: row 0 of the input holds a
/// non-finite value". The int8 layers refuse a non-finite weight or activation (ops/quantize.h)
/// but cannot say which model they run.
void name_model_in_int8_errors(const std::string& model, bool int8, const std::function<void()>& f);

/// The translator of `qkv translate` and `qkv eval`: the model folder `model` loaded (Translator::load)
/// under `compute_type`, each copy with D2L's inference quirk when `pe_quirk` ("--pe-quirk applies to
/// the Transformer only" otherwise) and the int8 quantization's errors naming the model
/// (name_model_in_int8_errors). Throws qkv::Error from loading.
std::unique_ptr<runtime::Translator> load_translator(const std::string& model, runtime::ComputeType compute_type,
                                                     bool pe_quirk);

}  // namespace qkv::cli
