// The decoder-only language model's data, runs, folders and sampling (train/lm.h).
#include "qkv/train/lm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <csignal>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/corpus.h"
#include "qkv/dist/communicator.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/generate.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_recorder.h"
#include "qkv/train/translation_data.h"
#include "qkv/train/trainer.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/interrupt.h"
#include "train/replaced_run.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

LmConfig lm_preset(const std::string& name) {
    LmConfig c;
    auto& m = c.model;
    auto& t = c.train;
    t.schedule = optim::LrSchedule::warmup_inv_sqrt, t.warmup_steps = 100, t.lr = 1e-3, t.adam_beta2 = 0.98;
    t.clip_norm = 1.0, t.epochs = 1000, t.val_every_s = 60;
    if (name == "lm") {
        m.num_hiddens = 128, m.num_heads = 4, m.num_blks = 2, m.ffn_num_hiddens = 512, m.dropout = 0.1;
        c.num_steps = 64, t.batch_size = 32, t.time_budget_s = 180;
    } else if (name == "lm-tiny") {
        m.num_hiddens = 32, m.num_heads = 2, m.num_blks = 1, m.ffn_num_hiddens = 64, m.dropout = 0.0;
        c.num_steps = 16, t.batch_size = 16, t.time_budget_s = 20, t.warmup_steps = 10, t.val_every_s = 0;
    } else {
        throw Error(detail::str("unknown language-model preset '", name, "' (known: lm, lm-tiny)"));
    }
    return c;
}

std::string preprocess_lm_text(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    bool space = false;
    for (unsigned char ch : text) {
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            if (space && !out.empty()) out += ' ';
            space = false;
            out += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        } else {
            space = true;
        }
    }
    return out;
}

std::string read_lm_text(const std::string& path) {
    std::string bytes = data::read_corpus_file(path);
    QKV_CHECK(bytes.compare(0, 4, "PK\x03\x04") != 0, "'", path, "' is a zip archive; --model lm reads a plain text "
              "file (UTF-8, or gzip-compressed): unpack it first");
    const auto line_of = [&bytes](size_t off) { return 1 + std::count(bytes.begin(), bytes.begin() + off, '\n'); };
    const size_t nul = bytes.find('\0');
    QKV_CHECK(nul == std::string::npos, "'", path, "' is not text: a NUL byte on line ", line_of(nul), " (byte ", nul,
              "); --model lm reads a plain UTF-8 text file");
    const size_t bad = data::invalid_utf8_offset(bytes);
    QKV_CHECK(bad == std::string::npos, "'", path, "' is not UTF-8: an ill-formed byte sequence on line ", line_of(bad),
              " (byte ", bad, "); convert it first (e.g. iconv -f latin1 -t utf-8)");
    return bytes;
}

std::string perplexity_text(double loss) {
    const double p = std::exp(loss);
    if (!std::isfinite(p))
        return std::isfinite(loss) ? "inf (exp of the loss overflows: the run diverged)"
                                   : "nan (the validation loss is not finite: the run diverged)";
    char buf[32];
    std::snprintf(buf, sizeof buf, p < 1e6 ? "%.3f" : "%.3g", p);
    return buf;
}

namespace {

std::string locate_lm_text(const std::string& path) {
    std::string p = path, why = "--data";
    if (p.empty()) {
        const char* env = std::getenv("QKV_LM_DATA");
        p   = env && *env ? env : kLmTextDefaultPath;
        why = env && *env ? "QKV_LM_DATA" : "the default";
    }
    std::error_code ec;
    QKV_CHECK(!fs::is_directory(p, ec), "language-model text '", p, "' (", why, ") is a folder; pass a text file");
    QKV_CHECK(fs::is_regular_file(p, ec), "language-model text '", p, "' not found (", why,
              "); pass a text file with --data (The Time Machine: www.gutenberg.org/ebooks/35, public domain)");
    return p;
}

/// Windows of T + 1 tokens every T tokens of ids[begin, end).
data::NmtArrays windows(const std::vector<int64_t>& ids, int64_t begin, int64_t end, int64_t T) {
    data::NmtArrays a;
    a.num_steps = T;
    for (int64_t s = begin; s + T + 1 <= end; s += T) {
        // NmtArrays holds (N, T) sources: a row of T zeros the model ignores.
        a.src.insert(a.src.end(), size_t(T), 0);
        a.src_valid_len.push_back(1);
        for (int64_t t = 0; t < T; ++t) a.dec_input.push_back(ids[size_t(s + t)]), a.label.push_back(ids[size_t(s + t + 1)]);
        a.tgt_valid_len.push_back(T);
        ++a.n;
    }
    return a;
}

}  // namespace

LmData load_lm_data(const LmConfig& cfg, const data::Vocab* given) {
    QKV_CHECK(cfg.num_steps >= 1, "language model: num_steps must be >= 1, got ", cfg.num_steps);
    QKV_CHECK(cfg.valid_fraction > 0 && cfg.valid_fraction < 0.5, "language model: valid_fraction must be in (0, 0.5), got ",
              cfg.valid_fraction);
    const std::string path = locate_lm_text(cfg.path);
    const std::string text = preprocess_lm_text(read_lm_text(path));
    LmData d;
    d.fingerprint_chars = int64_t(text.size());
    d.fingerprint_fnv1a64 = dist::fingerprint(text);
    if (given && cfg.fingerprint_chars > 0)
        QKV_CHECK(d.fingerprint_chars == cfg.fingerprint_chars && d.fingerprint_fnv1a64 == cfg.fingerprint_fnv1a64, "'",
                  path, "' is not the text this model was trained on: ", d.fingerprint_chars, " characters after "
                  "preprocessing, FNV-1a 64 ", fingerprint_hex(d.fingerprint_fnv1a64), "; config.json records ",
                  cfg.fingerprint_chars, " characters, ", fingerprint_hex(cfg.fingerprint_fnv1a64),
                  " (data.fingerprint). Give the original text with --data, or train a new model");
    if (given) {
        d.vocab = *given;
        std::set<char> unknown;
        for (char ch : text)
            if (d.vocab.token_to_idx(std::string(1, ch)) == d.vocab.unk()) unknown.insert(ch);
        QKV_CHECK(unknown.empty(), "'", path, "' holds characters the model's vocabulary lacks: '",
                  std::string(unknown.begin(), unknown.end()), "' (a different text than it was trained on?)");
    } else {
        std::vector<std::string> toks = {data::Vocab::kUnk, data::Vocab::kPad, " "};
        std::set<char> seen;
        for (char ch : text)
            if (ch != ' ') seen.insert(ch);
        for (char ch : seen) toks.push_back(std::string(1, ch));
        d.vocab = data::Vocab(toks);
    }
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (char ch : text) ids.push_back(d.vocab.token_to_idx(std::string(1, ch)));
    const auto n = int64_t(ids.size());
    const int64_t split = int64_t(double(n) * (1.0 - cfg.valid_fraction));
    d.train = windows(ids, 0, split, cfg.num_steps);
    d.valid = windows(ids, split, n, cfg.num_steps);
    if (d.train.n < 1 || d.valid.n < 1) {
        // The smallest length whose both parts hold a sequence of num_steps + 1.
        int64_t need = cfg.num_steps + 1;
        while (int64_t(double(need) * (1.0 - cfg.valid_fraction)) < cfg.num_steps + 1 ||
               need - int64_t(double(need) * (1.0 - cfg.valid_fraction)) < cfg.num_steps + 1)
            ++need;
        throw Error(detail::str("'", path, "' has ", n, " characters after preprocessing: too short; the held-out last ",
                                cfg.valid_fraction * 100, " % and the rest must each hold one sequence of ",
                                cfg.num_steps + 1, " characters (num_steps + 1), which takes at least ", need,
                                " characters"));
    }
    d.train_tokens = split, d.valid_tokens = n - split;
    d.summary = detail::str(path, ": ", n, " characters after D2L's preprocessing, vocabulary ", d.vocab.size(), "; ",
                            d.train.n, " training sequences of ", cfg.num_steps, " (", split, " characters), ", d.valid.n,
                            " validation sequences (the last ", n - split, ")");
    return d;
}

void check_lm_config(const LmConfig& c) {
    const auto& m = c.model;
    const auto& t = c.train;
    const auto at_least = [](const char* key, int64_t v, int64_t lo) {
        QKV_CHECK(v >= lo, "key '", key, "' is ", v, ", expected >= ", lo);
    };
    at_least("model.num_hiddens", m.num_hiddens, 1);
    at_least("model.num_heads", m.num_heads, 1);
    at_least("model.num_blks", m.num_blks, 1);
    at_least("model.ffn_num_hiddens", m.ffn_num_hiddens, 1);
    at_least("model.max_len", m.max_len, 1);
    at_least("data.num_steps", c.num_steps, 1);
    at_least("train.batch_size", t.batch_size, 1);
    at_least("train.epochs", t.epochs, 1);
    at_least("train.max_steps", t.max_steps, 0);
    at_least("train.warmup_steps", t.warmup_steps, 0);
    at_least("train.log_every", c.log_every, 1);
    if (m.vocab_size != 0) at_least("model.vocab_size", m.vocab_size, 4);
    QKV_CHECK(m.num_hiddens % m.num_heads == 0, "key 'model.num_heads' is ", m.num_heads, ", which does not divide "
              "model.num_hiddens ", m.num_hiddens);
    QKV_CHECK(m.num_kv_heads >= 0 && (m.num_kv_heads == 0 || m.num_heads % m.num_kv_heads == 0), "key "
              "'model.num_kv_heads' is ", m.num_kv_heads, ", expected 0 (= num_heads) or a divisor of model.num_heads ",
              m.num_heads);
    QKV_CHECK(!m.rope || (m.num_hiddens / m.num_heads) % 2 == 0, "model.positions rope needs an even head width; "
              "model.num_hiddens / model.num_heads is ", m.num_hiddens / m.num_heads);
    QKV_CHECK(m.dropout >= 0 && m.dropout < 1, "key 'model.dropout' is ", m.dropout, ", expected a number in [0, 1)");
    QKV_CHECK(m.window == -1 || m.window >= 1, "key 'model.window' is ", m.window,
              ", expected -1 (all positions) or >= 1");
    QKV_CHECK(m.rope || m.max_len >= c.num_steps, "key 'model.max_len' is ", m.max_len, ", below data.num_steps ",
              c.num_steps, ": sinusoidal positions need one for each token of a training sequence");
    QKV_CHECK(c.valid_fraction > 0 && c.valid_fraction < 0.5, "key 'data.valid_fraction' is ", c.valid_fraction,
              ", expected a number in (0, 0.5)");
    QKV_CHECK(std::isfinite(t.lr) && t.lr > 0, "key 'train.lr' is ", t.lr, ", expected a number > 0");
    QKV_CHECK(std::isfinite(t.adam_beta2) && t.adam_beta2 > 0 && t.adam_beta2 < 1, "key 'train.adam_beta2' is ",
              t.adam_beta2, ", expected a number in (0, 1)");
    QKV_CHECK(std::isfinite(t.clip_norm) && t.clip_norm >= 0, "key 'train.clip_norm' is ", t.clip_norm,
              ", expected a number >= 0 (0: no clipping)");
    QKV_CHECK(std::isfinite(t.time_budget_s) && t.time_budget_s >= 0, "key 'train.time_budget_s' is ", t.time_budget_s,
              ", expected seconds >= 0 (0: none)");
    QKV_CHECK(std::isfinite(t.val_every_s) && t.val_every_s >= 0, "key 'train.val_every_s' is ", t.val_every_s,
              ", expected seconds >= 0 (0: at epoch ends)");
}

std::string lm_config_json(const LmConfig& c) {
    const auto& m = c.model;
    const auto& t = c.train;
    json j;
    j["model_kind"] = "lm";
    j["data"]       = {{"path", c.path}, {"num_steps", c.num_steps}, {"valid_fraction", c.valid_fraction}};
    if (c.fingerprint_chars > 0)
        j["data"]["fingerprint"] = {{"characters", c.fingerprint_chars}, {"fnv1a64", fingerprint_hex(c.fingerprint_fnv1a64)}};
    j["model"]      = {{"vocab_size", m.vocab_size}, {"num_hiddens", m.num_hiddens}, {"num_heads", m.num_heads},
                       {"num_kv_heads", m.num_kv_heads}, {"num_blks", m.num_blks}, {"ffn_num_hiddens", m.ffn_num_hiddens},
                       {"dropout", m.dropout}, {"positions", m.rope ? "rope" : "sinusoidal"}, {"window", m.window},
                       {"max_len", m.max_len}};
    j["train"] = {{"epochs", t.epochs}, {"max_steps", t.max_steps}, {"time_budget_s", t.time_budget_s},
                  {"batch_size", t.batch_size}, {"lr", t.lr}, {"adam_beta2", t.adam_beta2}, {"clip_norm", t.clip_norm},
                  {"warmup_steps", t.warmup_steps}, {"seed", t.seed}, {"val_every_s", t.val_every_s},
                  {"log_every", c.log_every}, {"precision", precision_name(t.precision)}};
    return j.dump(2) + "\n";
}

LmConfig lm_config_from_json(const std::string& text, const std::string& origin) {
    try {
        const json j = json::parse(text);
        QKV_CHECK(j.is_object() && j.value("model_kind", "") == "lm", "'", origin, "' is not a language model's config.json "
                  "(no \"model_kind\": \"lm\")");
        LmConfig c;
        const json &d = j.at("data"), &m = j.at("model"), &t = j.at("train");
        // Whole numbers must be whole (json's conversion would cut 1.5 to 1 and wrap 1e20).
        const auto integer = [](const json& sec, const char* section, const char* key) {
            const json& v = sec.at(key);
            QKV_CHECK(v.is_number_integer(), "key '", section, ".", key, "' is ", v.dump(), ", expected an integer");
            return v.get<int64_t>();
        };
        const auto number = [](const json& sec, const char* section, const char* key) {
            const json& v = sec.at(key);
            QKV_CHECK(v.is_number(), "key '", section, ".", key, "' is ", v.dump(), ", expected a number");
            return v.get<double>();
        };
        c.path = d.at("path"), c.num_steps = integer(d, "data", "num_steps");
        c.valid_fraction = number(d, "data", "valid_fraction");
        if (d.contains("fingerprint")) {
            const json& f = d.at("fingerprint");
            c.fingerprint_chars = integer(f, "data.fingerprint", "characters");
            const std::string hex = f.at("fnv1a64");
            QKV_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos, "'", origin,
                      "': data.fingerprint.fnv1a64 is \"", hex, "\", expected 16 lowercase hex digits");
            QKV_CHECK(c.fingerprint_chars > 0, "'", origin, "': data.fingerprint.characters must be > 0, got ",
                      c.fingerprint_chars);
            c.fingerprint_fnv1a64 = std::strtoull(hex.c_str(), nullptr, 16);
        }
        auto& mm = c.model;
        mm.vocab_size = integer(m, "model", "vocab_size"), mm.num_hiddens = integer(m, "model", "num_hiddens");
        mm.num_heads = integer(m, "model", "num_heads"), mm.num_kv_heads = integer(m, "model", "num_kv_heads");
        mm.num_blks = integer(m, "model", "num_blks"), mm.ffn_num_hiddens = integer(m, "model", "ffn_num_hiddens");
        mm.dropout = number(m, "model", "dropout");
        const std::string pos = m.at("positions");
        QKV_CHECK(pos == "rope" || pos == "sinusoidal", "'", origin, "': model.positions must be rope or sinusoidal, got '",
                  pos, "'");
        mm.rope = pos == "rope", mm.window = integer(m, "model", "window"), mm.max_len = integer(m, "model", "max_len");
        auto& tt = c.train;
        tt.epochs = integer(t, "train", "epochs"), tt.max_steps = integer(t, "train", "max_steps");
        tt.time_budget_s = number(t, "train", "time_budget_s");
        tt.batch_size = integer(t, "train", "batch_size"), tt.lr = number(t, "train", "lr");
        tt.adam_beta2 = number(t, "train", "adam_beta2");
        tt.clip_norm = number(t, "train", "clip_norm"), tt.warmup_steps = integer(t, "train", "warmup_steps");
        QKV_CHECK(t.at("seed").is_number_unsigned(), "key 'train.seed' is ", t.at("seed").dump(),
                  ", expected an integer from 0 to 18446744073709551615");
        tt.seed = t.at("seed").get<uint64_t>();
        tt.val_every_s = number(t, "train", "val_every_s"), c.log_every = integer(t, "train", "log_every");
        if (t.contains("precision"))  // older files: fp32
            tt.precision = parse_precision(t.at("precision").get<std::string>(), "key 'train.precision'");
        tt.schedule = optim::LrSchedule::warmup_inv_sqrt;
        check_lm_config(c);
        return c;
    } catch (const json::exception& e) {
        throw Error(detail::str("'", origin, "': not a valid language-model config.json: ", e.what()));
    } catch (const Error& e) {
        const std::string what = e.what();
        if (what.rfind("'" + origin + "'", 0) == 0) throw;
        throw Error(detail::str("'", origin, "': ", what));
    }
}

namespace {

/// --resume's checks before anything is read: the checkpoint is a language model's; what is left to
/// do (non-empty: nothing, the run already reached its stopping rule and its records are complete);
/// the recorded text still exists unless --data gives it.
std::string lm_resume_already_done(const LmConfig& cfg, const RunOptions& opt, const RunOverrides& given) {
    const fs::path dir(opt.out_dir);
    check_resume_checkpoint(opt.out_dir, /*lm=*/true);
    RunConfig stop;  // resume_already_done reads only the stopping rules
    stop.train = cfg.train;
    const TrainingProgress p = read_checkpoint_progress((dir / "checkpoint.safetensors").string());
    const std::string done = resume_already_done(stop, p, given);
    if (!done.empty() && !has_missing_records(opt.out_dir, p)) return done;
    std::error_code ec;
    if (!given.has("data.path") && !cfg.path.empty() && !fs::exists(cfg.path, ec))
        throw Error(detail::str("the text '", cfg.path, "' recorded in ", (dir / "config.json").string(),
                                " (data.path) does not exist; pass it with --data PATH (its fingerprint is checked)"));
    return "";
}

/// The run's first lines: threads and precision, the data, the model.
void log_lm_run(std::FILE* log, const LmConfig& cfg, const LmData& d, const models::TransformerLM& model) {
    if (!log) return;
    std::fprintf(log, "qkv train: language model, %d thread%s%s\n", get_num_threads(), get_num_threads() == 1 ? "" : "s",
                 cfg.train.precision == MatmulPrecision::bf16
                     ? detail::str("; mixed precision: bf16 matrix products, ", bf16_matmul_path(),
                                   "; attention on bf16 q, k, v, P and dS").c_str()
                     : "");
    std::fprintf(log, "data: %s\n", d.summary.c_str());
    const auto& m = cfg.model;
    std::fprintf(log, "model: decoder-only Transformer, %lld parameters (C %lld, %lld blocks, %lld heads%s, FFN %lld, %s%s, dropout %g)\n",
                 (long long)model.num_parameters(), (long long)m.num_hiddens, (long long)m.num_blks,
                 (long long)m.num_heads,
                 m.num_kv_heads > 0 && m.num_kv_heads != m.num_heads ? detail::str(" / ", m.num_kv_heads, " key-value").c_str() : "",
                 (long long)m.ffn_num_hiddens, m.rope ? "RoPE" : "sinusoidal positions",
                 m.window > 0 ? detail::str(", window ", m.window).c_str() : "", m.dropout);
}

/// config.json and vocab.txt of a fresh run; on --resume, the data fingerprint recorded in an older
/// folder's config.json, and the text given with --data as its recorded path.
void write_lm_folder(LmConfig& cfg, const LmData& d, const RunOptions& opt, const RunOverrides& given) {
    const fs::path dir(opt.out_dir);
    const std::string cfg_file = (dir / "config.json").string();
    if (!opt.resume) fs::create_directories(dir);
    // Temporaries of these files' writes cut short by a kill of an earlier run (the trainer
    // removes those of the checkpoint, model and metrics).
    for (const char* f : {"config.json", "vocab.txt"}) util::remove_stale_temp_files((dir / f).string());
    if (!opt.resume) {
        cfg.path = fs::weakly_canonical(locate_lm_text(cfg.path)).string();
        cfg.fingerprint_chars = d.fingerprint_chars, cfg.fingerprint_fnv1a64 = d.fingerprint_fnv1a64;
        util::write_file_atomic(cfg_file, lm_config_json(cfg));
        d.vocab.save((dir / "vocab.txt").string());
    } else if (cfg.fingerprint_chars == 0 || given.has("data.path")) {
        // A folder from before data.fingerprint gets it now; a text given with --data becomes
        // the recorded path (the fingerprint said it is the same text). The file's other
        // values (its stopping rules) stay.
        json j = json::parse(util::read_file(cfg_file));
        j["data"]["fingerprint"] = {{"characters", d.fingerprint_chars},
                                    {"fnv1a64", fingerprint_hex(d.fingerprint_fnv1a64)}};
        if (given.has("data.path")) j["data"]["path"] = fs::weakly_canonical(locate_lm_text(cfg.path)).string();
        util::write_file_atomic(cfg_file, j.dump(2) + "\n");
        if (cfg.fingerprint_chars == 0 && opt.log)
            std::fprintf(opt.log, "note: %s recorded no data fingerprint (an older qkv); the text was checked "
                                  "against the vocabulary only (the fingerprint is recorded now)\n", cfg_file.c_str());
    }
}

}  // namespace

RunResult run_lm(const LmConfig& given_cfg, const RunOptions& opt, const RunOverrides& given) {
    LmConfig cfg = given_cfg;
    if (opt.resume && opt.overwrite)
        throw ConfigError("--resume continues the model in --out and --overwrite replaces it: give one of them");
    try {
        check_lm_config(cfg);
    } catch (const Error& e) {
        throw ConfigError(e.what());
    }
    check_forced_flash(cfg.model.num_hiddens / cfg.model.num_heads);
    const fs::path dir(opt.out_dir);
    std::error_code ec;
    // The folder as the OS will find it once made (--out new/.., L/../x): taken before anything is made.
    const OutFolder out(dir);
    const std::vector<std::string> held =
        opt.resume ? std::vector<std::string>{} : check_fresh_out(opt.out_dir, out.dir, opt.overwrite);
    const bool replace = !held.empty();
    if (!opt.resume && !opt.overwrite && replace) note_stopped_run(opt.out_dir, held, opt.log);
    if (opt.resume) {
        std::string done = lm_resume_already_done(cfg, opt, given);
        if (!done.empty()) {
            RunResult res;
            res.nothing_to_do = std::move(done);  // config.json, the checkpoint and metrics.jsonl stay as they are
            return res;
        }
    }
    if (opt.on_accepted) opt.on_accepted();
    data::Vocab saved;
    if (opt.resume) saved = data::Vocab::load((dir / "vocab.txt").string());
    const LmData d = load_lm_data(cfg, opt.resume ? &saved : nullptr);
    cfg.model.vocab_size = d.vocab.size();
    cfg.train.label_smoothing = 0.0;  // exact NLL: perplexity = exp(validation loss)
    manual_seed(cfg.train.seed);
    auto model = std::make_shared<models::TransformerLM>(cfg.model);
    log_lm_run(opt.log, cfg, d, *model);
    TrainRuntime rt = runtime_from(opt, cfg.log_every);
    rt.checkpoint_metadata[kLmVocabKey] = vocab_fingerprint(d.vocab);
    // Ctrl-C / SIGTERM during training: the trainer finishes the step, checkpoints and returns.
    std::optional<util::InterruptGuard> guard;
    if (opt.catch_signals) {
        guard.emplace();
        rt.interrupt = guard->flag();
    }
    // Only now, with the data read and the model built, does a fresh run write into the folder;
    // a replaced run's files wait aside until the new run's first checkpoint after a step.
    std::optional<ReplacedRun> replaced;
    if (replace) replaced.emplace(opt.out_dir, out);
    RunResult res;
    const auto view = std::make_shared<models::LMTrainingView>(model);  // the Trainer's EncoderDecoder
    std::optional<Trainer> trainer;
    const FreshRunStart start(out);
    try {
        write_lm_folder(cfg, d, opt, given);
        trainer.emplace(*view, d.train, d.valid, d.vocab.pad(), cfg.train, rt);
        if (replaced)
            trainer->on_checkpoint = [&replaced](const TrainingProgress& p) {
                if (p.step > 0) replaced->discard();
            };
        res.train = trainer->fit();
    } catch (const std::exception&) {
        if (replaced) replaced->restore_after_failure(opt.log);
        else if (!opt.resume) remove_files_of_failed_fresh_run(start);
        throw;
    }
    res.signal = guard ? guard->release() : 0;  // from here a signal has its usual effect
    if (replaced && replaced->restore_after_stop(res.signal ? res.signal : opt.interrupt ? int(*opt.interrupt) : 0,
                                                 opt.log)) {
        res.restored_earlier = true;
        return res;
    }
    if (!opt.resume && !fs::exists(dir / "checkpoint.safetensors", ec)) {
        // A fresh run stopped before its first checkpoint leaves nothing behind, so the same
        // command can run again (a resume would have nothing to continue).
        start.undo();
        return res;  // trained = false
    }
    res.model   = view;
    res.trained = true;
    if (res.signal == 0) {  // whoever pressed Ctrl-C wants the prompt back
        const double val = trainer->evaluate_loss(d.valid);
        if (opt.log)
            std::fprintf(opt.log, "validation loss %.4f, validation perplexity %s (%lld held-out characters)\n", val,
                         perplexity_text(val).c_str(), (long long)d.valid_tokens);
    }
    return res;
}

bool is_lm_dir(const std::string& dir) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / "config.json";
    if (!fs::is_regular_file(p, ec)) return false;
    try {
        const json j = json::parse(util::read_file(p.string()));
        return j.is_object() && j.value("model_kind", "") == "lm";
    } catch (const std::exception&) {
        return false;
    }
}

LmDir load_lm_dir(const std::string& dir) {
    std::error_code ec;
    QKV_CHECK(!fs::is_regular_file(dir, ec), "'", dir, "' is a file; --model takes the model folder (",
              fs::path(dir).has_parent_path() ? "'" + fs::path(dir).parent_path().string() + "'?" : "the folder it is in?",
              ")");
    QKV_CHECK(fs::is_directory(dir, ec), "model folder '", dir, "' does not exist (train one with: qkv train --model lm --out ",
              dir, ")");
    const std::string cfg_path = (fs::path(dir) / "config.json").string();
    QKV_CHECK(fs::exists(cfg_path, ec), "'", cfg_path, "' not found: not a model folder");
    LmDir m;
    m.config = lm_config_from_json(util::read_file(cfg_path), cfg_path);
    m.vocab  = data::Vocab::load((fs::path(dir) / "vocab.txt").string());
    QKV_CHECK(m.vocab.size() == m.config.model.vocab_size, "'", dir, "/vocab.txt' has ", m.vocab.size(),
              " tokens but config.json says vocab_size ", m.config.model.vocab_size);
    m.model = std::make_shared<models::TransformerLM>(m.config.model);
    std::string model_file = (fs::path(dir) / "model.safetensors").string();
    if (!fs::exists(model_file, ec)) model_file = (fs::path(dir) / "checkpoint.safetensors").string();
    QKV_CHECK(fs::exists(model_file, ec), "'", dir, "' holds no model.safetensors or checkpoint.safetensors (train first)");
    // The vocabulary against the one the weights were trained with (an edited or reordered line
    // would map ids to other characters without an error).
    check_vocab_fingerprint(read_checkpoint_metadata(model_file, "model file"), kLmVocabKey, m.vocab,
                            (fs::path(dir) / "vocab.txt").string(), model_file);
    if (model_file.ends_with("checkpoint.safetensors")) load_checkpoint(model_file, *m.model, nullptr);
    else load_model(model_file, *m.model);
    m.model->eval();
    return m;
}

std::string generate_text(LmDir& m, const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(const std::string&)>& on_token) {
    QKV_CHECK(opt.max_new_tokens >= 0, "generate: --max-new-tokens must be >= 0, got ", opt.max_new_tokens);
    QKV_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0, "generate: --temperature must be >= 0, got ",
              opt.temperature);
    QKV_CHECK(opt.top_k >= 0 && opt.top_p > 0 && opt.top_p <= 1, "generate: --top-k must be >= 0 and --top-p in (0, 1]");
    const std::string text = preprocess_lm_text(prompt);
    std::vector<int64_t> ids;
    std::set<char> unknown;
    for (char ch : text) {
        const int64_t id = m.vocab.token_to_idx(std::string(1, ch));
        if (id == m.vocab.unk()) unknown.insert(ch);
        ids.push_back(id);
    }
    QKV_CHECK(unknown.empty(), "generate: the prompt holds characters the model never saw: '",
              std::string(unknown.begin(), unknown.end()), "'");
    QKV_CHECK(!(ids.empty() && !prompt.empty()), "generate: --prompt '", prompt, "' has no ASCII letter: D2L's preprocessing "
              "keeps only a-z and spaces (other letters, digits and punctuation become spaces), so it would start "
              "from nothing; give a prompt with English words");
    if (!m.config.model.rope) {
        QKV_CHECK(int64_t(ids.size()) <= m.config.model.max_len, "generate: the prompt is ", ids.size(), " characters "
                  "after preprocessing, but this model's sinusoidal positions stop at ", m.config.model.max_len,
                  " (model.max_len); shorten --prompt to at most ", m.config.model.max_len, " characters");
        const int64_t need = std::max<int64_t>(int64_t(ids.size()), 1) + opt.max_new_tokens;
        QKV_CHECK(need <= m.config.model.max_len, "generate: the prompt (", ids.size(), " characters) plus "
                  "--max-new-tokens ", opt.max_new_tokens, " is ", need, " positions, but this model's sinusoidal "
                  "positions stop at ", m.config.model.max_len, " (model.max_len); shorten --prompt or lower "
                  "--max-new-tokens to ", std::max<int64_t>(0, m.config.model.max_len - std::max<int64_t>(int64_t(ids.size()), 1)));
    }
    if (ids.empty()) ids.push_back(m.vocab.token_to_idx(" "));  // an empty prompt starts at a word boundary
    std::string out;
    if (opt.max_new_tokens == 0) return out;
    decode::DecodeOptions d;
    // A language model has no <eos>: <pad> stands for it, never emitted (min_len = max_len), and
    // <unk> is banned. The prompt is the state's input (its <bos> is not read).
    d.bos = d.eos = m.vocab.pad();
    d.max_len = d.min_len = opt.max_new_tokens;
    d.banned  = {m.vocab.unk()};
    d.scores  = false;
    if (opt.temperature > 0) {
        d.sampling.enabled = true, d.sampling.temperature = opt.temperature, d.sampling.top_k = opt.top_k;
        d.sampling.top_p = opt.top_p, d.sampling.seed = opt.seed, d.sampling.keyed_by_source = false;
    }
    d.on_token = [&](int64_t, int64_t id) {
        const std::string piece = m.vocab.idx_to_token(id);
        out += piece;
        if (on_token) on_token(piece);
    };
    m.model->set_recompute_prefix(!opt.use_cache);
    const auto n = int64_t(ids.size());
    decode::generate(*m.model, from_vector(ids, {1, n}), from_vector(std::vector<int64_t>{n}, {1}), d);
    return out;
}

}  // namespace qkv::train
