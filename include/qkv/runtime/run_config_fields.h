#pragma once
// The training options of RunConfig as one table (issue 43): each row is one option, described once
// (its config.json key, `qkv train` flag, qkv.train keyword, type, range, help, what --resume does
// with it, which model kinds have it, and where it lives in RunConfig). config.json's reader and
// writer, the range checks, the flags of `qkv train`, the overrides of a preset, the refusal of a
// flag the model kind lacks, the --resume flag check and qkv.train's keywords all loop over it, for
// the translation models and the language model alike. docs/architecture.md "Adding a training
// option" shows how a row is added.
//
// What is not a row, and why (explicit code in run_config.cpp / run.cpp):
// - data.fingerprint and data.applied: records of the data trained on (nested objects, never set by
//   a flag); data.subword_files: derived from data.shared_vocab, written only.
// - The rules between fields (heads dividing the width, key/value heads dividing the heads, RoPE's
//   even head width, model.max_len covering data.num_steps and decode.max_len, a warmup schedule's
//   warmup_steps, tying with equal vocabularies, an even bidirectional width, language codes,
//   data.src_file and data.tgt_file together): check_rules.
// - The preset rules of configure_run (train/run.h) that depend on which flags were given.
// Special cases that are row kinds: enums (schedule, precision, architecture, pipeline, subword,
// init, positions) are FieldType::choice; durations (time budget, validation interval)
// FieldType::duration, parsed by parse_duration_or_off on the CLI; the vocabulary sizes, filled from
// the data, are `from_data`; keys whose member differs by model kind (model.num_hiddens,
// model.dropout, ...) have a `bahdanau_member` or an `lm_member`. --preset and --model are rows whose
// flags `qkv train` declares itself (they also take the language model's names).
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "qkv/runtime/run_config.h"

namespace qkv::runtime {

/// What a field holds. Each row's RunConfig member has the matching C++ type: integer int64_t,
/// unsigned_integer uint64_t, real and duration double (seconds), boolean bool, text std::string;
/// choice an enum, read and written by name (ConfigField::choice).
enum class FieldType { integer, unsigned_integer, real, duration, boolean, text, choice };

/// How `qkv train` takes a field: a value (--lr 0.01), a switch that turns it on (--strict), a
/// switch with its negation (--bidirectional / --no-bidirectional), or on|off (--trim on).
enum class FlagKind { value, switch_on, negatable, on_off };

/// A closed or half-open interval; hi = +inf: no upper bound. Integers use closed bounds.
struct FieldRange {
    double lo = -std::numeric_limits<double>::infinity();
    double hi = std::numeric_limits<double>::infinity();
    bool lo_open = false, hi_open = false;
};

/// What --resume does with the field's flag (config.json describes the run being continued):
/// apply it (stopping rules, logging, where the data is now), refuse it when it differs from
/// config.json (it would change the model's parameter shapes or vocabularies: a ConfigError), or
/// ignore it with a warning when it differs (a setting of the run: config.json's value is used).
enum class OnResume { apply, refuse, ignore };

/// Which model kinds have the field, a set of bits (config.json writes and reads it only for those; a
/// flag of another kind is refused: check_architecture_overrides). `both`: the two translation
/// models; `all`: the language model too.
enum class FieldScope : unsigned { transformer = 1, bahdanau = 2, both = 3, lm = 4, transformer_lm = 5, all = 7 };

/// A field's value: int64_t (integer), uint64_t (unsigned_integer), double (real, duration in
/// seconds), bool (boolean), std::string (text, and a choice's name).
using FieldValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

/// An enum field's names and its conversions (messages as the enum's own parse function words them).
struct FieldChoice {
    std::vector<std::string> names;
    std::string (*get)(const RunConfig&);
    /// Throws qkv::Error naming `what` (the key or flag) or the accepted names for an unknown one.
    void (*set)(RunConfig&, const std::string& name, const std::string& what);
};

struct ConfigField {
    const char* key;               ///< config.json key, "section.name" ("train.lr"; "preset": top level)
    FieldType type;
    FieldRange range;              ///< what config.json and RunConfig::validate accept
    /// The member: a pointer to it in `c` (of the C++ type FieldType names); for choices unused
    /// (nullptr), see `choice`.
    void* (*member)(RunConfig& c) = nullptr;
    /// Where a Bahdanau run keeps it when that differs (model.num_hiddens, model.dropout): written,
    /// read and checked there for bahdanau; config.json's value is also mirrored into `member`, and a
    /// flag sets both (as the hand-written code did before the table).
    void* (*bahdanau_member)(RunConfig& c) = nullptr;
    /// The same for the language model (RunConfig::lm: model.num_hiddens, model.num_heads, ...).
    void* (*lm_member)(RunConfig& c) = nullptr;
    const FieldChoice* choice = nullptr;  ///< FieldType::choice
    /// CLI11 names of the `qkv train` flag ("--max-steps,--steps"; "--bidirectional,!--no-bidirectional");
    /// "" when there is none (config.json only).
    const char* flag = "";
    FlagKind flag_kind = FlagKind::value;
    /// The flag's own range when it differs from `range` (0 has no flag form: "--max-steps 0" is
    /// refused where config.json's 0 means no limit); integer flags need a finite one.
    std::optional<FieldRange> flag_range = std::nullopt;
    const char* python = "";       ///< qkv.train keywords, space-separated ("clip clip_norm"); "": none
    const char* help = "";         ///< the flag's --help text ("{presets}": field_preset_defaults)
    const char* group = "";        ///< its --help section ("Model", "Data", "Training", "Output", ...)
    bool file = false;             ///< text naming a file or folder: the flag refuses an empty one
    OnResume on_resume = OnResume::ignore;
    FieldScope scope = FieldScope::both;
    /// config.json must have it (it fixes the parameter shapes: no default would load the weights).
    bool required = false;
    /// Vocabulary sizes: 0 until the data is read; checked only once known.
    bool from_data = false;
    /// Written to config.json and range-checked only when this holds (nullptr: always), e.g.
    /// data.subword_vocab_size for subword runs only; read whenever present.
    bool (*applies)(const RunConfig&) = nullptr;
    /// Bahdanau-only rows: what the Transformer lacks, for check_architecture_overrides' message.
    const char* other_lacks = "";
    /// What a flag given with --resume is compared with when config.json's value stands for another
    /// (model.num_kv_heads 0 means num_heads); nullptr: the value itself (get_field).
    FieldValue (*resume_value)(const RunConfig&) = nullptr;
};

/// The table, in the order of `qkv train --help` (rows without a flag wherever their section is).
const std::vector<ConfigField>& config_fields();

/// The row of a config.json key ("train.lr"); throws qkv::Error for an unknown key.
const ConfigField& config_field(const std::string& key);
/// The row whose flag is `flag` ("--lr", or an alias such as "--steps"); nullptr when none.
const ConfigField* config_field_by_flag(const std::string& flag);
/// The row with qkv.train keyword `keyword` ("clip" and "clip_norm" both name train.clip_norm).
const ConfigField* config_field_by_python(const std::string& keyword);

/// The flag's first long name ("--max-steps" of "--max-steps,--steps"; "--bidirectional").
std::string field_flag_name(const ConfigField& f);
/// The section ("train") and name ("lr") of the key; "" and the key at the top level.
std::string field_section(const ConfigField& f);
std::string field_name(const ConfigField& f);
/// Whether the field belongs to a model kind's run (its scope).
bool field_in_scope(const ConfigField& f, ModelKind arch);
/// The kinds of a scope in words, for messages: "--model lm", "the Transformer", "--model bahdanau".
std::string scope_text(FieldScope s);

/// The field's value in `c` (the architecture's member; a choice's name).
FieldValue get_field(const ConfigField& f, const RunConfig& c);
/// Sets the field (both members where a Bahdanau one differs, see ConfigField::bahdanau_member);
/// `v` must have the field's type (integers convert to reals, non-negative ones to unsigned). A
/// choice's unknown name throws qkv::Error naming `what`. Throws qkv::Error for another type.
void set_field(const ConfigField& f, RunConfig& c, const FieldValue& v, const std::string& what = "");
/// Its value as config.json shows it ("0.001", "42", "true", "warmup_inv_sqrt").
std::string field_value_text(const FieldValue& v);
/// The range in words: "an integer from 1 to 64", "an integer >= 0", "a number > 0 and <= 10".
std::string field_range_text(FieldType type, const FieldRange& r);
/// Whether `v` lies in `r`.
bool field_in_range(const FieldValue& v, const FieldRange& r);
/// The default: the field's value in a default-constructed RunConfig (presets change many).
FieldValue field_default(const ConfigField& f);
/// The presets' values of the field, for --help (a help text's "{presets}" is replaced by it): the
/// most common value, then the presets that differ, then for a Bahdanau run the same where its
/// values differ, e.g. "0.001, demo 0.002, anchor 0.0005; bahdanau: 0.001, d2l and demo 0.005".
/// Durations as the flag takes them ("20m", "none"), switches on/off.
std::string field_preset_defaults(const ConfigField& f);

/// Settings given on top of a preset or a resumed folder's config.json (qkv train's flags,
/// qkv.train's keywords), by config.json key, each in its field's type (choices by name, durations
/// in seconds, switches true). What `qkv train --preset d2l --max-steps 200` gives, from C++:
///
///   train::RunOverrides ov;
///   ov.set("train.max_steps", 200);
struct RunOverrides {
    std::map<std::string, FieldValue> values;
    /// The text the value was given as, where it words a message better than the value ("5m").
    std::map<std::string, std::string> texts;

    /// Sets the key's value (converted to the field's type as set_field does); throws qkv::Error for
    /// a key that is not a row of config_fields() or a value of another type.
    RunOverrides& set(const std::string& key, const FieldValue& v, const std::string& text = "");
    /// As set(key, FieldValue): a C++ number (bool, integer, floating point) or anything a string
    /// is made from ("bpe", a std::filesystem::path).
    template <class V, class = std::enable_if_t<!std::is_same_v<std::decay_t<V>, FieldValue>>>
    RunOverrides& set(const std::string& key, const V& v, const std::string& text = "") {
        if constexpr (std::is_same_v<V, bool>) return set(key, FieldValue(v), text);
        else if constexpr (std::is_unsigned_v<V>) return set(key, FieldValue(uint64_t(v)), text);
        else if constexpr (std::is_integral_v<V>) return set(key, FieldValue(int64_t(v)), text);
        else if constexpr (std::is_floating_point_v<V>) return set(key, FieldValue(double(v)), text);
        else return set(key, FieldValue(std::string(v)), text);
    }
    /// Whether the key was given; throws qkv::Error for a key that is not a row (a misspelt name).
    bool has(const std::string& key) const;
    /// The value given for `key`, or nullopt. T is the field's C++ type (int64_t, uint64_t, double,
    /// bool, std::string); throws qkv::Error for an unknown key or another type.
    template <class T>
    std::optional<T> get(const std::string& key) const {
        if (!has(key)) return std::nullopt;
        const FieldValue& v = values.at(key);
        if (const T* p = std::get_if<T>(&v)) return *p;
        throw Error(detail::str("RunOverrides: key '", key, "' does not hold the type asked for"));
    }
    /// As the flag or keyword words it: the text given, else field_value_text.
    std::string text(const std::string& key) const;
};

/// Sets every given field of `o` in `c` (a fresh run's overrides, before configure_run's rules).
/// `stop_only`: only the stopping rules and logging that --resume applies (OnResume::apply rows
/// outside "data": where the data is now goes through model_data_config).
void apply_overrides(RunConfig& c, const RunOverrides& o, bool stop_only = false);

/// A setting given with --resume that differs from config.json (resume_flag_diffs).
struct ResumeDiff {
    std::string flag, given, key, saved;  ///< "--lr", "0.01", "train.lr", "0.001"
    bool refused = false;                 ///< it would change the model (OnResume::refuse)
};

/// The overrides that --resume does not apply and that differ from `saved` (the folder's
/// config.json): the model-changing ones (refused) and the others (ignored with a warning), named
/// by flag, with the value given and config.json's. `preset`: the --preset given ("" when none;
/// a language model's config.json records none: "the checkpoint's configuration" is used).
std::vector<ResumeDiff> resume_flag_diffs(const RunConfig& saved, const RunOverrides& o,
                                          const std::string& preset = "");

/// Refuses, as one ConfigError listing them all, the refused diffs ("--resume continues the model
/// in 'OUT' as OUT/config.json describes it, and these flags would change it: ..."), then writes a
/// warning line to `log` for each of the others (nullptr: none), prefixed `who` ("qkv train").
void report_resume_diffs(const std::string& out_dir, const std::string& cfg_file, const std::vector<ResumeDiff>& diffs,
                         std::FILE* log, const std::string& who = "qkv train");

}  // namespace qkv::runtime
