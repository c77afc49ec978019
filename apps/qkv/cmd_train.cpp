// `qkv train`: train D2L's Transformer (or, with --model bahdanau, D2L's GRU encoder–decoder with
// Bahdanau attention) on English–French (or a TSV corpus / file pair) from a preset plus flag overrides; writes the model folder
// (train/model_dir.h) and ends with a few held-out translations. The flags become
// train::RunOverrides and the library does the rest (train/run.h: train::configure_run's preset
// rules and validation, train::run's folder guards, --overwrite, resume checks, data, model,
// training with Ctrl-C handling). Here: flag parsing, usage errors (exit 2: --out, a ConfigError),
// on --resume the flags compared with config.json (check_resume_flags: refused when they would
// change the model, else ignored with a warning), the summary, the exit status of an interrupted
// run (130 / 143) and the sample translations.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/core/allocator.h"
#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/dist/communicator.h"
#include "qkv/decode/bleu.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"
#include "qkv/train/lm.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/interrupt.h"
#include "qkv/util/progress.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
    std::string preset = "demo", model = "transformer";
    std::string data, out = "runs/qkv";
    std::string src_file, tgt_file, src_lang, tgt_lang;
    int64_t num_kv_heads = 0, window = 0;  // --model lm
    std::string positions;
    std::string time_budget;
    std::string schedule;
    std::string grad_reduce = "overlap";
    bool resume = false, overwrite = false, no_progress = false;
    int64_t log_every = 50, keep_checkpoints = 0;
    int64_t num_hiddens = 0, num_blks = 0, num_heads = 0, ffn_num_hiddens = 0, batch_size = 0,
            num_steps = 0, epochs = 0, max_pairs = 0, max_steps = 0, warmup = 0, max_src_tokens = 0,
            max_tgt_tokens = 0, n_test = 0, n_valid = 0, min_freq = 0, embed_size = 0, num_layers = 0,
            bucket_pool = -1, batch_tokens = -1;
    std::string trim, val_every, precision;
    std::string subword;
    int64_t vocab_size = 0;
    bool shared_vocab = false, tie_weights = false, bidirectional = false;
    double dropout = -1, lr = 0, label_smoothing = -1, clip = -1;
    uint64_t seed = 0;
    CLI::Option *o_seed = nullptr, *o_dropout = nullptr, *o_ls = nullptr, *o_clip = nullptr,
                *o_lop = nullptr, *o_strict = nullptr, *o_quirk = nullptr, *o_bidir = nullptr;
    bool loss_on_padding = false, strict = false, pe_quirk = false;
    bool shard_optimizer = false;
    CLI::Option* o_shard = nullptr;
};

void print_samples(train::ModelDir& m, const train::TranslationData& d, int n) {
    std::vector<std::vector<std::string>> src(d.test_src.begin(),
                                              d.test_src.begin() + std::min<size_t>(size_t(n), d.test_src.size()));
    train::TranslateOptions to;
    to.max_len = m.config.decode.max_len;
    auto hyp = train::translate_tokens(m, src, to);
    std::printf("held-out translations (greedy):\n");
    for (size_t i = 0; i < hyp.size(); ++i)
        std::printf("  %s => %s   [ref: %s]\n", train::join_tokens(src[i]).c_str(),
                    train::join_tokens(hyp[i]).c_str(), train::join_tokens(d.test_ref[i]).c_str());
    // The book's pairs are en→fr.
    if (train::source_language(m.config.data) != "en" || train::target_language(m.config.data) != "fr") return;
    const auto book = runtime::book_pairs(m);
    std::vector<std::vector<std::string>> bsrc;
    for (auto& [e, f] : book) bsrc.push_back(runtime::tokenize_sentences(m, {e}).front());
    auto bhyp = train::translate_tokens(m, bsrc, to);
    double mean = 0;
    std::printf("book sentences (D2L BLEU, k=2):\n");
    for (size_t i = 0; i < book.size(); ++i) {
        const std::string h = train::join_tokens(bhyp[i]);
        const double b = decode::d2l_bleu(h, book[i].second, 2);
        mean += b / double(book.size());
        std::printf("  %s => %s, bleu %.3f\n", book[i].first.c_str(), h.c_str(), b);
    }
    std::printf("  mean bleu %.3f\n", mean);
}

std::string num_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string bool_text(bool b) { return b ? "true" : "false"; }

std::string duration_text(double s) { return s > 0 ? util::format_duration(s) : "off"; }

/// A flag given with --resume that differs from config.json: refused when it would change the
/// model, else ignored with a warning.
struct ResumeDiff {
    std::string flag, given, key, saved;
    bool model;
};

/// Refuses (usage error) every model-changing diff in one message, then warns about the others.
void report_resume_diffs(const std::string& out, const std::string& cfg_file, const std::vector<ResumeDiff>& diffs) {
    auto flag_text = [](const ResumeDiff& x) { return x.given.empty() ? x.flag : x.flag + " " + x.given; };
    std::string refused;
    for (const auto& x : diffs)
        if (x.model)
            refused += detail::str(refused.empty() ? "" : "; ", flag_text(x), " (the checkpoint's ", x.key, " is ",
                                   x.saved, ")");
    if (!refused.empty())
        usage_error(detail::str("--resume continues the model in '", out, "' as ", cfg_file,
                                " describes it, and these flags would change it: ", refused,
                                ". Drop them, or train a new model (without --resume) into another --out or, "
                                "replacing this one, with --overwrite"));
    for (const auto& x : diffs)
        std::fprintf(stderr, "qkv train: warning: --resume: %s is ignored; the checkpoint's %s%s%s (%s) is used\n",
                     flag_text(x).c_str(), x.key.c_str(), x.saved.empty() ? "" : " ", x.saved.c_str(),
                     cfg_file.c_str());
}

/// --resume continues the checkpoint's run as its config.json describes it: only the stopping
/// rules (--epochs, --max-steps, --time-budget), --log-every, --keep-checkpoints and the data files
/// (--data, --src-file/--tgt-file: where the data is now; its fingerprint is checked) apply. Any other training flag given
/// anyway is compared with config.json: one that would change the model (architecture, widths,
/// blocks, heads, layers, vocabularies, tying) and differs is refused, as a usage error listing
/// them all; any other that differs (optimisation, dropout, data filters, split sizes, seed, ...)
/// gets a warning that it is ignored and which value is used. Flags equal to config.json's values
/// pass silently.
void check_resume_flags(const TrainArgs& a, CLI::App* c, const train::RunConfig& cfg) {
    std::vector<ResumeDiff> diffs;
    const auto given = [c](const char* flag) { return c->get_option(flag)->count() > 0; };
    const auto add = [&](const char* flag, const std::string& gv, bool differs, const char* key,
                         const std::string& saved, bool model) {
        if (given(flag) && differs) diffs.push_back({flag, gv, key, saved, model});
    };
    const bool bahdanau = cfg.architecture == train::ModelKind::bahdanau;
    const auto& d = cfg.data;
    const auto& m = cfg.model;
    const auto& b = cfg.bahdanau;
    const auto& t = cfg.train;
    // the model: refused when different
    add("--model", a.model, a.model != train::model_kind_name(cfg.architecture), "model.architecture",
        train::model_kind_name(cfg.architecture), true);
    const int64_t width = bahdanau ? b.num_hiddens : m.num_hiddens;
    add("--num-hiddens", std::to_string(a.num_hiddens), a.num_hiddens != width, "model.num_hiddens",
        std::to_string(width), true);
    if (bahdanau) {
        add("--embed-size", std::to_string(a.embed_size), a.embed_size != b.embed_size, "model.embed_size",
            std::to_string(b.embed_size), true);
        add("--num-layers", std::to_string(a.num_layers), a.num_layers != b.num_layers, "model.num_layers",
            std::to_string(b.num_layers), true);
        if (a.o_bidir->count() > 0 && a.bidirectional != b.bidirectional)
            diffs.push_back({a.bidirectional ? "--bidirectional" : "--no-bidirectional", "", "model.bidirectional",
                             bool_text(b.bidirectional), true});
    } else {
        add("--num-blks", std::to_string(a.num_blks), a.num_blks != m.num_blks, "model.num_blks",
            std::to_string(m.num_blks), true);
        add("--num-heads", std::to_string(a.num_heads), a.num_heads != m.num_heads, "model.num_heads",
            std::to_string(m.num_heads), true);
        add("--ffn-num-hiddens", std::to_string(a.ffn_num_hiddens), a.ffn_num_hiddens != m.ffn_num_hiddens,
            "model.ffn_num_hiddens", std::to_string(m.ffn_num_hiddens), true);
        add("--tie-weights", "", !m.tie_weights, "model.tie_weights", bool_text(m.tie_weights), true);
    }
    add("--subword", a.subword, a.subword != data::subword_kind_name(d.subword), "data.subword",
        data::subword_kind_name(d.subword), true);
    const bool words = d.subword == data::SubwordKind::none;
    add("--vocab-size", std::to_string(a.vocab_size), words || a.vocab_size != d.subword_vocab_size,
        "data.subword_vocab_size", words ? std::string("(none: a word model)") : std::to_string(d.subword_vocab_size),
        true);
    add("--shared-vocab", "", !d.shared_vocab, "data.shared_vocab", bool_text(d.shared_vocab), true);
    // everything else: ignored (with a warning) when different
    add("--preset", a.preset, a.preset != cfg.preset, "preset", cfg.preset.empty() ? "(none)" : cfg.preset, false);
    const double dropout = bahdanau ? b.dropout : m.dropout;
    add("--dropout", num_text(a.dropout), a.dropout != dropout, "model.dropout", num_text(dropout), false);
    if (!bahdanau)
        add("--pe-quirk", "", !m.pe_position_zero_at_inference, "model.pe_position_zero_at_inference",
            bool_text(m.pe_position_zero_at_inference), false);
    add("--batch-size", std::to_string(a.batch_size), a.batch_size != t.batch_size, "train.batch_size",
        std::to_string(t.batch_size), false);
    add("--lr", num_text(a.lr), a.lr != t.lr, "train.lr", num_text(t.lr), false);
    add("--seed", std::to_string(a.seed), a.seed != t.seed, "train.seed", std::to_string(t.seed), false);
    add("--label-smoothing", num_text(a.label_smoothing), a.label_smoothing != t.label_smoothing,
        "train.label_smoothing", num_text(t.label_smoothing), false);
    add("--clip", num_text(a.clip), a.clip != t.clip_norm, "train.clip_norm", num_text(t.clip_norm), false);
    add("--schedule", a.schedule, a.schedule != train::schedule_name(t.schedule), "train.schedule",
        train::schedule_name(t.schedule), false);
    add("--warmup", std::to_string(a.warmup), a.warmup != t.warmup_steps, "train.warmup_steps",
        std::to_string(t.warmup_steps), false);
    add("--bucket-pool", std::to_string(a.bucket_pool), a.bucket_pool != t.bucket_pool, "train.bucket_pool",
        std::to_string(t.bucket_pool), false);
    add("--batch-tokens", std::to_string(a.batch_tokens), a.batch_tokens != t.batch_tokens, "train.batch_tokens",
        std::to_string(t.batch_tokens), false);
    add("--trim", a.trim, (a.trim == "on") != t.trim_batches, "train.trim_batches", t.trim_batches ? "on" : "off",
        false);
    if (given("--precision"))
        add("--precision", a.precision, a.precision != precision_name(t.precision), "train.precision",
            precision_name(t.precision), false);
    if (given("--val-every"))
        add("--val-every", a.val_every, parse_duration_or_off(a.val_every) != t.val_every_s, "train.val_every_s",
            duration_text(t.val_every_s), false);
    add("--loss-on-padding", "", !t.loss_on_padding, "train.loss_on_padding", bool_text(t.loss_on_padding), false);
    add("--num-steps", std::to_string(a.num_steps), a.num_steps != d.num_steps, "data.num_steps",
        std::to_string(d.num_steps), false);
    add("--max-pairs", std::to_string(a.max_pairs), a.max_pairs != d.max_pairs, "data.max_pairs",
        std::to_string(d.max_pairs), false);
    add("--max-src-tokens", std::to_string(a.max_src_tokens), a.max_src_tokens != d.max_src_tokens,
        "data.max_src_tokens", std::to_string(d.max_src_tokens), false);
    add("--max-tgt-tokens", std::to_string(a.max_tgt_tokens), a.max_tgt_tokens != d.max_tgt_tokens,
        "data.max_tgt_tokens", std::to_string(d.max_tgt_tokens), false);
    add("--test-pairs", std::to_string(a.n_test), a.n_test != d.n_test, "data.n_test", std::to_string(d.n_test),
        false);
    add("--valid-pairs", std::to_string(a.n_valid), a.n_valid != d.n_valid, "data.n_valid",
        std::to_string(d.n_valid), false);
    add("--min-freq", std::to_string(a.min_freq), a.min_freq != d.min_freq, "data.min_freq",
        std::to_string(d.min_freq), false);
    add("--strict", "", !d.strict, "data.strict", bool_text(d.strict), false);
    add("--src-lang", a.src_lang, a.src_lang != d.src_lang, "data.src_lang", d.src_lang, false);
    add("--tgt-lang", a.tgt_lang, a.tgt_lang != d.tgt_lang, "data.tgt_lang", d.tgt_lang, false);

    report_resume_diffs(a.out, (fs::path(a.out) / "config.json").string(), diffs);
}

/// The flags as library overrides (train/run.h): a flag not given leaves the preset's value.
train::RunOverrides overrides_from(const TrainArgs& a, CLI::App* c) {
    const auto given = [c](const char* flag) { return c->get_option(flag)->count() > 0; };
    train::RunOverrides o;
    const auto opt = [](int64_t v) { return v ? std::optional<int64_t>(v) : std::nullopt; };
    o.epochs    = opt(a.epochs);
    o.max_steps = opt(a.max_steps);
    if (!a.time_budget.empty()) o.time_budget_s = parse_duration_or_off(a.time_budget);
    if (!a.resume || given("--log-every")) o.log_every = a.log_every;  // on resume config.json's unless given
    if (given("--keep-checkpoints")) o.keep_checkpoints = a.keep_checkpoints;
    if (!a.data.empty()) o.data_path = a.data;
    if (!a.src_file.empty()) o.src_file = a.src_file;
    if (!a.tgt_file.empty()) o.tgt_file = a.tgt_file;
    if (!a.src_lang.empty()) o.src_lang = a.src_lang;
    if (!a.tgt_lang.empty()) o.tgt_lang = a.tgt_lang;
    o.num_steps      = opt(a.num_steps);
    o.max_pairs      = opt(a.max_pairs);
    o.max_src_tokens = opt(a.max_src_tokens);
    o.max_tgt_tokens = opt(a.max_tgt_tokens);
    o.n_test         = opt(a.n_test);
    o.n_valid        = opt(a.n_valid);
    o.min_freq       = opt(a.min_freq);
    o.strict         = a.o_strict->count() > 0;
    if (!a.subword.empty()) o.subword = data::parse_subword_kind(a.subword);
    o.vocab_size      = opt(a.vocab_size);
    o.shared_vocab    = a.shared_vocab;
    o.num_hiddens     = opt(a.num_hiddens);
    o.num_blks        = opt(a.num_blks);
    o.num_heads       = opt(a.num_heads);
    o.ffn_num_hiddens = opt(a.ffn_num_hiddens);
    o.embed_size      = opt(a.embed_size);
    o.num_layers      = opt(a.num_layers);
    if (a.o_dropout->count()) o.dropout = a.dropout;
    if (a.o_bidir->count()) o.bidirectional = a.bidirectional;
    o.pe_quirk    = a.o_quirk->count() > 0;
    o.tie_weights = a.tie_weights;
    o.batch_size  = opt(a.batch_size);
    if (a.lr > 0) o.lr = a.lr;
    if (a.o_seed->count()) o.seed = a.seed;
    if (a.o_ls->count()) o.label_smoothing = a.label_smoothing;
    if (a.o_clip->count()) o.clip_norm = a.clip;
    o.loss_on_padding = a.o_lop->count() > 0;
    if (!a.schedule.empty()) o.schedule = train::parse_schedule(a.schedule);
    o.warmup_steps = opt(a.warmup);
    if (a.bucket_pool >= 0) o.bucket_pool = a.bucket_pool;
    if (a.batch_tokens >= 0) o.batch_tokens = a.batch_tokens;
    if (!a.trim.empty()) o.trim_batches = a.trim == "on";
    if (!a.val_every.empty()) o.val_every_s = parse_duration_or_off(a.val_every);
    if (!a.precision.empty()) o.precision = parse_precision(a.precision, "--precision");
    if (a.o_shard->count()) o.shard_optimizer = a.shard_optimizer;
    return o;
}

/// The run's configuration: the preset with the flags, or with --resume the folder's (only the
/// stopping rules, --log-every and --data apply; other flags are checked against it).
train::RunConfig configure(const TrainArgs& a, CLI::App* c, const train::RunOverrides& o) {
    if (!a.resume) return train::configure_run(a.preset, train::parse_model_kind(a.model), o);
    train::check_resume_checkpoint(a.out);
    const train::RunConfig saved = train::load_model_dir_config(a.out);
    train::check_architecture_overrides(o, saved.architecture, a.out);
    check_resume_flags(a, c, saved);
    return train::resume_config(a.out, o);
}

void print_summary(const train::TrainResult& r, const std::string& out,
                   const char* files = "model.safetensors, config.json, vocabularies, metrics.jsonl, loss.png") {
    char last[96] = "no epoch ended in this call";  // a resume that only completed metrics.jsonl
    if (!r.epochs.empty())
        std::snprintf(last, sizeof last, "last epoch train loss %.4f, val loss %.4f", r.epochs.back().train_loss,
                      r.epochs.back().val_loss);
    std::printf("trained %lld steps in %s (stopped: %s); %s; %.0f target tokens/s; peak RSS %.0f MiB\n",
                (long long)r.steps, util::format_duration(r.train_seconds).c_str(), r.stop_reason.c_str(), last,
                r.tokens_per_s, double(util::peak_rss_bytes()) / (1024.0 * 1024.0));
    const AllocatorStats as = allocator_stats();
    std::printf("tensor memory: peak in use %.0f MiB, peak cached %.0f MiB, peak in use + cached %.0f MiB, "
                "cache limit %.0f MiB; %lld of %lld allocations fresh from the system, %lld evictions\n",
                double(as.peak_bytes) / (1024.0 * 1024.0), double(as.peak_cached) / (1024.0 * 1024.0),
                double(as.peak_reserved) / (1024.0 * 1024.0),
                double(allocator_cache_limit()) / (1024.0 * 1024.0), (long long)as.system_allocs,
                (long long)as.allocs, (long long)as.evictions);
    std::printf("model folder: %s (%s)\n", out.c_str(), files);
}

/// --resume of a language model: model-changing flags that differ from config.json are refused,
/// other differing ones get a warning that they are ignored (check_resume_flags' rules).
void check_lm_resume_flags(const TrainArgs& a, CLI::App* c, const train::LmConfig& cfg, const std::string& cfg_file) {
    std::vector<ResumeDiff> diffs;
    const auto add = [&](const char* flag, const std::string& gv, bool differs, const char* key,
                         const std::string& saved, bool model) {
        if (c->get_option(flag)->count() > 0 && differs) diffs.push_back({flag, gv, key, saved, model});
    };
    const auto& m = cfg.model;
    const auto& t = cfg.train;
    const auto str = [](int64_t v) { return std::to_string(v); };
    const int64_t kv = m.num_kv_heads ? m.num_kv_heads : m.num_heads;
    add("--num-hiddens", str(a.num_hiddens), a.num_hiddens != m.num_hiddens, "model.num_hiddens", str(m.num_hiddens), true);
    add("--num-heads", str(a.num_heads), a.num_heads != m.num_heads, "model.num_heads", str(m.num_heads), true);
    add("--num-kv-heads", str(a.num_kv_heads), a.num_kv_heads != kv, "model.num_kv_heads", str(kv), true);
    add("--num-blks", str(a.num_blks), a.num_blks != m.num_blks, "model.num_blks", str(m.num_blks), true);
    add("--ffn-num-hiddens", str(a.ffn_num_hiddens), a.ffn_num_hiddens != m.ffn_num_hiddens, "model.ffn_num_hiddens",
        str(m.ffn_num_hiddens), true);
    const std::string pos = m.rope ? "rope" : "sinusoidal";
    add("--positions", a.positions, a.positions != pos, "model.positions", pos, true);
    add("--window", str(a.window), a.window != m.window, "model.window", str(m.window), true);
    add("--dropout", num_text(a.dropout), a.dropout != m.dropout, "model.dropout", num_text(m.dropout), false);
    add("--num-steps", str(a.num_steps), a.num_steps != cfg.num_steps, "data.num_steps", str(cfg.num_steps), false);
    add("--batch-size", str(a.batch_size), a.batch_size != t.batch_size, "train.batch_size", str(t.batch_size), false);
    add("--lr", num_text(a.lr), a.lr != t.lr, "train.lr", num_text(t.lr), false);
    add("--seed", std::to_string(a.seed), a.seed != t.seed, "train.seed", std::to_string(t.seed), false);
    add("--warmup", str(a.warmup), a.warmup != t.warmup_steps, "train.warmup_steps", str(t.warmup_steps), false);
    add("--precision", a.precision, a.precision != precision_name(t.precision), "train.precision",
        precision_name(t.precision), false);
    if (c->get_option("--preset")->count() > 0)
        diffs.push_back({"--preset", a.preset, "configuration", "", false});
    report_resume_diffs(a.out, cfg_file, diffs);
}

/// `qkv train --model lm`: the decoder-only language model (train/lm.h) on a text.
void run_lm(const TrainArgs& a, CLI::App* c) {
    static const std::set<std::string> applies = {
        "--preset", "--model", "--data", "--out", "--resume", "--overwrite", "--no-progress", "--num-hiddens",
        "--num-heads", "--num-kv-heads", "--num-blks", "--ffn-num-hiddens", "--dropout", "--batch-size", "--num-steps",
        "--lr", "--epochs", "--max-steps", "--time-budget", "--seed", "--warmup", "--log-every", "--positions", "--window",
        "--precision",
        // the global flags (main.cpp), accepted after the subcommand too
        "--threads", "--attention", "--kernels", "--denormals"};
    for (const CLI::Option* o : c->get_options())
        if (o->count() > 0 && !applies.count(o->get_name()))
            usage_error(detail::str(o->get_name(), " does not apply to --model lm"));
    if (a.resume && a.overwrite)
        usage_error("--resume continues the model in --out and --overwrite replaces it: give one of them");
    // Before the data is read (a usage error, exit 2); the write test only once the run is accepted,
    // so that a refused run leaves the folder as it was.
    check_out_folder("--out", a.out, /*write_test=*/false);
    const bool given_preset = c->get_option("--preset")->count() > 0;
    if (given_preset && a.preset.rfind("lm", 0) != 0)
        usage_error(detail::str("--preset ", a.preset, " is a translation preset; --model lm takes lm or lm-tiny"));
    train::LmConfig cfg;
    const std::string cfg_file = (fs::path(a.out) / "config.json").string();
    if (a.resume) {
        try {
            train::check_resume_checkpoint(a.out, /*lm=*/true);
        } catch (const train::ConfigError& e) {
            usage_error(e.what());
        }
        if (!fs::exists(cfg_file)) usage_error(detail::str("--resume: '", cfg_file, "' not found (nothing to resume)"));
        if (!train::is_lm_dir(a.out))
            usage_error(detail::str("--resume --model lm: '", a.out, "' holds a translation model, not a language "
                                    "model; resume it without --model lm"));
        cfg = train::lm_config_from_json(util::read_file(cfg_file), cfg_file);
        check_lm_resume_flags(a, c, cfg, cfg_file);
    } else {
        cfg = train::lm_preset(given_preset ? a.preset : "lm");
        auto& m = cfg.model;
        if (a.num_hiddens) m.num_hiddens = a.num_hiddens;
        if (a.num_heads) m.num_heads = a.num_heads;
        if (a.num_kv_heads) m.num_kv_heads = a.num_kv_heads;
        if (a.num_blks) m.num_blks = a.num_blks;
        if (a.ffn_num_hiddens) m.ffn_num_hiddens = a.ffn_num_hiddens;
        if (a.dropout >= 0) m.dropout = a.dropout;
        if (!a.positions.empty()) m.rope = a.positions == "rope";
        if (a.window) m.window = a.window;
        if (a.batch_size) cfg.train.batch_size = a.batch_size;
        if (a.num_steps) cfg.num_steps = a.num_steps;
        if (a.lr > 0) cfg.train.lr = a.lr;
        if (a.o_seed->count()) cfg.train.seed = a.seed;
        if (a.warmup) cfg.train.warmup_steps = a.warmup;
        if (!a.precision.empty()) cfg.train.precision = parse_precision(a.precision, "--precision");
        if (c->get_option("--log-every")->count()) cfg.log_every = a.log_every;
        cfg.path = a.data;
        if (cfg.model.num_hiddens % cfg.model.num_heads != 0)
            usage_error(detail::str("--num-heads ", cfg.model.num_heads, " must divide --num-hiddens ", cfg.model.num_hiddens));
        const int64_t kv = cfg.model.num_kv_heads ? cfg.model.num_kv_heads : cfg.model.num_heads;
        if (cfg.model.num_heads % kv != 0)
            usage_error(detail::str("--num-kv-heads ", kv, " must divide --num-heads ", cfg.model.num_heads));
        if (cfg.model.rope && (cfg.model.num_hiddens / cfg.model.num_heads) % 2 != 0)
            usage_error("--positions rope needs an even head width (--num-hiddens / --num-heads)");
    }
    if (!a.data.empty()) cfg.path = a.data;
    if (a.epochs) cfg.train.epochs = a.epochs;
    if (a.max_steps) cfg.train.max_steps = a.max_steps;
    if (!a.time_budget.empty()) cfg.train.time_budget_s = parse_duration_or_off(a.time_budget);
    train::RunOptions ro;
    ro.out_dir   = a.out;
    ro.resume    = a.resume;
    ro.overwrite = a.overwrite;
    ro.progress  = !a.no_progress;
    ro.catch_signals = true;
    ro.on_accepted   = [&a] { test_out_folder_write("--out", a.out); };
    train::RunOverrides given;  // which stopping rules came from flags (for "nothing to do"), --data
    if (!a.data.empty()) given.data_path = a.data;
    if (a.epochs) given.epochs = a.epochs;
    if (a.max_steps) given.max_steps = a.max_steps;
    if (!a.time_budget.empty()) given.time_budget_s = cfg.train.time_budget_s;
    train::RunResult r;
    try {
        r = train::run_lm(cfg, ro, given);
    } catch (const train::ConfigError& e) {
        usage_error(e.what());
    }
    if (!r.nothing_to_do.empty()) {
        std::printf("qkv train: nothing to do: %s\n", r.nothing_to_do.c_str());
        return;  // exit 0; the folder stays as it is
    }
    if (r.restored_earlier) throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
    if (!r.trained) {  // stopped before the first checkpoint: the run removed what it wrote
        std::fprintf(stderr, "qkv train: interrupted (%s) before the first checkpoint; nothing saved\n",
                     r.signal == SIGINT ? "SIGINT" : r.signal == SIGTERM ? "SIGTERM" : "stopped");
        throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
    }
    print_summary(r.train, a.out, "model.safetensors, checkpoint.safetensors, config.json, vocab.txt, metrics.jsonl");
    if (r.signal != 0) {
        const char* name = r.signal == SIGINT ? "SIGINT" : "SIGTERM";
        if (r.train.stop_reason != "interrupted")
            std::fprintf(stderr, "qkv train: %s after training finished (step %lld); the model is saved in %s\n", name,
                         (long long)r.train.steps, a.out.c_str());
        else
            std::fprintf(stderr, "qkv train: interrupted (%s) at step %lld; checkpoint saved in %s; continue with: "
                                 "qkv train --model lm --resume --out %s\n",
                         name, (long long)r.train.steps, (fs::path(a.out) / "checkpoint.safetensors").c_str(),
                         shell_quote(a.out).c_str());
        throw ExitStatus{128 + r.signal};
    }
    train::LmDir m = train::load_lm_dir(a.out);
    // D2L's prompt when the text has its letters, else the vocabulary's first letter.
    std::string prompt = "the time traveller";
    for (char ch : prompt)
        if (m.vocab.token_to_idx(std::string(1, ch)) == m.vocab.unk()) prompt = m.vocab.idx_to_token(3);
    train::GenerateOptions g;
    g.max_new_tokens = 60;
    std::printf("sample (greedy): %s%s\n", prompt.c_str(), train::generate_text(m, prompt, g).c_str());
}

void run(TrainArgs& a, CLI::App* c) {
    if (a.model == "lm") {
        // Each rank would train its own copy into the one --out folder.
        if (const int64_t ranks = dist::launched_world_size(); ranks > 1)
            usage_error(detail::str("--model lm trains in one process, but mpirun started ", ranks,
                                    " of it: data-parallel training is for the Transformer and Bahdanau models; run "
                                    "qkv train --model lm without mpirun"));
        return run_lm(a, c);
    }
    for (const char* lm_only : {"--num-kv-heads", "--positions", "--window"})
        if (c->get_option(lm_only)->count() > 0)
            usage_error(detail::str(lm_only, " applies to --model lm only"));
    if (a.preset.rfind("lm", 0) == 0) usage_error(detail::str("--preset ", a.preset, " needs --model lm"));
    util::Timer wall;
    if (a.resume && a.overwrite)
        usage_error("--resume continues the model in --out and --overwrite replaces it: give one of them");
    if (a.resume && train::is_lm_dir(a.out))
        usage_error(detail::str("'", a.out, "' holds a language model (qkv train --model lm); resume it with: qkv train "
                                "--model lm --resume --out ", shell_quote(a.out)));
    // Before the data is read (a usage error, exit 2); the write test only once the run is accepted,
    // so that a refused run leaves the folder as it was.
    check_out_folder("--out", a.out, /*write_test=*/false);
    const train::RunOverrides o = overrides_from(a, c);
    train::RunOptions ro;
    ro.out_dir       = a.out;
    ro.resume        = a.resume;
    ro.overwrite     = a.overwrite;
    ro.progress      = !a.no_progress;
    ro.catch_signals = true;
    // Under `mpirun -np N` this process is one of N ranks (data-parallel; a build without MPI
    // refuses here rather than train N separate copies into one folder).
    ro.comm = dist::world();
    // The line a lost rank leaves (dist/communicator.h lost_rank_line): the resume command.
    ro.comm->set_recovery_hint("qkv train", "qkv train --resume --out " + shell_quote(a.out));
    ro.reduce.overlap = a.grad_reduce == "overlap";
    const bool rank0 = ro.comm->rank() == 0;
    // Rank 0 alone writes the folder, so it alone tests it (another rank's probe folder, made and
    // removed, could remove the folder rank 0 has just made).
    if (rank0) ro.on_accepted = [&a] { test_out_folder_write("--out", a.out); };
    ro.hooks.push_back(std::make_shared<train::LossPlotHook>((fs::path(a.out) / "loss.png").string()));
    train::RunResult r;
    try {
        // nothing is read or written before the configuration is known good
        r = train::run(configure(a, c, o), ro, o);
    } catch (const train::ConfigError& e) {
        usage_error(e.what());
    }
    if (!r.nothing_to_do.empty()) {
        if (rank0) std::printf("qkv train: nothing to do: %s\n", r.nothing_to_do.c_str());  // once per job
        return;  // exit 0; config.json and the checkpoint stay as they are
    }
    if (r.restored_earlier) throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
    if (!rank0) {  // rank 0 reports for the whole run
        if (r.signal != 0) throw ExitStatus{128 + r.signal};
        return;
    }
    print_summary(r.train, a.out);
    if (ro.comm->size() > 1 && r.train.train_seconds > 0)
        std::printf("data-parallel: %d ranks; rank 0 waited %.2f s on the gradient reduction (%.1f %% of its training "
                    "time)\n", ro.comm->size(), r.train.comm_seconds,
                    100.0 * r.train.comm_seconds / r.train.train_seconds);
    if (r.signal != 0) {
        // No held-out samples: whoever pressed Ctrl-C wants the prompt back.
        const char* name = r.signal == SIGINT ? "SIGINT" : "SIGTERM";
        const std::string ckpt = (fs::path(a.out) / "checkpoint.safetensors").string();
        if (r.train.stop_reason != "interrupted")
            std::fprintf(stderr, "qkv train: %s after training finished (step %lld); the model is saved in %s\n",
                         name, (long long)r.train.steps, a.out.c_str());
        else if (fs::exists(ckpt))
            std::fprintf(stderr, "qkv train: interrupted (%s) at step %lld; checkpoint saved in %s; continue with: "
                                 "qkv train --resume --out %s\n",
                         name, (long long)r.train.steps, ckpt.c_str(), shell_quote(a.out).c_str());
        else
            std::fprintf(stderr, "qkv train: interrupted (%s) before the first step; nothing saved\n", name);
        std::fflush(stdout);
        throw ExitStatus{128 + r.signal};
    }
    train::ModelDir m = train::load_model_dir(a.out);
    print_samples(m, *r.data, 8);
    std::printf("total wall time %s\n", util::format_duration(wall.seconds()).c_str());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    CLI::App* c = app.add_subcommand("train", "train D2L's Transformer or Bahdanau model on English-French or a parallel corpus of your own");
    std::string presets;
    for (auto& n : train::preset_names()) presets += (presets.empty() ? "" : "|") + n;
    std::vector<std::string> all_presets = train::preset_names();
    all_presets.push_back("lm");
    all_presets.push_back("lm-tiny");
    c->add_option("--preset", a->preset, "configuration to start from: " + presets + " (default demo); with --model lm: "
                                         "lm (default) or lm-tiny")
        ->check(CLI::IsMember(all_presets));
    c->add_option("--model", a->model, "transformer (default), bahdanau (GRU encoder-decoder with additive attention, "
                                       "D2L 11.4), or lm (a decoder-only language model on a text, e.g. "
                                       "../shared/data/timemachine.txt; qkv generate samples it)")
        ->check(CLI::IsMember({"transformer", "bahdanau", "lm"}));
    c->add_option("--data", a->data, "fra-eng.zip, fra.txt or a folder (default: $QKV_DATA, then "
                                     "../shared/data/fra-eng.zip), or a TSV corpus: source<TAB>target per line, "
                                     "plain or gzip")
        ->check(non_empty_path());
    auto* o_src = c->add_option("--src-file", a->src_file, "source sentences, one per line (with --tgt-file: a "
                                                           "line-aligned pair of files instead of --data; gzip or not; "
                                                           "default: none, --data)")
                      ->check(non_empty_path());
    auto* o_tgt = c->add_option("--tgt-file", a->tgt_file, "target sentences, line i translating line i of --src-file (default: "
                                                           "none, --data)")
                      ->check(non_empty_path());
    o_src->needs(o_tgt);
    o_tgt->needs(o_src);
    c->get_option("--data")->excludes(o_src);
    c->add_option("--src-lang", a->src_lang, "source language code, recorded in config.json (default: en for "
                                                      "fra-eng, none for other data)");
    c->add_option("--tgt-lang", a->tgt_lang, "target language code, recorded in config.json (default: fr for "
                                                      "fra-eng, none for other data)");
    c->add_flag("--resume", a->resume, "continue from OUT/checkpoint.safetensors (written at epoch ends, "
                                       "validation points, stops and Ctrl-C) with OUT/config.json's "
                                       "settings (same losses as an uninterrupted run); only --epochs, "
                                       "--max-steps, --time-budget, --log-every and --data apply, other "
                                       "flags that differ are refused (model shape) or ignored with a "
                                       "warning");
    c->add_flag("--overwrite", a->overwrite,
                "train a new model into an --out that already holds one (model.safetensors, "
                "checkpoint.safetensors or config.json) or other files of the names a run writes (vocabularies, "
                "spm.model, metrics.jsonl, loss.png, ...; without --resume or this flag such a folder is "
                "refused): the earlier run's files wait in OUT/.qkv-replaced until the new run's first "
                "checkpoint, then go; a run that fails or is stopped before it restores them");
    c->add_option("--time-budget", a->time_budget,
                  "stop after this much training time, e.g. 20m, 90s, 1h; 'none' (or 'off'): no time "
                  "limit (default: the preset's, 210s for demo, 20m for full and anchor, none for d2l)")
        ->check(duration_or_off());
    c->add_option("--val-every", a->val_every,
                  "also validate, and write the checkpoint, every this much training time, e.g. 5m; "
                  "'off': at epoch ends only (default: the preset's, 5m for full and anchor, else off)")
        ->check(duration_or_off());
    c->add_option("--epochs", a->epochs, "epochs (default: the preset's, 100; d2l 30)")->transform(int_range(1, 1000000));
    c->add_option("--max-steps,--steps", a->max_steps, "stop after this many optimizer steps in total (default: none)")
        ->transform(int_range(1, 1000000000));
    c->add_option("--num-hiddens", a->num_hiddens, "model width C (bahdanau: GRU and attention width H; default: the "
                                                           "preset's, 128 for demo, 256 for the others and bahdanau)")
        ->transform(int_range(1, 65536));
    c->add_option("--embed-size", a->embed_size, "bahdanau: embedding size E (default 256)")->transform(int_range(1, 65536));
    c->add_option("--num-layers", a->num_layers, "bahdanau: GRU layers (default: the preset's, 1 for demo, 2 for the "
                                                         "others)")->transform(int_range(1, 64));
    a->o_bidir = c->add_flag("--bidirectional,!--no-bidirectional", a->bidirectional,
                             "bahdanau: bidirectional GRU encoder, H/2 per direction (Bahdanau et al. 2015; "
                             "D2L's is unidirectional); --num-hiddens must be even (default: on for the demo "
                             "preset, off for the others; --no-bidirectional turns it off)");
    c->add_option("--num-blks", a->num_blks, "blocks in the encoder and in the decoder (default: the preset's, 2)")->transform(int_range(1, 64));
    c->add_option("--num-heads", a->num_heads, "attention heads (default: the preset's, 4)")->transform(int_range(1, 1024));
    c->add_option("--ffn-num-hiddens", a->ffn_num_hiddens, "FFN width (default: the preset's, 256 for demo, 64 for d2l, 1024 for full "
                                                          "and anchor)")->transform(int_range(1, 262144));
    a->o_dropout = c->add_option("--dropout", a->dropout, "dropout probability (default: the preset's, 0.1; d2l and "
                                                              "bahdanau 0.2)")->check(real_range(0, 0.99));
    c->add_option("--batch-size", a->batch_size, "minibatch size in pairs (default: the preset's, 64 for demo, 128 for the "
                                                         "others and bahdanau)")->transform(int_range(1, 100000));
    c->add_option("--num-steps", a->num_steps, "positions per sequence, <eos> included (truncate/pad; default: "
                                               "the preset's, 8 for demo (14 bahdanau), 9 for d2l, 12 for anchor, 20 pieces "
                                               "for full; subword pieces otherwise: chosen from the train split, 99 % "
                                               "of its sentences whole, at most 4 x the preset's)")
        ->transform(int_range(2, 1000));
    c->add_option("--lr", a->lr, "Adam learning rate (default: the preset's, 2e-3 for demo, 1e-3 for d2l "
                                                 "and full, 5e-4 for anchor; bahdanau 5e-3 for d2l and demo, else 1e-3)")->check(real_range(0, 10, /*lo_open=*/true));
    a->o_ls = c->add_option("--label-smoothing", a->label_smoothing, "label smoothing epsilon (default: the preset's, 0.1 for demo and "
                                                                    "full, else 0; bahdanau 0)")
                  ->check(real_range(0, 0.99));
    a->o_clip = c->add_option("--clip", a->clip, "clip gradients to this global norm (0: off; default 1)")
                    ->check(real_range(0, 1e6));
    c->add_option("--schedule", a->schedule, "learning-rate schedule (default: the preset's)")
        ->check(CLI::IsMember({"constant", "warmup_inv_sqrt", "warmup_linear_decay"}));
    c->add_option("--warmup", a->warmup, "warmup steps for the warmup schedules (default: the preset's, 200 for demo, 300 for "
                                          "full, else 400)")
        ->transform(int_range(1, 1000000000));
    c->add_option("--batch-tokens", a->batch_tokens,
                  "batches by tokens: each epoch cut into batches of about N tokens (a pair counts its longer side), "
                  "so short pairs come in larger batches; --batch-size then does not apply (0: off; default: the "
                  "preset's, 2000 for real, else off)")
        ->transform(int_range(0, 100000000));
    c->add_option("--bucket-pool", a->bucket_pool,
                  "length bucketing: sort pools of N batches by pair length, shuffle the batches "
                  "(0: off; default: the preset's, 50 for full, else off)")
        ->transform(int_range(0, 1000000));
    c->add_option("--precision", a->precision,
                  "fp32 (default) or bf16: mixed-precision training, matrix products with bf16-rounded operands "
                  "and fp32 accumulation (oneDNN's bf16 matmul where AMX is usable or AVX-512-BF16 runs at full rate, "
                  "as on AMD, else the fp32 GEMM on "
                  "rounded operands), attention likewise; weights, optimizer state, softmax, layer norm and the "
                  "loss stay fp32 (qkv --version shows the bf16 path)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    c->add_option("--trim", a->trim, "on|off: cut each batch to its longest pair (masked loss only; "
                                     "same loss, less padding computed; default: the preset's, on for full and anchor, "
                                     "else off)")
        ->check(CLI::IsMember({"on", "off"}));
    a->o_lop = c->add_flag("--loss-on-padding", a->loss_on_padding,
                           "average the loss over pad positions too (reproduces D2L EN's curves)");
    a->o_quirk = c->add_flag("--pe-quirk", a->pe_quirk,
                             "decode with D2L's position-0 positional encoding at every step");
    c->add_option("--max-pairs", a->max_pairs, "use only the first N (filtered) pairs (default: all)")
        ->transform(int_range(1, 1000000000));
    c->add_option("--max-src-tokens", a->max_src_tokens, "keep pairs with at most N source tokens (default: the preset's, "
                                                                 "5 for demo, 10 for demo bahdanau, else any)")
        ->transform(int_range(1, 1000));
    c->add_option("--max-tgt-tokens", a->max_tgt_tokens, "keep pairs with at most N target tokens (default: the preset's, "
                                                                 "7 for demo, 12 for demo bahdanau, else any)")
        ->transform(int_range(1, 1000));
    c->add_option("--subword", a->subword,
                  "none (D2L words) | bpe | unigram: SentencePiece subword units learned from the train split "
                  "(BLEU stays on words); default: none on fra-eng (bpe for --preset full and real), bpe on other corpora")
        ->check(CLI::IsMember({"none", "bpe", "unigram"}));
    c->add_option("--vocab-size", a->vocab_size, "subword vocabulary size, reserved tokens included (default 8000; on data other than "
                                                     "fra-eng at most 8000: a small corpus gets the pieces it has)")
        ->transform(int_range(8, 1000000));
    c->add_flag("--shared-vocab", a->shared_vocab,
                "one vocabulary (one SentencePiece model) for English and French");
    c->add_flag("--tie-weights", a->tie_weights,
                "Transformer: one matrix for source/target embeddings and the output layer "
                "(needs --shared-vocab)");
    c->add_option("--min-freq", a->min_freq, "word vocabulary: keep words seen at least N times in training "
                                                    "(default: the preset's, 3 for demo, 2 for full and anchor; not "
                                                    "for subword pieces)")
        ->transform(int_range(1, 1000000000));
    c->add_option("--test-pairs", a->n_test, "held-out test pairs (default 5000; a corpus of fewer than 4 x "
                                                  "(valid + test) pairs gets 10 % of its pairs each)")
        ->transform(int_range(1, 100000000));
    c->add_option("--valid-pairs", a->n_valid, "validation pairs (default: the preset's, 1000 for demo, 2000 for "
                                                       "full and anchor; small corpora: as --test-pairs)")->transform(int_range(1, 100000000));
    a->o_strict = c->add_flag("--strict", a->strict, "a malformed data line is an error (default: skipped)");
    a->o_seed = c->add_option("--seed", a->seed, "seed for init, dropout and batch order (default 0; the split keeps seed 0)")
                    ->transform(seed_value());
    c->add_option("--out", a->out, "model folder to write (default runs/qkv, the folder translate, eval, serve, "
                                  "heatmap and info read by default)")->check(non_empty_path());
    c->add_flag("--no-progress", a->no_progress, "no progress bar (default: a bar on a terminal, a line every 10 s otherwise)");
    c->add_option("--grad-reduce", a->grad_reduce,
                  "under mpirun: reduce gradient buckets during backward (overlap, default) or after it "
                  "(after-backward)")
        ->check(CLI::IsMember({"overlap", "after-backward"}));
    a->o_shard = c->add_flag("--shard-optimizer,!--no-shard-optimizer", a->shard_optimizer,
                             "under mpirun: each rank keeps Adam's moments for 1/N of the parameters only (ZeRO "
                             "stage 1; same losses up to fp32 reordering); recorded in config.json, and applies on "
                             "--resume too (a sharded checkpoint resumes on any number of ranks, sharded or not)");
    c->add_option("--keep-checkpoints", a->keep_checkpoints,
                  "also keep the model of the last K checkpoints in OUT/checkpoints/ (for qkv average --last K; "
                  "default 0: none; kept on --resume unless given)")
        ->transform(int_range(0, 1000000));
    c->add_option("--log-every", a->log_every, "metrics.jsonl: mean train loss every N steps (default 50; 0: none; "
                                               "--resume: config.json's unless given)")
        ->transform(int_range(0, 1000000000));
    c->add_option("--num-kv-heads", a->num_kv_heads, "--model lm: key/value heads (grouped-query attention; divides "
                                                     "--num-heads; default: --num-heads, no grouping)")
        ->transform(int_range(1, 1024));
    c->add_option("--positions", a->positions, "--model lm: positions, rope or sinusoidal (default rope)")
        ->check(CLI::IsMember({"rope", "sinusoidal"}));
    c->add_option("--window", a->window, "--model lm: sliding-window attention, each token sees itself and the "
                                         "N - 1 before it (default: none, all before it)")
        ->transform(int_range(1, 1000000000));
    // --help in sections (the global options keep main.cpp's own).
    group_options(c, "Model", {"--preset", "--model", "--num-hiddens", "--num-blks", "--num-heads", "--ffn-num-hiddens",
                               "--dropout", "--embed-size", "--num-layers", "--bidirectional", "--tie-weights"});
    group_options(c, "Data", {"--data", "--src-file", "--tgt-file", "--src-lang", "--tgt-lang", "--num-steps",
                              "--max-pairs", "--max-src-tokens", "--max-tgt-tokens", "--subword", "--vocab-size",
                              "--shared-vocab", "--min-freq", "--test-pairs", "--valid-pairs", "--strict"});
    group_options(c, "Training", {"--resume", "--overwrite", "--time-budget", "--val-every", "--epochs", "--max-steps",
                                  "--batch-size", "--lr", "--label-smoothing", "--clip", "--schedule", "--warmup",
                                  "--bucket-pool", "--precision", "--trim", "--loss-on-padding", "--seed",
                                  "--grad-reduce", "--shard-optimizer"});
    group_options(c, "Decoding (the held-out samples, and later translate/eval)", {"--pe-quirk"});
    group_options(c, "LM-only (--model lm)", {"--num-kv-heads", "--positions", "--window"});
    group_options(c, "Output", {"--out", "--no-progress", "--keep-checkpoints", "--log-every"});
    c->callback([a, c] { run(*a, c); });
});

}  // namespace
}  // namespace qkv::cli
