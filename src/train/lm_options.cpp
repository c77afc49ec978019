// `qkv train --model lm`'s configuration from the table's rows it shares (train/lm_options.h).
#include "qkv/train/lm_options.h"

#include <filesystem>

#include "qkv/util/atomic_file.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

/// The rows the language model shares, and where LmConfig keeps each (the LM's own config.json
/// names the same keys).
struct LmRow {
    const char* key;
    void* (*member)(LmConfig&);
    bool refused_on_resume;  // changes the model
};

#define QKV_LM(expr) [](LmConfig& c) -> void* { return &c.expr; }
const LmRow kLmRows[] = {
    {"model.num_hiddens", QKV_LM(model.num_hiddens), true},
    {"model.num_heads", QKV_LM(model.num_heads), true},
    {"model.num_blks", QKV_LM(model.num_blks), true},
    {"model.ffn_num_hiddens", QKV_LM(model.ffn_num_hiddens), true},
    {"model.dropout", QKV_LM(model.dropout), false},
    {"data.num_steps", QKV_LM(num_steps), false},
    {"train.batch_size", QKV_LM(train.batch_size), false},
    {"train.lr", QKV_LM(train.lr), false},
    {"train.seed", QKV_LM(train.seed), false},
    {"train.warmup_steps", QKV_LM(train.warmup_steps), false},
    {"train.precision", nullptr, false},
    {"train.log_every", QKV_LM(log_every), false},
    // applied on resume too
    {"data.path", QKV_LM(path), false},
    {"train.epochs", QKV_LM(train.epochs), false},
    {"train.max_steps", QKV_LM(train.max_steps), false},
    {"train.time_budget_s", QKV_LM(train.time_budget_s), false},
};
#undef QKV_LM

FieldValue lm_value(const LmRow& r, LmConfig& c) {
    const ConfigField& f = config_field(r.key);
    if (!r.member) return std::string(precision_name(c.train.precision));
    void* p = r.member(c);
    switch (f.type) {
        case FieldType::integer: return *static_cast<int64_t*>(p);
        case FieldType::unsigned_integer: return *static_cast<uint64_t*>(p);
        case FieldType::real:
        case FieldType::duration: return *static_cast<double*>(p);
        default: return *static_cast<std::string*>(p);
    }
}

void set_lm_value(const LmRow& r, LmConfig& c, const FieldValue& v) {
    if (!r.member) {
        c.train.precision = parse_precision(std::get<std::string>(v), "--precision");
        return;
    }
    void* p = r.member(c);
    if (const auto* i = std::get_if<int64_t>(&v)) *static_cast<int64_t*>(p) = *i;
    else if (const auto* u = std::get_if<uint64_t>(&v)) *static_cast<uint64_t*>(p) = *u;
    else if (const auto* d = std::get_if<double>(&v)) *static_cast<double*>(p) = *d;
    else *static_cast<std::string*>(p) = std::get<std::string>(v);
}

bool applied_on_resume(const std::string& key) { return config_field(key).on_resume == OnResume::apply; }

/// --resume: the flags given that differ from config.json (lm's own three refused when different).
std::vector<ResumeDiff> lm_resume_diffs(LmConfig& cfg, const RunOverrides& o, const LmOverrides& lm,
                                        const std::string& preset_given) {
    std::vector<ResumeDiff> diffs;
    auto& m = cfg.model;
    const int64_t kv = m.num_kv_heads ? m.num_kv_heads : m.num_heads;
    const std::string pos = m.rope ? "rope" : "sinusoidal";
    for (const LmRow& r : kLmRows) {
        if (!o.has(r.key) || applied_on_resume(r.key)) continue;
        const FieldValue saved = lm_value(r, cfg);
        if (saved != o.values.at(r.key))
            diffs.push_back({field_flag_name(config_field(r.key)), o.text(r.key), r.key, field_value_text(saved),
                             r.refused_on_resume});
    }
    if (lm.num_kv_heads && *lm.num_kv_heads != kv)
        diffs.push_back(
            {"--num-kv-heads", std::to_string(*lm.num_kv_heads), "model.num_kv_heads", std::to_string(kv), true});
    if (lm.positions && *lm.positions != pos) diffs.push_back({"--positions", *lm.positions, "model.positions", pos, true});
    if (lm.window && *lm.window != m.window)
        diffs.push_back({"--window", std::to_string(*lm.window), "model.window", std::to_string(m.window), true});
    if (!preset_given.empty()) diffs.push_back({"--preset", preset_given, "configuration", "", false});
    return diffs;
}

LmConfig resumed_lm(const std::string& out_dir, const RunOverrides& o, const LmOverrides& lm,
                    const std::string& preset_given, std::FILE* log) {
    check_resume_checkpoint(out_dir, /*lm=*/true);
    const std::string cfg_file = (fs::path(out_dir) / "config.json").string();
    if (!fs::exists(cfg_file)) throw ConfigError(detail::str("--resume: '", cfg_file, "' not found (nothing to resume)"));
    if (!is_lm_dir(out_dir))
        throw ConfigError(detail::str("--resume --model lm: '", out_dir, "' holds a translation model, not a language "
                                      "model; resume it without --model lm"));
    LmConfig cfg = lm_config_from_json(util::read_file(cfg_file), cfg_file);
    report_resume_diffs(out_dir, cfg_file, lm_resume_diffs(cfg, o, lm, preset_given), log);
    return cfg;
}

LmConfig fresh_lm(const std::string& preset, const RunOverrides& o, const LmOverrides& lm) {
    LmConfig cfg = lm_preset(preset);
    for (const LmRow& r : kLmRows)
        if (o.has(r.key) && !applied_on_resume(r.key)) set_lm_value(r, cfg, o.values.at(r.key));
    auto& m = cfg.model;
    if (lm.num_kv_heads) m.num_kv_heads = *lm.num_kv_heads;
    if (lm.positions) m.rope = *lm.positions == "rope";
    if (lm.window) m.window = *lm.window;
    if (m.num_hiddens % m.num_heads != 0)
        throw ConfigError(detail::str("--num-heads ", m.num_heads, " must divide --num-hiddens ", m.num_hiddens));
    const int64_t kv = m.num_kv_heads ? m.num_kv_heads : m.num_heads;
    if (m.num_heads % kv != 0) throw ConfigError(detail::str("--num-kv-heads ", kv, " must divide --num-heads ", m.num_heads));
    if (m.rope && (m.num_hiddens / m.num_heads) % 2 != 0)
        throw ConfigError("--positions rope needs an even head width (--num-hiddens / --num-heads)");
    return cfg;
}

}  // namespace

bool lm_takes(const std::string& key) {
    for (const LmRow& r : kLmRows)
        if (key == r.key) return true;
    return false;
}

LmConfig configure_lm(const std::string& preset, bool resume, const std::string& out_dir, const RunOverrides& o,
                      const LmOverrides& lm, const std::string& preset_given, std::FILE* log) {
    for (const auto& [key, v] : o.values)
        if (!lm_takes(key))
            throw ConfigError(detail::str(field_flag_name(config_field(key)), " does not apply to --model lm"));
    LmConfig cfg = resume ? resumed_lm(out_dir, o, lm, preset_given, log) : fresh_lm(preset, o, lm);
    for (const LmRow& r : kLmRows)  // the stopping rules and the data path: also on resume
        if (o.has(r.key) && applied_on_resume(r.key)) set_lm_value(r, cfg, o.values.at(r.key));
    return cfg;
}

}  // namespace qkv::train
