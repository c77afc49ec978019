// Presets and the config.json form of RunConfig.
#include "qkv/runtime/run_config.h"
#include "qkv/runtime/run_config_fields.h"

#include <cctype>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace qkv::runtime {

using json = nlohmann::json;

std::vector<std::string> preset_names() { return {"d2l", "demo", "full", "anchor", "real"}; }

std::vector<std::string> lm_preset_names() { return {"lm", "lm-tiny"}; }

const char* model_kind_name(ModelKind k) {
    return k == ModelKind::bahdanau ? "bahdanau" : k == ModelKind::lm ? "lm" : "transformer";
}

ModelKind parse_model_kind(const std::string& s) {
    if (s == "transformer") return ModelKind::transformer;
    if (s == "bahdanau") return ModelKind::bahdanau;
    if (s == "lm") return ModelKind::lm;
    throw Error(detail::str("model architecture '", s, "' is not transformer, bahdanau or lm"));
}

namespace {

RunConfig transformer_preset(const std::string& name);

/// The language model's presets (preset_config's comment).
RunConfig lm_preset(const std::string& name) {
    RunConfig c;
    c.preset = name;
    c.architecture = ModelKind::lm;
    auto& m = c.lm;
    auto& t = c.train;
    t.schedule = optim::LrSchedule::warmup_inv_sqrt, t.warmup_steps = 100, t.lr = 1e-3, t.adam_beta2 = 0.98;
    t.clip_norm = 1.0, t.epochs = 1000, t.val_every_s = 60;
    if (name == "lm") {
        m.num_hiddens = 128, m.num_heads = 4, m.num_blks = 2, m.ffn_num_hiddens = 512, m.dropout = 0.1;
        c.data.num_steps = 64, t.batch_size = 32, t.time_budget_s = 180;
    } else {
        m.num_hiddens = 32, m.num_heads = 2, m.num_blks = 1, m.ffn_num_hiddens = 64, m.dropout = 0.0;
        c.data.num_steps = 16, t.batch_size = 16, t.time_budget_s = 20, t.warmup_steps = 10, t.val_every_s = 0;
    }
    return c;
}

}  // namespace

RunConfig preset_config(const std::string& name, ModelKind kind) {
    const auto lm_names = lm_preset_names();
    const bool lm_name = std::find(lm_names.begin(), lm_names.end(), name) != lm_names.end();
    if (kind == ModelKind::lm) {
        if (lm_name) return lm_preset(name);
        const auto names = preset_names();
        if (std::find(names.begin(), names.end(), name) != names.end())
            throw ConfigError(detail::str("--preset ", name, " is a translation preset; --model lm takes lm or lm-tiny"));
        throw Error(detail::str("unknown language-model preset '", name, "' (known: lm, lm-tiny)"));
    }
    if (lm_name) throw ConfigError(detail::str("--preset ", name, " needs --model lm"));
    RunConfig c = transformer_preset(name);
    c.architecture = kind;
    if (kind == ModelKind::transformer) return c;
    c.model.tie_weights = false;  // tying is the Transformer's (the full preset's BPE stays)
    auto& b = c.bahdanau;  // D2L EN's Bahdanau run (spec §3)
    b.embed_size = 256, b.num_hiddens = 256, b.num_layers = 2, b.dropout = 0.2;
    b.init = models::BahdanauInit::d2l_en;
    auto& t = c.train;
    t.adam_beta1 = 0.9, t.adam_beta2 = 0.999, t.adam_eps = 1e-8;  // D2L: plain Adam, constant lr
    t.schedule = optim::LrSchedule::constant, t.warmup_steps = 0;
    t.lr = name == "d2l" || name == "demo" ? 0.005 : 1e-3;
    t.batch_size = 128, t.label_smoothing = 0.0;  // the Transformer demo's batch 64 / smoothing 0.1 are its own
    if (name == "demo") {
        // Bahdanau et al. (2015)'s encoder (one bidirectional GRU layer) and pairs of up to 10 / 12
        // words, so that the attention learns an alignment: with D2L's unidirectional encoder, two
        // layers, or the Transformer demo's pairs of <= 5 / <= 7 tokens, it did not reliably
        // (bench/RESULTS_gru.md §7).
        b.bidirectional = true, b.num_layers = 1;
        c.data.max_src_tokens = 10, c.data.max_tgt_tokens = 12;
        c.data.num_steps = 14;  // <= 12 target words and <eos>, one to spare (the §7 runs)
        c.decode.max_len = 16;
    }
    return c;
}

namespace {

RunConfig transformer_preset(const std::string& name) {
    RunConfig c;
    c.preset = name;
    auto& d = c.data;
    auto& m = c.model;
    auto& t = c.train;
    if (name == "d2l") {
        d.pipeline = DataPipeline::d2l_en;
        d.num_steps = 9;
        m.num_hiddens = 256, m.num_blks = 2, m.num_heads = 4, m.ffn_num_hiddens = 64, m.dropout = 0.2;
        t.epochs = 30, t.batch_size = 128, t.lr = 1e-3, t.clip_norm = 1.0;
        c.decode.max_len = 9;  // D2L EN decodes num_steps tokens
        return c;
    }
    if (name == "demo") {
        // Short pairs and frequent words only, and a small, fast model (C 128, FFN 256): on 2 AVX2
        // cores a step of 64 pairs costs ~0.1 s of CPU, so the 210 s budget covers thousands of
        // steps (several epochs) instead of a few hundred steps of the 6.7M-parameter model.
        d.pipeline = DataPipeline::anchor;
        d.num_steps = 8;
        d.max_src_tokens = 5, d.max_tgt_tokens = 7;  // 40,594 of the 167,130 pairs
        d.min_freq = 3;                               // vocabularies 3,110 / 4,250
        d.n_valid = 1000, d.n_test = 5000;
        m.num_hiddens = 128, m.num_blks = 2, m.num_heads = 4, m.ffn_num_hiddens = 256, m.dropout = 0.1;
        t.epochs = 100, t.time_budget_s = 210, t.batch_size = 64, t.lr = 2e-3;
        t.adam_beta2 = 0.98, t.adam_eps = 1e-9;
        t.label_smoothing = 0.1;
        t.schedule = optim::LrSchedule::warmup_inv_sqrt, t.warmup_steps = 200;
        c.decode.max_len = 12;
        return c;
    }
    if (name == "full" || name == "anchor") {
        d.pipeline = DataPipeline::anchor;
        d.num_steps = 12;
        d.n_valid = 2000, d.n_test = 5000, d.split_seed = 0;
        m.num_hiddens = 256, m.num_blks = 2, m.num_heads = 4, m.ffn_num_hiddens = 1024, m.dropout = 0.1;
        t.epochs = 100, t.batch_size = 128, t.lr = 5e-4;
        t.adam_beta1 = 0.9, t.adam_beta2 = 0.98, t.adam_eps = 1e-9;
        t.time_budget_s = 1200;  // the anchor's 20 minutes of training time
        t.val_every_s = 300;     // validation at 5, 10, 15 minutes and at the end, as the anchor
        t.trim_batches = true;   // skips padded columns only: the same masked loss
        c.decode.max_len = 20;
        if (name == "full") {
            // qkv's own recipe for the same budget and split (issue 7): batches of similar
            // lengths (fewer padded positions per step, so more steps), a warmup + inverse
            // square-root schedule to a higher peak learning rate, and label smoothing.
            t.bucket_pool = 50;
            t.lr = 1e-3;
            t.schedule = optim::LrSchedule::warmup_inv_sqrt, t.warmup_steps = 300;
            t.label_smoothing = 0.1;
            // One shared BPE vocabulary of 8,000 pieces with the embeddings and the output layer
            // tied: test BLEU-4 23.11 -> 32.05 in the same 20 minutes (bench/RESULTS_anchor.md §4).
            // Pieces are 1.17 / 1.29 per word, so num_steps 20 keeps about the same pairs whole
            // as 12 words (0.69 % / 2.26 % of the train pairs cut), and decoding may run to 30.
            d.subword = data::SubwordKind::bpe, d.subword_vocab_size = 8000, d.shared_vocab = true;
            m.tie_weights = true;
            d.num_steps = 20;
            c.decode.max_len = 30;
        }
        return c;
    }
    if (name == "real") {
        // The real-text translator (issue 45; docs/training.md "The real translator"): raw,
        // cased text on the whole corpus, a source-disjoint test split, one shared SentencePiece
        // vocabulary with byte fallback, tied embeddings, label smoothing, warmup + inverse
        // square root, length-bucketed batches. The model size and budget are chosen by
        // measurement on 2 cores (bench/RESULTS.md "The real translator").
        d.pipeline = DataPipeline::text;
        // The length cap in pieces, <eos> included: it keeps every pair of fra.txt but 4 whole
        // at 64; 128 makes room for the concatenated pairs (a 40-word sentence is ~50 pieces).
        d.num_steps = 128;
        d.concat_fraction = 0.075;
        d.n_valid = 2000, d.n_test = 5000, d.split_seed = 0;
        d.subword = data::SubwordKind::bpe, d.subword_vocab_size = 10000, d.shared_vocab = true;
        m.tie_weights = true;
        m.num_hiddens = 256, m.num_blks = 3, m.num_heads = 4, m.ffn_num_hiddens = 1024, m.dropout = 0.1;
        m.max_len = 128;
        t.epochs = 1000, t.time_budget_s = 7200, t.batch_size = 128, t.batch_tokens = 2000, t.lr = 1e-3;
        t.adam_beta1 = 0.9, t.adam_beta2 = 0.98, t.adam_eps = 1e-9;
        t.schedule = optim::LrSchedule::warmup_inv_sqrt, t.warmup_steps = 1000;
        t.label_smoothing = 0.1;
        t.bucket_pool = 50, t.trim_batches = true;
        t.val_every_s = 600;
        c.decode.max_len = 96, c.decode.beam = 4;
        return c;
    }
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(detail::str("unknown preset '", name, "' (choose one of ", names, ")"));
}

/// One section of config.json ("data", "model", ...), for error messages that name the key.
struct Section {
    const json& j;
    const char* name;  // "" for the top level
};

std::string key_name(const Section& s, const char* key) {
    return *s.name ? detail::str(s.name, ".", key) : std::string(key);
}

template <class T>
const char* expected_kind() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    else if constexpr (std::is_same_v<T, std::string>) return "a string";
    else if constexpr (std::is_integral_v<T>) return std::is_unsigned_v<T> ? "an integer >= 0" : "an integer";
    else return "a number";
}

/// v = s.j[key] when present and not null; a value of the wrong type throws naming the key.
template <class T>
bool get(const Section& s, const char* key, T& v) {
    if (!s.j.contains(key) || s.j[key].is_null()) return false;
    const json& x = s.j[key];
    bool ok = false;
    if constexpr (std::is_same_v<T, bool>) ok = x.is_boolean();
    else if constexpr (std::is_same_v<T, std::string>) ok = x.is_string();
    else if constexpr (std::is_unsigned_v<T>) ok = x.is_number_unsigned();
    else if constexpr (std::is_integral_v<T>) ok = x.is_number_integer();
    else ok = x.is_number();
    QKV_CHECK(ok, "key '", key_name(s, key), "' must be ", expected_kind<T>(), ", got ", x.dump());
    v = x.template get<T>();
    return true;
}

/// As get, but a missing key is an error (keys that fix the model's shapes have no sane default).
template <class T>
void need(const Section& s, const char* key, T& v) {
    QKV_CHECK(get(s, key, v), "key '", key_name(s, key), "' is missing");
}

/// The section j[name]; an absent one is empty (optional == true) or an error.
Section section(const json& j, const char* name, bool optional) {
    static const json empty = json::object();
    if (!j.contains(name)) {
        QKV_CHECK(optional, "section '", name, "' is missing");
        return {empty, name};
    }
    QKV_CHECK(j[name].is_object(), "section '", name, "' must be an object, got ", j[name].dump());
    return {j[name], name};
}

/// A row of config_fields() from its section of config.json into c, when present (else the default
/// stays; a required row's absence is an error). The type is checked as get() does, naming the key.
template <class T>
void read_as(const Section& s, const ConfigField& f, RunConfig& c) {
    const std::string name = field_name(f);
    T v{};
    if (f.required) need(s, name.c_str(), v);
    else if (!get(s, name.c_str(), v)) return;
    if constexpr (std::is_same_v<T, std::string>) {
        if (f.type == FieldType::choice) return set_field(f, c, v, detail::str("key '", f.key, "'"));
    }
    set_field(f, c, v);
}

void read_field(const json& j, const ConfigField& f, RunConfig& c) {
    const std::string sec = field_section(f);
    // "model" fixes the parameter shapes: a file without it is no model's; the others may be absent
    const Section s = sec.empty() ? Section{j, ""} : section(j, sec.c_str(), sec != "model");
    switch (f.type) {
        case FieldType::integer: return read_as<int64_t>(s, f, c);
        case FieldType::unsigned_integer: return read_as<uint64_t>(s, f, c);
        case FieldType::real:
        case FieldType::duration: return read_as<double>(s, f, c);
        case FieldType::boolean: return read_as<bool>(s, f, c);
        case FieldType::text:
        case FieldType::choice: return read_as<std::string>(s, f, c);
    }
}

/// "" (unknown) or a BCP 47-shaped tag: a primary subtag of 2-8 ASCII letters, then subtags of
/// 1-8 ASCII letters or digits after '-' ("en", "fr", "pt-BR", "zh-Hant").
bool is_language_code(const std::string& s) {
    if (s.empty()) return true;
    size_t start = 0;
    for (bool primary = true;; primary = false) {
        size_t end = s.find('-', start);
        if (end == std::string::npos) end = s.size();
        const size_t n = end - start;
        if (n < (primary ? 2u : 1u) || n > 8) return false;
        for (size_t i = start; i < end; ++i) {
            const char ch = s[i];
            const bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            if (!letter && (primary || ch < '0' || ch > '9')) return false;
        }
        if (end == s.size()) return true;
        start = end + 1;
    }
}

/// The language model's rules between fields.
void check_lm_rules(const RunConfig& c) {
    const auto& m = c.lm;
    QKV_CHECK(m.num_hiddens % m.num_heads == 0, "key 'model.num_heads' is ", m.num_heads,
              ", expected a divisor of model.num_hiddens (", m.num_hiddens, ")");
    QKV_CHECK(m.num_kv_heads == 0 || m.num_heads % m.num_kv_heads == 0, "key 'model.num_kv_heads' is ", m.num_kv_heads,
              ", expected 0 (= num_heads) or a divisor of model.num_heads ", m.num_heads);
    QKV_CHECK(!m.rope || (m.num_hiddens / m.num_heads) % 2 == 0, "model.positions rope needs an even head width; "
              "model.num_hiddens / model.num_heads is ", m.num_hiddens / m.num_heads);
    QKV_CHECK(m.window == -1 || m.window >= 1, "key 'model.window' is ", m.window,
              ", expected -1 (all positions) or >= 1");
    QKV_CHECK(m.max_len >= 1 && m.max_len <= 1000000000, "key 'model.max_len' is ", m.max_len,
              ", expected an integer from 1 to 1000000000");
    QKV_CHECK(m.rope || m.max_len >= c.data.num_steps, "key 'model.max_len' is ", m.max_len, ", below data.num_steps ",
              c.data.num_steps, ": sinusoidal positions need one for each token of a training sequence");
}

/// The rules between fields (run_config_fields.h: not rows), each message naming the key, the
/// value and what it must be.
void check_rules(const RunConfig& c, bool vocab_known) {
    const auto& dd = c.data;
    for (const auto& [key, code] : {std::pair{"src_lang", &dd.src_lang}, std::pair{"tgt_lang", &dd.tgt_lang}})
        QKV_CHECK(is_language_code(*code), "key 'data.", key, "' is \"", *code, "\", expected a language code such as "
                  "en, fr or pt-BR (BCP 47: 2-8 letters, then -subtags of 1-8 letters or digits)");
    if (c.architecture == ModelKind::lm) {
        check_lm_rules(c);
    } else if (c.architecture == ModelKind::bahdanau) {
        const auto& b = c.bahdanau;
        QKV_CHECK(!b.bidirectional || b.num_hiddens % 2 == 0, "key 'model.num_hiddens' is ", b.num_hiddens,
                  ", expected an even number with model.bidirectional (H/2 per direction)");
    } else {
        const auto& tm = c.model;
        QKV_CHECK(tm.num_hiddens % tm.num_heads == 0, "key 'model.num_heads' is ", tm.num_heads,
                  ", expected a divisor of model.num_hiddens (", tm.num_hiddens, ")");
        // the positional-encoding table covers the encoder's num_steps and the decoder's max_len
        const int64_t need_len = std::max(dd.num_steps, c.decode.max_len);
        QKV_CHECK(tm.max_len >= need_len && tm.max_len <= 1000000, "key 'model.max_len' is ", tm.max_len,
                  ", expected an integer from ", need_len, " to 1000000 (the positional-encoding table must cover "
                  "data.num_steps ", dd.num_steps, " and decode.max_len ", c.decode.max_len, ")");
        QKV_CHECK(!vocab_known || !tm.tie_weights || tm.src_vocab_size == tm.tgt_vocab_size, "key 'model.tie_weights' is true, "
                  "but model.src_vocab_size (", tm.src_vocab_size, ") and model.tgt_vocab_size (", tm.tgt_vocab_size,
                  ") differ (tying needs one shared vocabulary)");
    }
    const auto& tr = c.train;
    // The trainer would refuse it only when training starts, as "Trainer: a warmup schedule ...".
    QKV_CHECK(tr.schedule == optim::LrSchedule::constant || tr.warmup_steps >= 1, "key 'train.warmup_steps' is ",
              tr.warmup_steps, ", expected an integer >= 1 with train.schedule '", schedule_name(tr.schedule),
              "' (it warms up over that many steps)");
}

/// Every row's range (config_fields(): the CLI flags' bounds where there is a flag, else what the
/// code accepts), then the rules between fields. Every message names the key, the value and the
/// range; load_model_dir_config adds the file. vocab_known false: the vocabulary sizes are still to
/// come from the data (not checked).
void check_ranges(const RunConfig& c, bool vocab_known) {
    for (const auto& f : config_fields()) {
        if (!field_in_scope(f, c.architecture) || (f.applies && !f.applies(c)) || (f.from_data && !vocab_known))
            continue;
        const FieldValue v = get_field(f, c);
        QKV_CHECK(field_in_range(v, f.range), "key '", f.key, "' is ", field_value_text(v), ", expected ",
                  field_range_text(f.type, f.range));
    }
    check_rules(c, vocab_known);
}

json field_json(const FieldValue& v) {
    return std::visit([](const auto& x) { return json(x); }, v);
}

/// The records that are not rows: the data's fingerprint, what was done with it, the subword files.
void write_records(const RunConfig& c, json& j) {
    const auto& d = c.data;
    if (d.subword != data::SubwordKind::none) {
        // the SentencePiece model files in the model folder (model_dir.h subword_files)
        const bool shared = d.shared_vocab;
        j["data"]["subword_files"] = {{"source", shared ? "spm.model" : "spm_src.model"},
                                      {"target", shared ? "spm.model" : "spm_tgt.model"}};
    }
    if (c.architecture == ModelKind::lm) {  // the text (characters after preprocessing)
        if (d.fingerprint.characters > 0)
            j["data"]["fingerprint"] = {{"characters", d.fingerprint.characters},
                                        {"fnv1a64", fingerprint_hex(d.fingerprint.fnv1a64)}};
        return;
    }
    if (d.fingerprint.known())  // the data the run was trained on (translation_data.h)
        j["data"]["fingerprint"] = {{"pairs", d.fingerprint.pairs},
                                    {"fnv1a64", fingerprint_hex(d.fingerprint.fnv1a64)}};
    if (d.applied.known()) {  // what was done with it (a record: read back, never acted on)
        const DataRecord& r = d.applied;
        j["data"]["applied"] = {{"pipeline", r.pipeline},
                                {"pairs_read", r.pairs_read},
                                {"malformed_lines", r.malformed},
                                {"dropped", {{"source_too_long", r.source_too_long},
                                             {"target_too_long", r.target_too_long},
                                             {"beyond_max_pairs", r.beyond_max_pairs},
                                             {"over_length_cap", r.over_length_cap},
                                             {"held_out_other_translations", r.held_out_duplicates}}},
                                {"pairs_kept", r.pairs_kept},
                                {"concatenated_train_pairs", r.concatenated},
                                {"split", {{"train", r.train}, {"valid", r.valid}, {"test", r.test}}}};
    }
}

/// data.fingerprint and data.applied (records; older files have none).
void read_records(const json& j, RunConfig& c) {
    const Section d = section(j, "data", true);
    if (d.j.contains("fingerprint") && !d.j["fingerprint"].is_null()) {
        // written by qkv train since the data check; older files have none (no check then)
        const json& fj = d.j["fingerprint"];
        QKV_CHECK(fj.is_object(), "key 'data.fingerprint' must be an object, got ", fj.dump());
        const Section fk{fj, "data.fingerprint"};
        const bool lm = c.architecture == ModelKind::lm;  // a text's characters, not pairs
        int64_t& count = lm ? c.data.fingerprint.characters : c.data.fingerprint.pairs;
        need(fk, lm ? "characters" : "pairs", count);
        QKV_CHECK(count >= 1, "key 'data.fingerprint.", lm ? "characters" : "pairs", "' is ", count,
                  ", expected an integer >= 1");
        std::string hex;
        need(fk, "fnv1a64", hex);
        const bool is_hex = hex.size() == 16 && std::all_of(hex.begin(), hex.end(), [](char ch) {
                                return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
                            });
        QKV_CHECK(is_hex, "key 'data.fingerprint.fnv1a64' is \"", hex, "\", expected 16 lowercase hex digits");
        c.data.fingerprint.fnv1a64 = std::strtoull(hex.c_str(), nullptr, 16);
    }
    if (d.j.contains("applied") && d.j["applied"].is_object()) {
        // a record of the training run (to_json); kept as read so that rewriting the file keeps it
        const json& aj = d.j["applied"];
        DataRecord& r  = c.data.applied;
        const auto num = [](const json& o, const char* k) {
            return o.contains(k) && o[k].is_number_integer() ? o[k].get<int64_t>() : int64_t(0);
        };
        if (aj.contains("pipeline") && aj["pipeline"].is_string()) r.pipeline = aj["pipeline"].get<std::string>();
        r.pairs_read = num(aj, "pairs_read"), r.malformed = num(aj, "malformed_lines"), r.pairs_kept = num(aj, "pairs_kept");
        r.concatenated = num(aj, "concatenated_train_pairs");
        if (aj.contains("dropped") && aj["dropped"].is_object()) {
            const json& dj = aj["dropped"];
            r.source_too_long = num(dj, "source_too_long"), r.target_too_long = num(dj, "target_too_long");
            r.beyond_max_pairs = num(dj, "beyond_max_pairs");
            r.over_length_cap = num(dj, "over_length_cap");
            r.held_out_duplicates = num(dj, "held_out_other_translations");
        }
        if (aj.contains("split") && aj["split"].is_object())
            r.train = num(aj["split"], "train"), r.valid = num(aj["split"], "valid"), r.test = num(aj["split"], "test");
    }
}

}  // namespace

const char* schedule_name(optim::LrSchedule s) {
    switch (s) {
        case optim::LrSchedule::constant: return "constant";
        case optim::LrSchedule::warmup_inv_sqrt: return "warmup_inv_sqrt";
        case optim::LrSchedule::warmup_linear_decay: return "warmup_linear_decay";
    }
    return "constant";
}

optim::LrSchedule parse_schedule(const std::string& s) {
    if (s == "constant") return optim::LrSchedule::constant;
    if (s == "warmup_inv_sqrt") return optim::LrSchedule::warmup_inv_sqrt;
    if (s == "warmup_linear_decay") return optim::LrSchedule::warmup_linear_decay;
    throw Error(detail::str("train.schedule '", s,
                            "' is not constant, warmup_inv_sqrt or warmup_linear_decay"));
}

json to_json(const RunConfig& c) {
    json j;
    for (const auto& f : config_fields()) {
        if (!field_in_scope(f, c.architecture) || (f.applies && !f.applies(c))) continue;
        const std::string sec = field_section(f);
        (sec.empty() ? j : j[sec])[field_name(f)] = field_json(get_field(f, c));
    }
    write_records(c, j);
    return j;
}

void RunConfig::validate() const {
    const bool vocab_known = architecture == ModelKind::lm ? lm.vocab_size != 0
                                                           : model.src_vocab_size != 0 || model.tgt_vocab_size != 0;
    try {
        check_ranges(*this, vocab_known);
    } catch (const Error& e) {
        throw ConfigError(detail::str("invalid training configuration: ", e.what()));
    }
}

RunConfig run_config_from_json(const json& j) {
    QKV_CHECK(j.is_object(), "config.json must be a JSON object, got ", j.type_name());
    RunConfig c;
    if (j.contains("model_kind")) {  // a language model's: its rows only
        read_field(j, config_field("model_kind"), c);
        c.train.schedule = optim::LrSchedule::warmup_inv_sqrt;  // the language model's, not recorded
    }
    // Rows in table order: model.architecture comes before the rows of one architecture only.
    // Keys added later keep their defaults when absent (older files).
    for (const auto& f : config_fields())
        if (field_in_scope(f, c.architecture)) read_field(j, f, c);
    QKV_CHECK(c.data.src_file.empty() == c.data.tgt_file.empty(),
              "keys 'data.src_file' and 'data.tgt_file' go together (one is missing)");
    read_records(j, c);
    check_ranges(c, true);
    return c;
}

double parse_duration(const std::string& s) {
    QKV_CHECK(!s.empty(), "duration is empty (use e.g. 90s, 20m, 1.5h)");
    double mult = 1;
    std::string num = s;
    const char u = s.back();
    if (u == 's' || u == 'm' || u == 'h') {
        mult = u == 's' ? 1 : u == 'm' ? 60 : 3600;
        num.pop_back();
    }
    // strtod alone also reads "0x10" (16), " 5", "inf" and "nan".
    const bool decimal = !num.empty() && (std::isdigit(static_cast<unsigned char>(num[0])) || num[0] == '.') &&
                         num.find_first_not_of("0123456789.eE+-") == std::string::npos;
    char* end = nullptr;
    const double v = decimal ? std::strtod(num.c_str(), &end) : 0.0;
    QKV_CHECK(decimal && end == num.c_str() + num.size() && std::isfinite(v * mult) && v >= 0,
              "cannot read duration '", s, "' (use e.g. 90s, 20m, 1.5h)");
    return v * mult;
}

double parse_duration_or_off(const std::string& s) {
    if (s == "none" || s == "off") return 0;
    const double v = parse_duration(s);
    QKV_CHECK(v > 0, "a duration of 0 is not allowed; write 'none' (or 'off') to switch it off");
    QKV_CHECK(v >= kMinDurationSeconds, "a duration under ", kMinDurationSeconds, " s is not allowed, got '", s,
              "' (", v, " s); write 'none' (or 'off') to switch it off");
    QKV_CHECK(v <= kMaxDurationSeconds, "a duration over ", kMaxDurationSeconds, " s (3 years) is not allowed, got '",
              s, "'; write 'none' (or 'off') for no limit");
    return v;
}

double check_duration_seconds(double seconds, const std::string& name) {
    QKV_CHECK(std::isfinite(seconds) && seconds >= 0, name, " must be a number of seconds >= 0 (0: no limit), got ",
              seconds);
    QKV_CHECK(seconds == 0 || seconds >= kMinDurationSeconds, name, " under ", kMinDurationSeconds,
              " s is not allowed, got ", seconds, " s; give 0 or 'none' to switch it off");
    QKV_CHECK(seconds <= kMaxDurationSeconds, name, " over ", kMaxDurationSeconds, " s (3 years) is not allowed, got ",
              seconds, " s; give 0 or 'none' for no limit");
    return seconds == 0 ? 0.0 : seconds;  // -0.0 would be written to config.json as -0.0
}

}  // namespace qkv::runtime
