// `qkv train`: train D2L's Transformer (or, with --model bahdanau, D2L's GRU encoder–decoder with
// Bahdanau attention) on English–French from a preset plus flag overrides;
// writes the model folder (train/model_dir.h) and ends with a few held-out translations.
// Before the data is read or --out touched: --out must be (or become) a folder, the configuration
// must pass validate_config (usage errors, exit 2); a folder that already holds a model is
// refused unless --resume continues it or --overwrite replaces it (ReplacedRun keeps the earlier
// run's files until the new run's first checkpoint); flags of the other architecture are refused
// (check_architecture_flags, also on --resume); with --resume, flags that differ from
// config.json are refused or reported (check_resume_flags) and a checkpoint that has nothing left
// to train says so and writes nothing. config.json records the data's fingerprint
// (translation_data.h DataFingerprint), which --resume checks. The first Ctrl-C (SIGINT) or SIGTERM
// during training stops at the next step boundary with a checkpoint, says how to continue and
// exits 130 / 143 (util/interrupt.h); a second one kills at once, saying what is saved when it lands
// during a checkpoint write or a validation (train::Trainer's KillNotes).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/core/allocator.h"
#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/bleu.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/interrupt.h"
#include "qkv/util/progress.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
    std::string preset = "demo", model = "transformer";
    std::string data, out = "runs/qkv";
    std::string time_budget;
    std::string schedule;
    bool resume = false, overwrite = false, no_progress = false;
    int64_t log_every = 50;
    int64_t num_hiddens = 0, num_blks = 0, num_heads = 0, ffn_num_hiddens = 0, batch_size = 0,
            num_steps = 0, epochs = 0, max_pairs = 0, max_steps = 0, warmup = 0, max_src_tokens = 0,
            max_tgt_tokens = 0, n_test = 0, n_valid = 0, min_freq = 0, embed_size = 0, num_layers = 0,
            bucket_pool = -1;
    std::string trim, val_every;
    std::string subword;
    int64_t vocab_size = 0;
    bool shared_vocab = false, tie_weights = false, bidirectional = false;
    double dropout = -1, lr = 0, label_smoothing = -1, clip = -1;
    uint64_t seed = 0;
    CLI::Option *o_seed = nullptr, *o_dropout = nullptr, *o_ls = nullptr, *o_clip = nullptr,
                *o_lop = nullptr, *o_strict = nullptr, *o_quirk = nullptr, *o_bidir = nullptr;
    bool loss_on_padding = false, strict = false, pe_quirk = false;
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
    const std::vector<std::pair<std::string, std::string>> book = {
        {"go .", "va !"}, {"i lost .", "j'ai perdu ."}, {"he's calm .", "il est calme ."},
        {"i'm home .", "je suis chez moi ."}};
    std::vector<std::vector<std::string>> bsrc;
    for (auto& [e, f] : book) bsrc.push_back(data::split_tokens(e));
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

/// The files a model folder holds that tell it is one (a run's model, its checkpoint, its
/// configuration): those of them in `dir`.
std::vector<std::string> model_files_in(const std::string& dir) {
    std::vector<std::string> held;
    std::error_code ec;
    for (const char* f : {"model.safetensors", "checkpoint.safetensors", "config.json"})
        if (fs::exists(fs::path(dir) / f, ec)) held.push_back(f);
    return held;
}

/// --overwrite: the earlier run's files (all that qkv train writes: train/model_dir.h) wait in
/// OUT/.qkv-replaced until the new run has written its first checkpoint after a step; a run that
/// fails or is stopped before that gets them back.
class ReplacedRun {
public:
    static constexpr const char* kAside = ".qkv-replaced";
    /// Moves the run files in `dir` aside (a rename each: the same file system).
    explicit ReplacedRun(const std::string& dir) : dir_(dir), aside_(fs::path(dir) / kAside) {
        fs::create_directory(aside_);
        std::error_code ec;
        for (const char* f : train::kModelDirFiles)
            if (fs::exists(dir_ / f, ec)) fs::rename(dir_ / f, aside_ / f);
        pending_ = true;
    }
    /// The new run has a model: the earlier one goes for good.
    void discard() {
        if (!pending_) return;
        fs::remove_all(aside_);
        pending_ = false;
    }
    /// The new run has none: its files go, the earlier run's come back. True when it did so.
    bool restore() {
        if (!pending_) return false;
        pending_ = false;
        std::error_code ec;
        for (const char* f : train::kModelDirFiles) {
            fs::remove(dir_ / f, ec);
            if (fs::exists(aside_ / f, ec)) fs::rename(aside_ / f, dir_ / f);
        }
        fs::remove(aside_, ec);
        return true;
    }

private:
    fs::path dir_, aside_;
    bool pending_ = false;
};

/// Flags of the other architecture would be ignored without a word (and go unchecked): a usage
/// error naming the flag. `arch` is the model trained (--model, or with --resume config.json's
/// model.architecture, which `folder` then names: "" without --resume).
void check_architecture_flags(const TrainArgs& a, train::ModelKind arch, const std::string& folder) {
    const bool transformer = arch == train::ModelKind::transformer;
    const std::string where =
        folder.empty() ? ""
                       : detail::str("; --resume continues the ", transformer ? "Transformer" : "bahdanau model",
                                     " in '", folder, "' (", (fs::path(folder) / "config.json").string(),
                                     ": model.architecture ", train::model_kind_name(arch), ")");
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--num-blks", a.num_blks != 0},
                                      {"--num-heads", a.num_heads != 0},
                                      {"--ffn-num-hiddens", a.ffn_num_hiddens != 0},
                                      {"--pe-quirk", a.o_quirk->count() > 0},
                                      {"--tie-weights", a.tie_weights}})
        if (given && !transformer)
            usage_error(std::string(flag) + " applies to the Transformer only (not --model bahdanau)" + where);
    for (const auto& [flag, given, what] :
         {std::tuple<const char*, bool, const char*>{"--embed-size", a.embed_size != 0, "separate embedding size"},
          {"--num-layers", a.num_layers != 0, "GRU layers"},
          {a.bidirectional ? "--bidirectional" : "--no-bidirectional", a.o_bidir->count() > 0, "GRU encoder"}})
        if (given && transformer)
            usage_error(std::string(flag) + " applies to --model bahdanau only (the Transformer has no " + what + ")" +
                        where);
}

/// --resume continues the checkpoint's run as its config.json describes it: only the stopping
/// rules (--epochs, --max-steps, --time-budget), --log-every and --data apply. Any other training flag given
/// anyway is compared with config.json: one that would change the model (architecture, widths,
/// blocks, heads, layers, vocabularies, tying) and differs is refused, as a usage error listing
/// them all; any other that differs (optimisation, dropout, data filters, split sizes, seed, ...)
/// gets a warning that it is ignored and which value is used. Flags equal to config.json's values
/// pass silently.
void check_resume_flags(const TrainArgs& a, CLI::App* c, const train::RunConfig& cfg) {
    struct Diff {
        std::string flag, given, key, saved;
        bool model;  // would change the model: refused
    };
    std::vector<Diff> diffs;
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
    add("--trim", a.trim, (a.trim == "on") != t.trim_batches, "train.trim_batches", t.trim_batches ? "on" : "off",
        false);
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

    const std::string cfg_file = (fs::path(a.out) / "config.json").string();
    auto flag_text = [](const Diff& x) { return x.given.empty() ? x.flag : x.flag + " " + x.given; };
    std::string refused;
    for (const auto& x : diffs)
        if (x.model)
            refused += detail::str(refused.empty() ? "" : "; ", flag_text(x), " (the checkpoint's ", x.key, " is ",
                                   x.saved, ")");
    if (!refused.empty())
        usage_error(detail::str("--resume continues the model in '", a.out, "' as ", cfg_file,
                                " describes it, and these flags would change it: ", refused,
                                ". Drop them, or train a new model (without --resume) into another --out or, "
                                "replacing this one, with --overwrite"));
    for (const auto& x : diffs)
        std::fprintf(stderr, "qkv train: warning: --resume: %s is ignored; the checkpoint's %s %s (%s) is used\n",
                     flag_text(x).c_str(), x.key.c_str(), x.saved.c_str(), cfg_file.c_str());
}

/// The whole configuration checked before the data is read or anything in --out is written or
/// removed: the Transformer's heads must divide its width, and config.json's rules
/// (train::run_config_from_json: ranges, the positional-encoding table covering num_steps and
/// decoding, tying with one vocabulary) must hold, with stand-in vocabulary sizes (the data gives
/// the real ones). A violation is a usage error (exit 2).
void validate_config(const train::RunConfig& cfg) {
    const auto& m = cfg.model;
    if (cfg.architecture == train::ModelKind::transformer && m.num_heads > 0 && m.num_hiddens % m.num_heads != 0)
        usage_error(detail::str("the number of attention heads (--num-heads, ", m.num_heads,
                                ") must divide the model width (--num-hiddens, ", m.num_hiddens,
                                "): each head gets num_hiddens / num_heads dimensions"));
    train::RunConfig c = cfg;
    c.model.src_vocab_size = c.model.tgt_vocab_size = 16;  // stand-ins: equal, as tying needs
    try {
        (void)train::run_config_from_json(train::to_json(c));
    } catch (const Error& e) {
        usage_error(detail::str("invalid training configuration: ", e.what()));
    }
}

/// The stopping rule the checkpoint has already met, or "" when training would go on: --resume
/// with --epochs (or config.json's epochs) at most the epochs done, --max-steps at most the steps
/// done, or a time budget already spent.
std::string already_done(const TrainArgs& a, const train::RunConfig& cfg, const train::TrainingProgress& p) {
    const auto& t = cfg.train;
    if (p.epoch >= t.epochs)
        return detail::str("the checkpoint has already trained ", p.epoch, " epoch", p.epoch == 1 ? "" : "s", " (",
                           a.epochs ? "--epochs " : "config.json's epochs ", t.epochs,
                           "); give a larger --epochs to train on");
    if (t.max_steps > 0 && p.step >= t.max_steps)
        return detail::str("the checkpoint has already trained ", p.step, " steps (",
                           a.max_steps ? "--max-steps " : "config.json's max_steps ", t.max_steps,
                           "); give a larger --max-steps to train on");
    if (t.time_budget_s > 0 && p.train_seconds >= t.time_budget_s)
        return detail::str("the checkpoint has already trained for ", util::format_duration(p.train_seconds), " (",
                           a.time_budget.empty() ? "config.json's time budget " : "--time-budget ",
                           util::format_duration(t.time_budget_s),
                           ", counted over all runs); give a longer --time-budget (or none) to train on");
    return "";
}

void run(TrainArgs& a, CLI::App* c) {
    util::Timer wall;
    if (a.resume && a.overwrite)
        usage_error("--resume continues the model in --out and --overwrite replaces it: give one of them");
    check_out_folder("--out", a.out);  // before the data is read (a usage error, exit 2)
    const std::string ckpt = (fs::path(a.out) / "checkpoint.safetensors").string();
    train::RunConfig cfg;
    if (a.resume) {
        QKV_CHECK(fs::exists(ckpt), "--resume: no checkpoint at '", ckpt, "'");
        cfg = train::load_model_dir_config(a.out);
        check_architecture_flags(a, cfg.architecture, a.out);
        check_resume_flags(a, c, cfg);
        cfg.data = train::model_data_config(a.out, cfg, a.data);
    } else {
        cfg = train::preset_config(a.preset, train::parse_model_kind(a.model));
    }
    // Flag overrides (on resume only the stopping rules, --log-every and the data path may change).
    if (!a.resume && !a.data.empty()) cfg.data.path = a.data;
    if (a.epochs) cfg.train.epochs = a.epochs;
    if (a.max_steps) cfg.train.max_steps = a.max_steps;
    if (!a.time_budget.empty()) cfg.train.time_budget_s = parse_duration_or_off(a.time_budget);
    if (!a.resume || c->get_option("--log-every")->count() > 0) cfg.log_every = a.log_every;
    if (!a.resume) {
        auto& d = cfg.data;
        auto& m = cfg.model;
        auto& t = cfg.train;
        if (a.num_steps) d.num_steps = a.num_steps;
        if (a.max_pairs) d.max_pairs = a.max_pairs;
        if (a.max_src_tokens) d.max_src_tokens = a.max_src_tokens;
        if (a.max_tgt_tokens) d.max_tgt_tokens = a.max_tgt_tokens;
        if (a.n_test) d.n_test = a.n_test;
        if (a.n_valid) d.n_valid = a.n_valid;
        if (a.min_freq) d.min_freq = a.min_freq;
        if (a.o_strict->count()) d.strict = true;
        if (a.num_hiddens) m.num_hiddens = a.num_hiddens;
        if (a.num_blks) m.num_blks = a.num_blks;
        if (a.num_heads) m.num_heads = a.num_heads;
        if (a.ffn_num_hiddens) m.ffn_num_hiddens = a.ffn_num_hiddens;
        if (a.o_dropout->count()) m.dropout = a.dropout;
        auto& b = cfg.bahdanau;
        if (a.num_hiddens) b.num_hiddens = a.num_hiddens;
        if (a.embed_size) b.embed_size = a.embed_size;
        if (a.num_layers) b.num_layers = a.num_layers;
        if (a.o_bidir->count()) b.bidirectional = a.bidirectional;
        if (a.o_dropout->count()) b.dropout = a.dropout;
        if (a.o_quirk->count()) m.pe_position_zero_at_inference = true;
        if (a.batch_size) t.batch_size = a.batch_size;
        if (a.lr > 0) t.lr = a.lr;
        if (a.o_seed->count()) t.seed = a.seed;
        if (a.o_ls->count()) t.label_smoothing = a.label_smoothing;
        if (a.o_clip->count()) t.clip_norm = a.clip;
        if (a.o_lop->count()) t.loss_on_padding = true;
        if (!a.schedule.empty()) t.schedule = train::parse_schedule(a.schedule);
        if (a.warmup) t.warmup_steps = a.warmup;
        if (a.bucket_pool >= 0) t.bucket_pool = a.bucket_pool;
        if (!a.trim.empty()) t.trim_batches = a.trim == "on";
        if (!a.val_every.empty()) t.val_every_s = parse_duration_or_off(a.val_every);
        if (t.schedule != optim::LrSchedule::constant && t.warmup_steps == 0) t.warmup_steps = 400;
        const bool preset_subword = d.subword != data::SubwordKind::none;  // the full preset
        if (!a.subword.empty()) d.subword = data::parse_subword_kind(a.subword);
        if (preset_subword && d.subword == data::SubwordKind::none) {
            // `--preset full --subword none`: the same recipe on D2L words, untied (unless the
            // flags ask for a shared vocabulary / tying), with the anchor's word lengths.
            d.shared_vocab = false, m.tie_weights = false;
            if (!a.num_steps) d.num_steps = 12;
            cfg.decode.max_len = 20;
        }
        if (a.vocab_size) d.subword_vocab_size = a.vocab_size;
        if (a.shared_vocab) d.shared_vocab = true;
        if (a.tie_weights) m.tie_weights = true;
        if (a.vocab_size != 0 && d.subword == data::SubwordKind::none)
            usage_error("--vocab-size applies to subword vocabularies: add --subword bpe or --subword unigram");
        if (m.tie_weights && !d.shared_vocab)
            usage_error("--tie-weights needs one vocabulary for both languages: add --shared-vocab");
        if (m.tie_weights && cfg.architecture != train::ModelKind::transformer)
            usage_error("--tie-weights applies to the Transformer only (not --model bahdanau)");
        check_architecture_flags(a, cfg.architecture, "");
        if ((d.subword != data::SubwordKind::none || d.shared_vocab) && d.pipeline != train::DataPipeline::anchor)
            usage_error(detail::str("--subword and --shared-vocab need the anchor pipeline (presets demo, full, "
                                    "anchor), not --preset ", cfg.preset));
        if (d.subword != data::SubwordKind::none && !preset_subword && !a.num_steps) {
            // Full data, shared BPE 8000: 1.17 / 1.29 pieces per word (source / target), and the
            // long tail splits more: at 12 words 0.99% / 1.76% of the train pairs are cut, at 16
            // pieces 3.0% / 7.6%. Two thirds more steps (12 -> 20) for about the same pairs whole
            // (the data line reports the fractions); trimmed batches make the extra length free
            // for the short pairs. Decoding may run half as long again.
            d.num_steps += 2 * d.num_steps / 3;
            cfg.decode.max_len += cfg.decode.max_len / 2;
        }
    }

    validate_config(cfg);  // nothing is read or written before the configuration is known good
    // A fresh run into a model folder would replace the model there: only when asked (--overwrite).
    const std::vector<std::string> held = a.resume ? std::vector<std::string>{} : model_files_in(a.out);
    if (!held.empty()) {
        std::string names;
        for (const auto& f : held) names += (names.empty() ? "" : ", ") + f;
        if (!a.overwrite)
            usage_error(detail::str("--out '", a.out, "' already holds a qkv model (", names,
                                    "); continue its training with --resume, replace it with --overwrite, or "
                                    "give another --out"));
        const fs::path aside = fs::path(a.out) / ReplacedRun::kAside;
        std::error_code ec;
        if (fs::exists(aside, ec))
            usage_error(detail::str("--overwrite: '", aside.string(), "' holds the model an earlier qkv train "
                                    "--overwrite was replacing when it was killed; move its files back into '",
                                    a.out, "' (or delete it) first"));
    }
    if (a.resume) {
        const train::TrainingProgress p = train::read_checkpoint_progress(ckpt);
        const std::string done = already_done(a, cfg, p);
        if (!done.empty()) {
            if (!train::has_missing_records(a.out, p)) {
                std::printf("qkv train: nothing to do: %s\n", done.c_str());
                return;  // exit 0; config.json and the checkpoint stay as they are
            }
            // Killed during the validation after its last checkpoint: fit() trains no step and
            // writes the records that validation did not.
            std::fprintf(stderr, "qkv train: no step to train (%s); the run was stopped while it validated at "
                                 "step %lld, so that validation runs again for metrics.jsonl\n",
                         done.c_str(), (long long)p.step);
        }
    }

    std::fprintf(stderr, "qkv train: preset %s, %d thread%s\n", cfg.preset.empty() ? "-" : cfg.preset.c_str(),
                 get_num_threads(), get_num_threads() == 1 ? "" : "s");
    train::SubwordModels saved_subwords;
    if (a.resume) saved_subwords = train::load_model_dir_subwords(a.out, cfg);
    train::TranslationData d = train::load_translation_data(cfg.data, saved_subwords);
    cfg.data.path = fs::weakly_canonical(d.origin).string();  // eval may run in another folder
    std::fprintf(stderr, "data: %s\n", d.summary.c_str());
    std::fprintf(stderr, "vocabularies: source %lld, target %lld tokens\n", (long long)d.src_vocab.size(),
                 (long long)d.tgt_vocab.size());
    if (a.resume) {
        // The pair count and hash recorded at training time (the vocabularies alone cannot tell a
        // reordered file, and a subword model's always agree); older folders: the vocabularies only.
        if (!train::check_data_fingerprint(a.out, cfg, d))
            std::fprintf(stderr, "note: %s/config.json records no data fingerprint (an older qkv); the data "
                                 "file is checked against the vocabularies only (the fingerprint is recorded now)\n",
                         a.out.c_str());
        auto saved = train::load_model_dir_vocabs(a.out);
        QKV_CHECK(saved.first == d.src_vocab && saved.second == d.tgt_vocab,
                  "--resume: the data gives other vocabularies than the ones saved in '", a.out,
                  "' (different data file or filters)");
    }
    cfg.data.fingerprint = d.fingerprint;
    cfg.model.src_vocab_size = d.src_vocab.size();
    cfg.model.tgt_vocab_size = d.tgt_vocab.size();

    manual_seed(cfg.train.seed);  // init and dropout draw from the default generator
    auto model = train::build_model(cfg, train::kTrainingCopies);  // refuses a model too large to train here
    std::fprintf(stderr, "model: %s\n", train::describe_model(cfg, *model).c_str());
    std::fprintf(stderr, "training: batch %lld, lr %g, %lld epochs%s%s, loss %s\n",
                 (long long)cfg.train.batch_size, cfg.train.lr, (long long)cfg.train.epochs,
                 cfg.train.time_budget_s > 0
                     ? (", budget " + util::format_duration(cfg.train.time_budget_s)).c_str() : "",
                 cfg.train.max_steps > 0 ? (", max " + std::to_string(cfg.train.max_steps) + " steps").c_str() : "",
                 cfg.train.loss_on_padding ? "on all positions (D2L EN)" : "on real tokens");

    train::TrainRuntime rt;
    rt.out_dir  = a.out;
    rt.resume   = a.resume;
    rt.progress = !a.no_progress;
    rt.log_every = cfg.log_every;
    rt.checkpoint_metadata["qkv.config"] = train::to_json(cfg).dump();
    // Ctrl-C / SIGTERM during training: the trainer finishes the step, checkpoints and returns.
    util::InterruptGuard interrupt;
    rt.interrupt = interrupt.flag();
    // Only now, with the model built and a signal only stopping the run, does a fresh run write
    // into --out; an earlier run's files there (--overwrite) wait aside until its first checkpoint.
    std::optional<ReplacedRun> replaced;
    if (!held.empty()) replaced.emplace(a.out);
    train::TrainResult r;
    try {
        if (!a.resume) train::write_run_files(a.out, cfg, d.src_vocab, d.tgt_vocab, d.subwords);
        train::Trainer trainer(*model, d.train, d.valid, d.tgt_vocab.pad(), cfg.train, rt);
        if (replaced)
            trainer.on_checkpoint = [&replaced](const train::TrainingProgress& p) {
                if (p.step > 0) replaced->discard();
            };
        r = trainer.fit();
    } catch (const std::exception&) {
        if (replaced && replaced->restore())
            std::fprintf(stderr, "qkv train: the new run failed before its first checkpoint; the earlier model in "
                                 "%s is restored\n", a.out.c_str());
        throw;
    }
    const int caught = interrupt.release();  // from here a signal has its usual effect
    if (replaced && replaced->restore()) {
        // Only a signal stops a fresh run before it trains a step (and so before that checkpoint).
        const char* why = caught == SIGINT ? "interrupted (SIGINT)" : caught == SIGTERM ? "interrupted (SIGTERM)"
                                                                                         : "stopped";
        std::fprintf(stderr, "qkv train: %s before the new run's first checkpoint; the earlier model in %s is "
                             "restored\n", why, a.out.c_str());
        throw ExitStatus{caught != 0 ? 128 + caught : 1};
    }
    // The stopping rules given for this call are not part of the model's config.
    train::write_run_files(a.out, cfg, d.src_vocab, d.tgt_vocab, d.subwords);

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
    std::printf("model folder: %s (model.safetensors, config.json, vocabularies, metrics.jsonl, loss.png)\n",
                a.out.c_str());
    if (caught != 0) {
        // No held-out samples: whoever pressed Ctrl-C wants the prompt back.
        const char* name = caught == SIGINT ? "SIGINT" : "SIGTERM";
        if (r.stop_reason != "interrupted")
            std::fprintf(stderr, "qkv train: %s after training finished (step %lld); the model is saved in %s\n",
                         name, (long long)r.steps, a.out.c_str());
        else if (fs::exists(ckpt))
            std::fprintf(stderr, "qkv train: interrupted (%s) at step %lld; checkpoint saved in %s; continue with: "
                                 "qkv train --resume --out %s\n",
                         name, (long long)r.steps, ckpt.c_str(), shell_quote(a.out).c_str());
        else
            std::fprintf(stderr, "qkv train: interrupted (%s) before the first step; nothing saved\n", name);
        std::fflush(stdout);
        throw ExitStatus{128 + caught};
    }
    train::ModelDir m = train::load_model_dir(a.out);
    print_samples(m, d, 8);
    std::printf("total wall time %s\n", util::format_duration(wall.seconds()).c_str());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    CLI::App* c = app.add_subcommand("train", "train D2L's Transformer or Bahdanau model on English-French");
    std::string presets;
    for (auto& n : train::preset_names()) presets += (presets.empty() ? "" : "|") + n;
    c->add_option("--preset", a->preset, "configuration to start from: " + presets + " (default demo)")
        ->check(CLI::IsMember(train::preset_names()));
    c->add_option("--model", a->model, "transformer (default) or bahdanau (GRU encoder-decoder with "
                                       "additive attention, D2L 11.4)")
        ->check(CLI::IsMember({"transformer", "bahdanau"}));
    c->add_option("--data", a->data, "fra-eng.zip, fra.txt or a folder (default: $QKV_DATA, then "
                                     "../shared/data/fra-eng.zip)")
        ->check(non_empty_path());
    c->add_option("--out", a->out, "output folder (default runs/qkv)")->check(non_empty_path());
    c->add_flag("--resume", a->resume, "continue from OUT/checkpoint.safetensors (written at epoch ends, "
                                       "validation points, stops and Ctrl-C) with OUT/config.json's "
                                       "settings (same losses as an uninterrupted run); only --epochs, "
                                       "--max-steps, --time-budget, --log-every and --data apply, other "
                                       "flags that differ are refused (model shape) or ignored with a "
                                       "warning");
    c->add_flag("--overwrite", a->overwrite,
                "train a new model into an --out that already holds one (model.safetensors, "
                "checkpoint.safetensors or config.json; without --resume or this flag such a folder is "
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
    c->add_option("--epochs", a->epochs, "epochs")->check(int_range(1, 1000000));
    c->add_option("--max-steps,--steps", a->max_steps, "stop after this many optimizer steps in total")
        ->check(int_range(1, 1000000000));
    c->add_option("--num-hiddens", a->num_hiddens, "model width C (bahdanau: GRU and attention width H)")
        ->check(int_range(1, 65536));
    c->add_option("--embed-size", a->embed_size, "bahdanau: embedding size E")->check(int_range(1, 65536));
    c->add_option("--num-layers", a->num_layers, "bahdanau: GRU layers")->check(int_range(1, 64));
    a->o_bidir = c->add_flag("--bidirectional,!--no-bidirectional", a->bidirectional,
                             "bahdanau: bidirectional GRU encoder, H/2 per direction (Bahdanau et al. 2015; "
                             "D2L's is unidirectional); --num-hiddens must be even (default: on for the demo "
                             "preset, off for the others; --no-bidirectional turns it off)");
    c->add_option("--num-blks", a->num_blks, "blocks in the encoder and in the decoder")->check(int_range(1, 64));
    c->add_option("--num-heads", a->num_heads, "attention heads")->check(int_range(1, 1024));
    c->add_option("--ffn-num-hiddens", a->ffn_num_hiddens, "FFN width")->check(int_range(1, 262144));
    a->o_dropout = c->add_option("--dropout", a->dropout, "dropout probability")->check(real_range(0, 0.99));
    c->add_option("--batch-size", a->batch_size, "minibatch size")->check(int_range(1, 100000));
    c->add_option("--num-steps", a->num_steps, "tokens per sequence (truncate/pad; with --subword pieces, "
                                               "default the preset's + 2/3)")->check(int_range(2, 1000));
    c->add_option("--lr", a->lr, "Adam learning rate")->check(real_range(0, 10, /*lo_open=*/true));
    a->o_ls = c->add_option("--label-smoothing", a->label_smoothing, "label smoothing epsilon")
                  ->check(real_range(0, 0.99));
    a->o_clip = c->add_option("--clip", a->clip, "clip gradients to this global norm (0: off; default 1)")
                    ->check(real_range(0, 1e6));
    c->add_option("--schedule", a->schedule, "learning-rate schedule (default: the preset's)")
        ->check(CLI::IsMember({"constant", "warmup_inv_sqrt", "warmup_linear_decay"}));
    c->add_option("--warmup", a->warmup, "warmup steps for the warmup schedules (default 400)")
        ->check(int_range(1, 1000000000));
    c->add_option("--bucket-pool", a->bucket_pool,
                  "length bucketing: sort pools of N batches by pair length, shuffle the batches "
                  "(0: off)")
        ->check(int_range(0, 1000000));
    c->add_option("--trim", a->trim, "on|off: cut each batch to its longest pair (masked loss only; "
                                     "same loss, less padding computed)")
        ->check(CLI::IsMember({"on", "off"}));
    a->o_lop = c->add_flag("--loss-on-padding", a->loss_on_padding,
                           "average the loss over pad positions too (reproduces D2L EN's curves)");
    a->o_quirk = c->add_flag("--pe-quirk", a->pe_quirk,
                             "decode with D2L's position-0 positional encoding at every step");
    c->add_option("--max-pairs", a->max_pairs, "use only the first N (filtered) pairs")
        ->check(int_range(1, 1000000000));
    c->add_option("--max-src-tokens", a->max_src_tokens, "keep pairs with at most N source tokens")
        ->check(int_range(1, 1000));
    c->add_option("--max-tgt-tokens", a->max_tgt_tokens, "keep pairs with at most N target tokens")
        ->check(int_range(1, 1000));
    c->add_option("--subword", a->subword,
                  "none (D2L words, default) | bpe | unigram: SentencePiece subword units learned from "
                  "the train split (BLEU stays on words)")
        ->check(CLI::IsMember({"none", "bpe", "unigram"}));
    c->add_option("--vocab-size", a->vocab_size, "subword vocabulary size, reserved tokens included (default 8000)")
        ->check(int_range(8, 1000000));
    c->add_flag("--shared-vocab", a->shared_vocab,
                "one vocabulary (one SentencePiece model) for English and French");
    c->add_flag("--tie-weights", a->tie_weights,
                "Transformer: one matrix for source/target embeddings and the output layer "
                "(needs --shared-vocab)");
    c->add_option("--min-freq", a->min_freq, "vocabulary: keep words seen at least N times in training")
        ->check(int_range(1, 1000000000));
    c->add_option("--test-pairs", a->n_test, "held-out test pairs (default 5000)")
        ->check(int_range(1, 100000000));
    c->add_option("--valid-pairs", a->n_valid, "validation pairs")->check(int_range(1, 100000000));
    a->o_strict = c->add_flag("--strict", a->strict, "a malformed data line is an error (default: skipped)");
    a->o_seed = c->add_option("--seed", a->seed, "seed for init, dropout and batch order (default 0; the split keeps seed 0)")
                    ->check(seed_value());
    c->add_flag("--no-progress", a->no_progress, "no progress bar");
    c->add_option("--log-every", a->log_every, "metrics.jsonl: mean train loss every N steps (default 50; 0: none; "
                                               "--resume: config.json's unless given)")
        ->check(int_range(0, 1000000000));
    c->callback([a, c] { run(*a, c); });
});

}  // namespace
}  // namespace qkv::cli
