// Presets and the config.json form of RunConfig.
#include "qkv/runtime/run_config.h"

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

const char* model_kind_name(ModelKind k) { return k == ModelKind::bahdanau ? "bahdanau" : "transformer"; }

ModelKind parse_model_kind(const std::string& s) {
    if (s == "transformer") return ModelKind::transformer;
    if (s == "bahdanau") return ModelKind::bahdanau;
    throw Error(detail::str("model architecture '", s, "' is not transformer or bahdanau"));
}

namespace {
RunConfig transformer_preset(const std::string& name);
}  // namespace

RunConfig preset_config(const std::string& name, ModelKind kind) {
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

const char* pipeline_name(DataPipeline p) {
    switch (p) {
        case DataPipeline::d2l_en: return "d2l_en";
        case DataPipeline::anchor: return "anchor";
        case DataPipeline::text: return "text";
    }
    return "anchor";
}

DataPipeline parse_pipeline(const std::string& s) {
    if (s == "d2l_en") return DataPipeline::d2l_en;
    if (s == "anchor") return DataPipeline::anchor;
    if (s == "text") return DataPipeline::text;
    throw Error(detail::str("data.pipeline '", s, "' is not d2l_en, anchor or text"));
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

std::string num_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

/// Range checks after reading: "key 'data.num_steps' is 0, expected an integer from 2 to 1000".
/// hi == INT64_MAX: no upper bound ("an integer >= 2").
void check_int(const Section& s, const char* key, int64_t v, int64_t lo, int64_t hi = INT64_MAX) {
    QKV_CHECK(v >= lo && v <= hi, "key '", key_name(s, key), "' is ", v, ", expected an integer ",
              hi == INT64_MAX ? ">= " + std::to_string(lo)
                              : "from " + std::to_string(lo) + " to " + std::to_string(hi));
}

/// A real number in [lo, hi] (or (lo, ...] when lo_open, [..., hi) when hi_open); hi = inf: no
/// upper bound.
void check_real(const Section& s, const char* key, double v, double lo, double hi, bool lo_open = false,
                bool hi_open = false) {
    const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    std::string range;
    if (std::isinf(hi)) range = std::string(lo_open ? "> " : ">= ") + num_text(lo);
    else if (!lo_open && !hi_open) range = "from " + num_text(lo) + " to " + num_text(hi);
    else range = std::string(lo_open ? "> " : ">= ") + num_text(lo) + " and " + (hi_open ? "< " : "<= ") + num_text(hi);
    QKV_CHECK(ok, "key '", key_name(s, key), "' is ", num_text(v), ", expected a number ", range);
}

constexpr double kInf = std::numeric_limits<double>::infinity();

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

/// The range and consistency rules of a configuration; every message names the key, the value and
/// the range. vocab_known false: the vocabulary sizes are still to come from the data (not checked).
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

void check_ranges(const RunConfig& c, bool vocab_known) {
    // Ranges: the CLI flags' bounds (apps/qkv) where there is a flag, else what the code accepts.
    // Every message names the key, the value and the range; load_model_dir_config adds the file.
    static const json none = json::object();
    const Section d{none, "data"}, m{none, "model"}, t{none, "train"}, dec{none, "decode"};
    const auto& dd = c.data;
    check_int(d, "num_steps", dd.num_steps, 2, 1000);
    check_int(d, "max_src_tokens", dd.max_src_tokens, 0, 1000);
    check_int(d, "max_tgt_tokens", dd.max_tgt_tokens, 0, 1000);
    check_int(d, "max_pairs", dd.max_pairs, 0);
    check_int(d, "n_valid", dd.n_valid, 1);
    check_int(d, "n_test", dd.n_test, 1);
    check_int(d, "min_freq", dd.min_freq, 0);
    check_int(d, "d2l_num_train", dd.d2l_num_train, 1);
    check_int(d, "d2l_num_val", dd.d2l_num_val, 0);
    check_real(d, "concat_fraction", dd.concat_fraction, 0, 1);
    for (const auto& [key, code] : {std::pair{"src_lang", &dd.src_lang}, std::pair{"tgt_lang", &dd.tgt_lang}})
        QKV_CHECK(is_language_code(*code), "key 'data.", key, "' is \"", *code, "\", expected a language code such as "
                  "en, fr or pt-BR (BCP 47: 2-8 letters, then -subtags of 1-8 letters or digits)");
    if (dd.subword != data::SubwordKind::none)  // ignored (and no longer written) for words
        check_int(d, "subword_vocab_size", dd.subword_vocab_size, 5, int64_t(1) << 24);
    check_int(dec, "max_len", c.decode.max_len, 1, 1000);
    check_int(dec, "beam", c.decode.beam, 1, 100);
    check_real(dec, "length_penalty", c.decode.length_penalty, 0, 10);
    // 4 reserved tokens (<unk> <pad> <bos> <eos>) at least
    if (vocab_known) {
        check_int(m, "src_vocab_size", c.model.src_vocab_size, 4);
        check_int(m, "tgt_vocab_size", c.model.tgt_vocab_size, 4);
    }
    if (c.architecture == ModelKind::bahdanau) {
        const auto& b = c.bahdanau;
        check_int(m, "embed_size", b.embed_size, 1, 65536);
        check_int(m, "num_hiddens", b.num_hiddens, 1, 65536);
        check_int(m, "num_layers", b.num_layers, 1, 64);
        QKV_CHECK(!b.bidirectional || b.num_hiddens % 2 == 0, "key 'model.num_hiddens' is ", b.num_hiddens,
                  ", expected an even number with model.bidirectional (H/2 per direction)");
        check_real(m, "dropout", b.dropout, 0, 1, false, /*hi_open=*/true);
    } else {
        const auto& tm = c.model;
        check_int(m, "num_hiddens", tm.num_hiddens, 1, 65536);
        check_int(m, "num_blks", tm.num_blks, 1, 64);
        check_int(m, "num_heads", tm.num_heads, 1, 1024);
        QKV_CHECK(tm.num_hiddens % tm.num_heads == 0, "key 'model.num_heads' is ", tm.num_heads,
                  ", expected a divisor of model.num_hiddens (", tm.num_hiddens, ")");
        check_int(m, "ffn_num_hiddens", tm.ffn_num_hiddens, 1, 262144);
        check_real(m, "dropout", tm.dropout, 0, 1, false, /*hi_open=*/true);
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
    check_int(t, "epochs", tr.epochs, 1, 1000000);
    check_int(t, "max_steps", tr.max_steps, 0);
    check_real(t, "time_budget_s", tr.time_budget_s, 0, kMaxDurationSeconds);
    check_int(t, "batch_size", tr.batch_size, 1, 100000);
    check_real(t, "lr", tr.lr, 0, 10, /*lo_open=*/true);
    check_real(t, "adam_beta1", tr.adam_beta1, 0, 1, false, /*hi_open=*/true);
    check_real(t, "adam_beta2", tr.adam_beta2, 0, 1, false, /*hi_open=*/true);
    check_real(t, "adam_eps", tr.adam_eps, 0, kInf, /*lo_open=*/true);
    check_real(t, "clip_norm", tr.clip_norm, 0, 1e6);
    check_real(t, "label_smoothing", tr.label_smoothing, 0, 1, false, /*hi_open=*/true);
    check_int(t, "warmup_steps", tr.warmup_steps, 0);
    // The trainer would refuse it only when training starts, as "Trainer: a warmup schedule ...".
    QKV_CHECK(tr.schedule == optim::LrSchedule::constant || tr.warmup_steps >= 1, "key '",
              key_name(t, "warmup_steps"), "' is ", tr.warmup_steps, ", expected an integer >= 1 with train.schedule '",
              schedule_name(tr.schedule), "' (it warms up over that many steps)");
    check_int(t, "val_batch_size", tr.val_batch_size, 1);
    check_int(t, "bucket_pool", tr.bucket_pool, 0, 1000000);
    check_int(t, "batch_tokens", tr.batch_tokens, 0, 100000000);
    check_real(t, "val_every_s", tr.val_every_s, 0, kMaxDurationSeconds);
    check_int(t, "log_every", c.log_every, 0, 1000000000);
    check_int(t, "keep_checkpoints", c.keep_checkpoints, 0, 1000000);
    check_int(Section{none, ""}, "world_size", c.world_size, 1, 1000000);
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
    j["preset"] = c.preset;
    j["world_size"] = c.world_size;
    const auto& d = c.data;
    j["data"] = {{"path", d.path},
                 {"src_lang", d.src_lang},
                 {"tgt_lang", d.tgt_lang},
                 {"pipeline", pipeline_name(d.pipeline)},
                 {"num_steps", d.num_steps},
                 {"strict", d.strict},
                 {"max_src_tokens", d.max_src_tokens},
                 {"max_tgt_tokens", d.max_tgt_tokens},
                 {"max_pairs", d.max_pairs},
                 {"n_valid", d.n_valid},
                 {"n_test", d.n_test},
                 {"split_seed", d.split_seed},
                 {"concat_fraction", d.concat_fraction},
                 {"min_freq", d.min_freq},
                 {"d2l_num_train", d.d2l_num_train},
                 {"d2l_num_val", d.d2l_num_val},
                 {"subword", data::subword_kind_name(d.subword)},
                 {"shared_vocab", d.shared_vocab}};
    if (!d.src_file.empty()) {  // a line-aligned file pair instead of path
        j["data"]["src_file"] = d.src_file;
        j["data"]["tgt_file"] = d.tgt_file;
    }
    if (d.subword != data::SubwordKind::none) {
        // (a word run has no subword vocabulary: the key is left out; older files that have it
        // are still read)
        j["data"]["subword_vocab_size"] = d.subword_vocab_size;
        // the SentencePiece model files in the model folder (model_dir.h subword_files)
        const bool shared = d.shared_vocab;
        j["data"]["subword_files"] = {{"source", shared ? "spm.model" : "spm_src.model"},
                                      {"target", shared ? "spm.model" : "spm_tgt.model"}};
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
    const auto& m = c.model;
    if (c.architecture == ModelKind::bahdanau) {
        const auto& b = c.bahdanau;
        j["model"] = {{"architecture", "bahdanau"},
                      {"src_vocab_size", m.src_vocab_size},
                      {"tgt_vocab_size", m.tgt_vocab_size},
                      {"embed_size", b.embed_size},
                      {"num_hiddens", b.num_hiddens},
                      {"num_layers", b.num_layers},
                      {"bidirectional", b.bidirectional},
                      {"dropout", b.dropout},
                      {"init", b.init == models::BahdanauInit::d2l_en   ? "d2l_en"
                               : b.init == models::BahdanauInit::d2l_zh ? "d2l_zh"
                                                                        : "pytorch"}};
    } else {
        j["model"] = {{"architecture", "transformer"},
                      {"src_vocab_size", m.src_vocab_size},
                      {"tgt_vocab_size", m.tgt_vocab_size},
                      {"num_hiddens", m.num_hiddens},
                      {"num_blks", m.num_blks},
                      {"num_heads", m.num_heads},
                      {"ffn_num_hiddens", m.ffn_num_hiddens},
                      {"dropout", m.dropout},
                      {"max_len", m.max_len},
                      {"pe_position_zero_at_inference", m.pe_position_zero_at_inference},
                      {"tie_weights", m.tie_weights}};
    }
    const auto& t = c.train;
    j["train"] = {{"epochs", t.epochs},
                  {"max_steps", t.max_steps},
                  {"time_budget_s", t.time_budget_s},
                  {"batch_size", t.batch_size},
                  {"lr", t.lr},
                  {"adam_beta1", t.adam_beta1},
                  {"adam_beta2", t.adam_beta2},
                  {"adam_eps", t.adam_eps},
                  {"clip_norm", t.clip_norm},
                  {"loss_on_padding", t.loss_on_padding},
                  {"label_smoothing", t.label_smoothing},
                  {"schedule", schedule_name(t.schedule)},
                  {"warmup_steps", t.warmup_steps},
                  {"seed", t.seed},
                  {"val_batch_size", t.val_batch_size},
                  {"trim_batches", t.trim_batches},
                  {"bucket_pool", t.bucket_pool},
                  {"batch_tokens", t.batch_tokens},
                  {"val_every_s", t.val_every_s},
                  {"precision", precision_name(t.precision)},
                  {"log_every", c.log_every},
                  {"keep_checkpoints", c.keep_checkpoints}};
    if (t.shard_optimizer) j["train"]["shard_optimizer"] = true;  // written when set: older configs stay as they were
    j["decode"] = {{"max_len", c.decode.max_len},
                   {"beam", c.decode.beam},
                   {"length_penalty", c.decode.length_penalty}};
    return j;
}

void RunConfig::validate() const {
    const bool vocab_known = model.src_vocab_size != 0 || model.tgt_vocab_size != 0;
    try {
        check_ranges(*this, vocab_known);
    } catch (const Error& e) {
        throw ConfigError(detail::str("invalid training configuration: ", e.what()));
    }
}

RunConfig run_config_from_json(const json& j) {
    QKV_CHECK(j.is_object(), "config.json must be a JSON object, got ", j.type_name());
    RunConfig c;
    get(Section{j, ""}, "preset", c.preset);
    get(Section{j, ""}, "world_size", c.world_size);  // older files: 1
    const Section d = section(j, "data", true);
    get(d, "path", c.data.path);
    get(d, "src_file", c.data.src_file);  // older files: none (fra-eng or a TSV path)
    get(d, "tgt_file", c.data.tgt_file);
    get(d, "src_lang", c.data.src_lang);  // older files: none (they were all fra-eng: en, fr)
    get(d, "tgt_lang", c.data.tgt_lang);
    QKV_CHECK(c.data.src_file.empty() == c.data.tgt_file.empty(),
              "keys 'data.src_file' and 'data.tgt_file' go together (one is missing)");
    std::string s;
    if (get(d, "pipeline", s)) c.data.pipeline = parse_pipeline(s);
    need(d, "num_steps", c.data.num_steps);
    get(d, "strict", c.data.strict);
    get(d, "max_src_tokens", c.data.max_src_tokens);
    get(d, "max_tgt_tokens", c.data.max_tgt_tokens);
    get(d, "max_pairs", c.data.max_pairs);
    get(d, "n_valid", c.data.n_valid);
    get(d, "n_test", c.data.n_test);
    get(d, "split_seed", c.data.split_seed);
    get(d, "concat_fraction", c.data.concat_fraction);  // older files: none (0)
    get(d, "min_freq", c.data.min_freq);
    get(d, "d2l_num_train", c.data.d2l_num_train);
    get(d, "d2l_num_val", c.data.d2l_num_val);
    if (get(d, "subword", s)) c.data.subword = data::parse_subword_kind(s);
    get(d, "subword_vocab_size", c.data.subword_vocab_size);
    get(d, "shared_vocab", c.data.shared_vocab);
    if (d.j.contains("fingerprint") && !d.j["fingerprint"].is_null()) {
        // written by qkv train since the data check; older files have none (no check then)
        const json& fj = d.j["fingerprint"];
        QKV_CHECK(fj.is_object(), "key 'data.fingerprint' must be an object, got ", fj.dump());
        const Section fk{fj, "data.fingerprint"};
        need(fk, "pairs", c.data.fingerprint.pairs);
        check_int(fk, "pairs", c.data.fingerprint.pairs, 1);
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

    const Section m = section(j, "model", false);
    if (get(m, "architecture", s)) c.architecture = parse_model_kind(s);
    need(m, "src_vocab_size", c.model.src_vocab_size);
    need(m, "tgt_vocab_size", c.model.tgt_vocab_size);
    if (c.architecture == ModelKind::bahdanau) {
        auto& b = c.bahdanau;
        need(m, "embed_size", b.embed_size);
        need(m, "num_hiddens", b.num_hiddens);
        need(m, "num_layers", b.num_layers);
        get(m, "bidirectional", b.bidirectional);  // absent in older files: D2L's encoder
        get(m, "dropout", b.dropout);
        c.model.num_hiddens = b.num_hiddens;  // as before: model.* mirrors the shared keys
        get(m, "dropout", c.model.dropout);
        if (get(m, "init", s)) {
            QKV_CHECK(s == "d2l_en" || s == "d2l_zh" || s == "pytorch", "model.init '", s,
                      "' is not d2l_en, d2l_zh or pytorch");
            b.init = s == "d2l_en"   ? models::BahdanauInit::d2l_en
                     : s == "d2l_zh" ? models::BahdanauInit::d2l_zh
                                     : models::BahdanauInit::pytorch;
        }
    } else {
        need(m, "num_hiddens", c.model.num_hiddens);
        need(m, "num_blks", c.model.num_blks);
        need(m, "num_heads", c.model.num_heads);
        need(m, "ffn_num_hiddens", c.model.ffn_num_hiddens);
        get(m, "dropout", c.model.dropout);
        get(m, "max_len", c.model.max_len);
        get(m, "pe_position_zero_at_inference", c.model.pe_position_zero_at_inference);
        get(m, "tie_weights", c.model.tie_weights);
    }

    const Section t = section(j, "train", true);
    get(t, "epochs", c.train.epochs);
    get(t, "max_steps", c.train.max_steps);
    get(t, "time_budget_s", c.train.time_budget_s);
    get(t, "batch_size", c.train.batch_size);
    get(t, "lr", c.train.lr);
    get(t, "adam_beta1", c.train.adam_beta1);
    get(t, "adam_beta2", c.train.adam_beta2);
    get(t, "adam_eps", c.train.adam_eps);
    get(t, "clip_norm", c.train.clip_norm);
    get(t, "loss_on_padding", c.train.loss_on_padding);
    get(t, "label_smoothing", c.train.label_smoothing);
    if (get(t, "schedule", s)) c.train.schedule = parse_schedule(s);
    get(t, "warmup_steps", c.train.warmup_steps);
    get(t, "seed", c.train.seed);
    get(t, "val_batch_size", c.train.val_batch_size);
    get(t, "trim_batches", c.train.trim_batches);
    get(t, "bucket_pool", c.train.bucket_pool);
    get(t, "batch_tokens", c.train.batch_tokens);
    get(t, "val_every_s", c.train.val_every_s);
    if (get(t, "precision", s)) c.train.precision = parse_precision(s, "key 'train.precision'");  // older: fp32
    get(t, "shard_optimizer", c.train.shard_optimizer);  // older files: false
    get(t, "log_every", c.log_every);  // older files: the default
    get(t, "keep_checkpoints", c.keep_checkpoints);  // older files: 0

    const Section dec = section(j, "decode", true);
    get(dec, "max_len", c.decode.max_len);
    get(dec, "beam", c.decode.beam);
    get(dec, "length_penalty", c.decode.length_penalty);

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
