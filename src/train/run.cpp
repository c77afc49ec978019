// `qkv train` as a library call: presets plus overrides, the model folder's guards (held model,
// --overwrite, resume), data, model, training.
#include "qkv/train/run.h"

#include "qkv/dist/communicator.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/model_dir.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/progress.h"
#include "qkv/util/shell.h"
#include "train/lm_run.h"
#include "train/replaced_run.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void config_error(const std::string& msg) { throw ConfigError(msg); }

/// fra-eng's pairs are read English -> French: other codes would be recorded wrongly (and a server
/// would then refuse the model's own source language). Its codes default to en and fr.
void check_fra_eng_languages(DataConfig& d) {
    if (!is_fra_eng_data(d)) return;
    auto primary = [](const std::string& code) {
        std::string p = code.substr(0, code.find('-'));
        for (char& c : p) c = char(std::tolower(static_cast<unsigned char>(c)));
        return p;
    };
    QKV_CHECK((d.src_lang.empty() || primary(d.src_lang) == "en") && (d.tgt_lang.empty() || primary(d.tgt_lang) == "fr"),
              "data: the fra-eng data is read English -> French, so --src-lang must be en and --tgt-lang fr (got ",
              d.src_lang.empty() ? std::string("en") : d.src_lang, " -> ",
              d.tgt_lang.empty() ? std::string("fr") : d.tgt_lang,
              "); for French -> English, swap its columns into a TSV (scripts/fra_eng_swapped.sh) and train on that");
    if (d.src_lang.empty()) d.src_lang = "en";
    if (d.tgt_lang.empty()) d.tgt_lang = "fr";
}

/// Subwords, a shared vocabulary and tying: the rules that tie them to the preset (its subword
/// kind `preset_subword`) and to which flags were given. The overrides are applied already.
void apply_vocabulary_rules(RunConfig& cfg, const RunOverrides& o, bool preset_subword) {
    auto& d = cfg.data;
    auto& m = cfg.model;
    const bool given_subword = o.has("data.subword"), given_size = o.has("data.subword_vocab_size");
    // Other corpora: subword pieces unless --subword says otherwise (the D2L word tokenizer is
    // made for English and French; a language written without spaces would be one token a line).
    if (!given_subword && !preset_subword && !is_fra_eng_data(d) && d.pipeline == DataPipeline::anchor) {
        // BPE rather than unigram: on a few hundred pairs unigram learns only the pieces seen often
        // (~100, 2.8 pieces per word) where BPE keeps most words whole (1.1; docs/training-defaults.md).
        d.subword            = data::SubwordKind::bpe;
        d.subword_vocab_soft = !given_size;  // at most 8000 pieces, fewer for a small corpus
    }
    // The real preset's 10,000 pieces are for fra-eng; on one's own corpus they are an upper
    // bound unless --vocab-size is given (a small corpus has fewer pieces to learn).
    if (d.pipeline == DataPipeline::text && !given_size && !is_fra_eng_data(d)) d.subword_vocab_soft = true;
    if (d.pipeline == DataPipeline::text && d.subword == data::SubwordKind::none)
        config_error("--subword none: the real-text pipeline (preset real) reads SentencePiece pieces; choose bpe or unigram");
    const bool min_freq = o.has("data.min_freq"), max_src = o.has("data.max_src_tokens");
    if (d.pipeline == DataPipeline::text && (max_src || o.has("data.max_tgt_tokens") || min_freq))
        config_error(detail::str(min_freq ? "--min-freq" : max_src ? "--max-src-tokens" : "--max-tgt-tokens",
                                 " applies to D2L words; the real-text pipeline (preset real) reads pieces: its length "
                                 "cap is --num-steps (pieces, <eos> included)"));
    if (cfg.train.batch_tokens > 0 && o.has("train.batch_size") && !o.has("train.batch_tokens"))
        config_error(detail::str("--batch-size ", cfg.train.batch_size, ": this preset batches by tokens (--batch-tokens ",
                                 cfg.train.batch_tokens, "); add --batch-tokens 0 to batch by pairs"));
    if (preset_subword && d.subword == data::SubwordKind::none) {
        // `--preset full --subword none`: the same recipe on D2L words, untied (unless the flags
        // ask for a shared vocabulary / tying), with the anchor's word lengths.
        if (!o.has("data.shared_vocab")) d.shared_vocab = false;
        if (!o.has("model.tie_weights")) m.tie_weights = false;
        if (!o.has("data.num_steps")) d.num_steps = 12;
        cfg.decode.max_len = 20;
    }
    // Pieces asked for without a size (--subword bpe|unigram on one's own corpus): the default
    // is an upper bound, as for the implicit unigram above, so a small corpus still trains.
    if (given_subword && d.subword != data::SubwordKind::none && !preset_subword && !given_size)
        d.subword_vocab_soft = true;
    if (given_size && d.subword == data::SubwordKind::none)
        config_error("--vocab-size applies to subword vocabularies: add --subword bpe or --subword unigram");
    if (m.tie_weights && !d.shared_vocab)
        config_error("--tie-weights needs one vocabulary for both languages: add --shared-vocab");
    if (m.tie_weights && cfg.architecture != ModelKind::transformer)
        config_error("--tie-weights applies to the Transformer only (not --model bahdanau)");
    if ((d.subword != data::SubwordKind::none || d.shared_vocab) && d.pipeline == DataPipeline::d2l_en)
        config_error(detail::str("--subword and --shared-vocab need the anchor pipeline (presets demo, full, "
                                 "anchor), not --preset ", cfg.preset));
    if (d.subword != data::SubwordKind::none && !preset_subword && !o.has("data.num_steps")) {
        // The preset's num_steps counts words; pieces per word depend on the corpus and the
        // vocabulary (1.2-1.3 on the full fra-eng data with 8,000 pieces, 2-3 on a few hundred
        // pairs), so the length comes from the train split once its pieces are known
        // (load_translation_data; decoding gets half as long again, read_data).
        d.num_steps_from_data = true;
    }
}

/// Observers given as functions.
class FunctionHook : public TrainHook {
public:
    explicit FunctionHook(const RunOptions& o) : o_(o) {}
    void on_logged_step(const LoggedStep& s) override {
        if (o_.on_logged_step) o_.on_logged_step(s);
    }
    void on_validated(int64_t step, double val_loss) override {
        if (o_.on_validated) o_.on_validated(step, val_loss);
    }

private:
    const RunOptions& o_;
};

/// Reads the data (resume: checks it against the folder) and fills the configuration from it.
std::shared_ptr<TranslationData> read_data(RunConfig& cfg, const RunOptions& opt, const RunOverrides& given) {
    SubwordModels saved_subwords;
    std::pair<data::Vocab, data::Vocab> saved;
    if (opt.resume) {
        // The folder's own files must agree before the data is compared with them: an edited
        // vocabulary or a replaced SentencePiece model is named, not blamed on the data.
        saved_subwords = load_model_dir_subwords(opt.out_dir, cfg);
        saved          = load_model_dir_vocabs(opt.out_dir);
        for (const char* f : {"checkpoint.safetensors", "model.safetensors"}) {  // the vocabularies vs the weights
            const std::string weights = (fs::path(opt.out_dir) / f).string();
            if (!fs::exists(weights)) continue;
            const auto meta =
                read_checkpoint_metadata(weights, f == std::string("model.safetensors") ? "model file" : "checkpoint");
            check_vocab_fingerprints(meta, opt.out_dir, saved.first, saved.second, weights);
            break;
        }
        check_vocabs_list_pieces(opt.out_dir, cfg, saved.first, saved.second, saved_subwords);  // vs the spm files
    }
    auto d = std::make_shared<TranslationData>(load_translation_data(cfg.data, saved_subwords));
    // Absolute paths: eval may run in another folder.
    if (cfg.data.src_file.empty()) {
        cfg.data.path = fs::weakly_canonical(d->origin).string();
    } else {
        cfg.data.src_file = fs::weakly_canonical(cfg.data.src_file).string();
        cfg.data.tgt_file = fs::weakly_canonical(cfg.data.tgt_file).string();
    }
    if (opt.log) {
        std::fprintf(opt.log, "data: %s, %s\n", language_pair(cfg.data).c_str(), d->summary.c_str());
        std::fprintf(opt.log, "vocabularies: source %lld, target %lld tokens\n", (long long)d->src_vocab.size(),
                     (long long)d->tgt_vocab.size());
        const DataRecord& r = d->record;
        const DataConfig& dc = cfg.data;
        if (r.known() && r.pairs_kept < r.pairs_read) {
            // Which limits, and whose: a preset's filters apply to one's own corpus too.
            std::string limits;
            const auto limit = [&](const char* flag, int64_t v, bool was_given, int64_t dropped) {
                if (dropped == 0) return;
                limits += detail::str(limits.empty() ? "" : ", ", flag, " ", v,
                                      was_given ? "" : detail::str(" (", cfg.preset.empty() ? "the default" :
                                                                   "the " + cfg.preset + " preset's", ")"));
            };
            limit("--max-src-tokens", dc.max_src_tokens, given.has("data.max_src_tokens"), r.source_too_long);
            limit("--max-tgt-tokens", dc.max_tgt_tokens, given.has("data.max_tgt_tokens"), r.target_too_long);
            limit("--max-pairs", dc.max_pairs, given.has("data.max_pairs"), r.beyond_max_pairs);
            if (limits.empty())
                std::fprintf(opt.log, "data: %s\n",
                             r.dropped_text(dc.max_src_tokens, dc.max_tgt_tokens, dc.max_pairs, dc.num_steps).c_str());
            else
                std::fprintf(opt.log, "data: the filters %s (%s; larger values keep more)\n",
                             r.dropped_text(dc.max_src_tokens, dc.max_tgt_tokens, dc.max_pairs, dc.num_steps).c_str(),
                             limits.c_str());
        }
    }
    if (opt.log && d->record.over_length_cap * 100 > d->train.n + d->record.over_length_cap)
        std::fprintf(opt.log, "data: warning: %lld train pairs (%.1f %%) are over num_steps %lld pieces and skipped; "
                              "--num-steps raises the cap\n",
                     (long long)d->record.over_length_cap,
                     100.0 * double(d->record.over_length_cap) / double(d->train.n + d->record.over_length_cap),
                     (long long)cfg.data.num_steps);
    if (opt.resume) {
        // The pair count and hash recorded at training time (the vocabularies alone cannot tell a
        // reordered file, and a subword model's always agree); older folders: the vocabularies only.
        if (!check_data_fingerprint(opt.out_dir, cfg, *d) && opt.log)
            std::fprintf(opt.log, "note: %s/config.json records no data fingerprint (an older qkv); the data "
                                  "file is checked against the vocabularies only (the fingerprint is recorded now)\n",
                         opt.out_dir.c_str());
        QKV_CHECK(saved.first == d->src_vocab && saved.second == d->tgt_vocab,
                  "--resume: the data gives other vocabularies than the ones saved in '", opt.out_dir,
                  "' (different data file or filters)");
    }
    if (cfg.data.num_steps_from_data) {
        // The length chosen from the pieces (config.json records it); outputs may run half as
        // long again as most train targets, as the presets' decode.max_len do for words.
        cfg.data.num_steps           = d->num_steps;
        cfg.data.num_steps_from_data = false;
        const int64_t tgt            = std::max(d->target_len_p99, d->num_steps);
        cfg.decode.max_len           = std::min<int64_t>(1000, tgt + tgt / 2);
        cfg.model.max_len            = std::max(cfg.model.max_len, std::max(cfg.data.num_steps, cfg.decode.max_len));
    }
    cfg.data.fingerprint     = d->fingerprint;
    cfg.data.applied         = d->record;
    if (cfg.data.pipeline != DataPipeline::d2l_en) {
        // The split as made (a small corpus shrinks valid and test; the same sizes give it again).
        cfg.data.n_valid = d->valid.n;
        cfg.data.n_test  = d->test.n;
    }
    cfg.model.src_vocab_size = d->src_vocab.size();
    cfg.model.tgt_vocab_size = d->tgt_vocab.size();
    return d;
}

void log_model(const RunConfig& cfg, const models::EncoderDecoder& model, std::FILE* log) {
    if (!log) return;
    std::fprintf(log, "model: %s\n", describe_model(cfg, model).c_str());
    const std::string batch = cfg.train.batch_tokens > 0 ? detail::str("batches of ~", cfg.train.batch_tokens, " tokens")
                                                         : detail::str("batch ", cfg.train.batch_size);
    std::fprintf(log, "training: %s, lr %g, %lld epochs%s%s, loss %s\n", batch.c_str(), cfg.train.lr, (long long)cfg.train.epochs,
                 cfg.train.time_budget_s > 0 ? (", budget " + util::format_duration(cfg.train.time_budget_s)).c_str()
                                             : "",
                 cfg.train.max_steps > 0 ? (", max " + std::to_string(cfg.train.max_steps) + " steps").c_str() : "",
                 cfg.train.loss_on_padding ? "on all positions (D2L EN)" : "on real tokens");
}

}  // namespace

FolderOutcome train_in_folder(RunResult& res, const FolderTraining& t, const RunOptions& opt, const OutFolder& out,
                              bool replace, std::optional<Trainer>& trainer) {
    const RunConfig& cfg = res.config;
    TrainRuntime rt = runtime_from(opt, cfg.log_every);
    rt.keep_checkpoints    = cfg.keep_checkpoints;
    rt.comm                = opt.comm;
    rt.reduce              = opt.reduce;
    rt.checkpoint_metadata = t.metadata;
    const bool writer = !opt.comm || opt.comm->rank() == 0;
    // Ctrl-C / SIGTERM during training: the trainer finishes the step, checkpoints and returns.
    std::optional<util::InterruptGuard> guard;
    if (opt.catch_signals) {
        guard.emplace();
        rt.interrupt = guard->flag();
    }
    // Only now, with the data read, the model built and a signal only stopping the run, does a
    // fresh run write into the folder; an earlier run's files there wait aside until its first
    // checkpoint after a step.
    std::optional<ReplacedRun> replaced;
    if (replace && writer) replaced.emplace(opt.out_dir, out);
    const FreshRunStart start(out);
    try {
        if (writer && t.write_files) t.write_files();
        trainer.emplace(t.model, t.train, t.valid, t.pad, cfg.train, rt);
        if (replaced)
            trainer->on_checkpoint = [&replaced](const TrainingProgress& p) {
                if (p.step > 0) replaced->discard();
            };
        if (opt.make_optimizer) trainer->set_optimizer(opt.make_optimizer(t.model));
        trainer->set_gradient_sync(opt.gradient_sync);
        if (opt.on_logged_step || opt.on_validated) trainer->add_hook(std::make_shared<FunctionHook>(opt));
        for (const auto& h : opt.hooks) trainer->add_hook(h);
        res.train = trainer->fit();
    } catch (const std::exception&) {
        if (replaced) replaced->restore_after_failure(opt.log);
        else if (!opt.resume && writer) remove_files_of_failed_fresh_run(start);
        throw;
    }
    res.signal = guard ? guard->release() : 0;  // from here a signal has its usual effect
    // Only a signal stops a fresh run before it trains a step (and so before that checkpoint).
    const int sig = guard ? res.signal : opt.interrupt ? int(*opt.interrupt) : 0;
    if (replaced && replaced->restore_after_stop(sig, opt.log)) return FolderOutcome::restored_earlier;
    std::error_code ec;
    if (t.undo_unstarted && !opt.resume && !fs::exists(fs::path(opt.out_dir) / "checkpoint.safetensors", ec)) {
        start.undo();  // nothing trained: the same command can run again
        return FolderOutcome::undone;
    }
    return FolderOutcome::trained;
}

void check_architecture_overrides(const RunOverrides& o, ModelKind arch, const std::string& folder) {
    const bool transformer = arch == ModelKind::transformer;
    const std::string where =
        folder.empty() || arch == ModelKind::lm
            ? ""
            : detail::str("; --resume continues the ", transformer ? "Transformer" : "bahdanau model", " in '", folder,
                          "' (", (fs::path(folder) / "config.json").string(), ": model.architecture ",
                          model_kind_name(arch), ")");
    for (const auto& f : config_fields()) {
        const auto v = o.values.find(f.key);
        if (v == o.values.end() || field_in_scope(f, arch)) continue;
        std::string flag = field_flag_name(f);
        if (f.flag_kind == FlagKind::negatable && !std::get<bool>(v->second))
            flag = std::string(f.flag).substr(std::string(f.flag).find('!') + 1);
        if (arch == ModelKind::lm) config_error(flag + " does not apply to --model lm");
        if (f.scope == FieldScope::lm) config_error(flag + " applies to --model lm only");
        if (!field_in_scope(f, ModelKind::bahdanau))
            config_error(flag + " applies to the Transformer only (not --model bahdanau)" + where);
        config_error(flag + " applies to --model bahdanau only (the Transformer has no " + f.other_lacks + ")" + where);
    }
}

void check_forced_flash(int64_t head_dim) {
    if (default_attention_backend() != AttentionBackend::flash || head_dim < 1) return;
    // The attention call's own filters on a (1, 1, 1, D) query, key and value: the same reasons.
    const Tensor q = zeros({1, 1, 1, head_dim});
    std::string why;
    if (select_attention_backend(q, q, q, {}, {}, false, &why) == AttentionBackend::flash) return;
    if (!why.empty() && why.back() == '\n') why.pop_back();
    config_error("the flash backend was forced but cannot run: " + why);
}

namespace {

/// configure_run for the language model: the preset, the flags, the rules between them named by flag.
RunConfig configure_language_model(const std::string& preset, const RunOverrides& o) {
    RunConfig cfg = preset_config(preset, ModelKind::lm);
    apply_overrides(cfg, o);
    const auto& m = cfg.lm;
    if (m.num_hiddens % m.num_heads != 0)
        config_error(detail::str("--num-heads ", m.num_heads, " must divide --num-hiddens ", m.num_hiddens));
    const int64_t kv = m.num_kv_heads ? m.num_kv_heads : m.num_heads;
    if (m.num_heads % kv != 0) config_error(detail::str("--num-kv-heads ", kv, " must divide --num-heads ", m.num_heads));
    if (m.rope && (m.num_hiddens / m.num_heads) % 2 != 0)
        config_error("--positions rope needs an even head width (--num-hiddens / --num-heads)");
    cfg.validate();
    return cfg;
}

}  // namespace

RunConfig configure_run(const std::string& preset, ModelKind kind, const RunOverrides& o) {
    check_architecture_overrides(o, kind);  // a flag of another kind ("--subword does not apply to --model lm")
    if (kind == ModelKind::lm) return configure_language_model(preset, o);
    RunConfig cfg = preset_config(preset, kind);
    const bool preset_subword = cfg.data.subword != data::SubwordKind::none;  // the full and real presets
    apply_overrides(cfg, o);
    check_fra_eng_languages(cfg.data);
    auto& t = cfg.train;
    if (t.schedule != optim::LrSchedule::constant && t.warmup_steps == 0) t.warmup_steps = 400;
    apply_vocabulary_rules(cfg, o, preset_subword);
    const auto& m = cfg.model;
    if (cfg.architecture == ModelKind::transformer && m.num_heads > 0 && m.num_hiddens % m.num_heads != 0)
        config_error(detail::str("the number of attention heads (--num-heads, ", m.num_heads,
                                 ") must divide the model width (--num-hiddens, ", m.num_hiddens,
                                 "): each head gets num_hiddens / num_heads dimensions"));
    cfg.validate();
    return cfg;
}

bool holds_stopped_run(const std::string& dir) {
    std::error_code ec;
    const fs::path d(dir);
    for (const char* f : {"model.safetensors", "checkpoint.safetensors"})
        if (fs::exists(fs::symlink_status(d / f, ec))) return false;
    if (!kept_checkpoints(dir).empty()) return false;
    const fs::path cfg = d / "config.json";
    if (!fs::is_regular_file(cfg, ec)) return false;
    try {  // a qkv run's config.json, not a user's file of that name
        const auto j = nlohmann::json::parse(util::read_file(cfg.string()));
        return j.is_object() && j.contains("data") && j["data"].is_object() && j.contains("model") &&
               j["model"].is_object() && j.contains("train") && j["train"].is_object();
    } catch (const std::exception&) {
        return false;
    }
}

void check_resume_checkpoint(const std::string& out_dir, bool lm) {
    std::error_code ec;
    const fs::path d(out_dir);
    const std::string ckpt = (d / "checkpoint.safetensors").string();
    if (fs::exists(ckpt, ec)) return;
    const std::string train = detail::str("qkv train", lm ? " --model lm" : "");
    const std::string out   = util::shell_quote(out_dir);
    std::string why;
    if (holds_stopped_run(out_dir))
        why = detail::str("the run in '", out_dir, "' was stopped before its first checkpoint, so nothing was trained "
                          "to continue; train it again without --resume (", train, " --out ", out,
                          " ...): the new run replaces its files");
    else if (fs::exists(d / "model.safetensors", ec))
        why = detail::str("'", out_dir, "' holds a model (model.safetensors) but not the checkpoint its training "
                          "would continue from; train a new model with --overwrite (replacing it) or into another --out");
    else if (!fs::is_directory(d, ec))
        why = detail::str("'", out_dir, "' does not exist, so there is nothing to resume; train a model with: ", train,
                          " --out ", out);
    else
        why = detail::str("'", out_dir, "' holds no qkv run to resume; train a model with: ", train, " --out ", out);
    throw ConfigError(detail::str("--resume: no checkpoint at '", ckpt, "': ", why));
}

RunConfig resume_config(const std::string& out_dir, const RunOverrides& o) {
    const bool lm = model_dir_kind(out_dir) == ModelKind::lm;
    check_resume_checkpoint(out_dir, lm);
    RunConfig cfg = load_model_dir_config(out_dir, lm);
    if (lm) {  // the text: where it is now, else the recorded path (train::run checks it exists)
        if (const auto path = o.get<std::string>("data.path")) cfg.data.path = *path;
    } else {
        cfg.data = model_data_config(out_dir, cfg, o.get<std::string>("data.path").value_or(""),
                                     o.get<std::string>("data.src_file").value_or(""),
                                     o.get<std::string>("data.tgt_file").value_or(""));
    }
    apply_overrides(cfg, o, /*stop_only=*/true);
    cfg.validate();
    return cfg;
}

RunConfig check_resume_overrides(const std::string& out_dir, const RunOverrides& o, const std::string& preset,
                                 std::FILE* log, bool lm) {
    const ModelKind asked = lm ? ModelKind::lm : ModelKind::transformer;
    // the other kind's flags, before the folder is read (a Bahdanau flag waits for its config.json)
    if (lm) check_architecture_overrides(o, asked);
    for (const auto& [key, v] : o.values)
        if (!lm && config_field(key).scope == FieldScope::lm)
            config_error(field_flag_name(config_field(key)) + " applies to --model lm only");
    if (!preset.empty()) preset_config(preset, asked);  // "--preset lm-tiny needs --model lm" and the converse
    const std::optional<ModelKind> kind = model_dir_kind(out_dir);
    if (!lm && kind == ModelKind::lm)
        config_error(detail::str("'", out_dir, "' holds a language model (qkv train --model lm); resume it with: qkv "
                                 "train --model lm --resume --out ", util::shell_quote(out_dir)));
    check_resume_checkpoint(out_dir, lm);
    if (lm && kind != ModelKind::lm)
        config_error(detail::str("--resume --model lm: '", out_dir, "' holds a translation model, not a language "
                                 "model; resume it without --model lm"));
    const RunConfig saved = load_model_dir_config(out_dir, lm);
    check_architecture_overrides(o, saved.architecture, out_dir);
    report_resume_diffs(out_dir, (fs::path(out_dir) / "config.json").string(), resume_flag_diffs(saved, o, preset), log);
    return resume_config(out_dir, o);
}

/// The process-wide numeric settings of this rank: kernel mode, attention backend, denormal
/// flushing and the kernel paths the CPU and QKV_MAX_ISA give (kernel_paths() without its line of
/// raw CPU features, which may differ harmlessly). Ranks that differ compute different roundings in
/// the optimizer and the kernels, so their parameters, meant to be identical, drift apart.
std::string rank_kernel_settings() {
    const AttentionBackend att = default_attention_backend();
    std::string paths;
    const std::string all = kernel_paths();
    for (size_t at = 0; at < all.size();) {
        const size_t end = std::min(all.find('\n', at), all.size());
        const std::string line = all.substr(at, end - at);
        if (line.rfind("cpu features:", 0) != 0) paths += line + "; ";
        at = end + 1;
    }
    return detail::str("--kernels ", kernel_mode() == KernelMode::reference ? "ref" : "fast", ", --attention ",
                       att == AttentionBackend::math ? "math" : att == AttentionBackend::flash ? "flash" : "auto",
                       ", --denormals ", flush_denormal() ? "flush" : "keep", "; ", paths);
}

std::string resume_already_done(const RunConfig& cfg, const TrainingProgress& p, const RunOverrides& given) {
    const auto& t = cfg.train;
    if (p.epoch >= t.epochs)
        return detail::str("the checkpoint has already trained ", p.epoch, " epoch", p.epoch == 1 ? "" : "s", " (",
                           given.has("train.epochs") ? "--epochs " : "config.json's epochs ", t.epochs,
                           "); give a larger --epochs to train on");
    if (t.max_steps > 0 && p.step >= t.max_steps)
        return detail::str("the checkpoint has already trained ", p.step, " steps (",
                           given.has("train.max_steps") ? "--max-steps " : "config.json's max_steps ", t.max_steps,
                           "); give a larger --max-steps to train on");
    if (t.time_budget_s > 0 && p.train_seconds >= t.time_budget_s)
        return detail::str("the checkpoint has already trained for ", util::format_duration(p.train_seconds), " (",
                           given.has("train.time_budget_s") ? "--time-budget " : "config.json's time budget ",
                           util::format_duration(t.time_budget_s),
                           ", counted over all runs); give a longer --time-budget (or none) to train on");
    return "";
}

RunResult run(RunConfig cfg, const RunOptions& given_opt, const RunOverrides& given) {
    const bool dp = given_opt.comm && given_opt.comm->size() > 1;
    // Ranks > 0 of a data-parallel run are silent and write nothing (RunOptions::comm).
    RunOptions quiet;
    if (dp && given_opt.comm->rank() != 0) {
        quiet = given_opt;
        quiet.log = nullptr;
        quiet.progress = false;
        quiet.hooks.clear();
        quiet.on_logged_step = nullptr;
        quiet.on_validated = nullptr;
        quiet.on_accepted = nullptr;  // ranks > 0 write nothing into --out
    }
    const RunOptions& opt = dp && given_opt.comm->rank() != 0 ? quiet : given_opt;
    if (opt.resume && opt.overwrite)
        config_error("--resume continues the model in --out and --overwrite replaces it: give one of them");
    if (cfg.architecture == ModelKind::lm) {  // the text, the decoder-only model (train/lm.h)
        cfg.validate();
        return run_language_model(std::move(cfg), given_opt, given);
    }
    cfg.world_size = dp ? opt.comm->size() : 1;
    cfg.validate();  // nothing is read or written before the configuration is known good
    if (cfg.architecture == ModelKind::transformer && cfg.model.num_heads > 0)
        check_forced_flash(cfg.model.num_hiddens / cfg.model.num_heads);
    if (dp)
        dist::check_same_on_all_ranks(*opt.comm, "the configuration (flags and config.json)",
                                      detail::str(to_json(cfg).dump(), " out ", opt.out_dir, " resume ", opt.resume,
                                                  " overwrite ", opt.overwrite));
    if (dp) check_same_reduction_on_all_ranks(*opt.comm, opt.reduce);  // before anything is written
    if (dp)
        dist::check_same_on_all_ranks(*opt.comm,
                                      "the kernel settings (--kernels, --attention, --denormals, QKV_KERNELS, "
                                      "QKV_ATTENTION, QKV_MAX_ISA and the CPU's kernel paths)",
                                      rank_kernel_settings());
    // The folder as the OS will find it once made (--out new/.., L/../x): taken before anything is made.
    const OutFolder out(opt.out_dir);
    const std::vector<std::string> held =
        opt.resume ? std::vector<std::string>{} : check_fresh_out(opt.out_dir, out.dir, opt.overwrite);
    if (!opt.resume && !opt.overwrite && !held.empty()) note_stopped_run(opt.out_dir, held, opt.log);
    if (!opt.resume && opt.log && given.has("train.warmup_steps") && cfg.train.schedule == optim::LrSchedule::constant)
        std::fprintf(opt.log, "note: --warmup has no effect with the constant learning-rate schedule (--schedule "
                              "warmup_inv_sqrt or warmup_linear_decay use it)\n");
    RunResult res;
    if (opt.resume) {
        const TrainingProgress p =
            read_checkpoint_progress((fs::path(opt.out_dir) / "checkpoint.safetensors").string());
        const std::string done = resume_already_done(cfg, p, given);
        if (!done.empty()) {
            if (!has_missing_records(opt.out_dir, p)) {
                res.nothing_to_do = done;  // config.json and the checkpoint stay as they are
                res.config        = cfg;
                return res;
            }
            // Killed during the validation after its last checkpoint: fit() trains no step and
            // writes the records that validation did not.
            if (opt.log)
                std::fprintf(opt.log, "qkv train: no step to train (%s); the run was stopped while it validated at "
                                      "step %lld, so that validation runs again for metrics.jsonl\n",
                             done.c_str(), (long long)p.step);
        }
    }
    if (opt.on_accepted) opt.on_accepted();
    if (opt.log)
        std::fprintf(opt.log, "qkv train: preset %s, %d thread%s%s%s\n", cfg.preset.empty() ? "-" : cfg.preset.c_str(),
                     get_num_threads(), get_num_threads() == 1 ? "" : "s",
                     cfg.train.precision == MatmulPrecision::bf16
                         ? detail::str("; mixed precision: bf16 matrix products, ", bf16_matmul_path(), "; attention on bf16 q, k, v, P and dS").c_str()
                         : "",
                     dp ? detail::str(" per rank; data-parallel over ", opt.comm->size(), " ranks (", opt.comm->backend(),
                                      "; gradients reduced ", opt.reduce.overlap ? "during backward" : "after backward",
                                      "; global batch ", cfg.train.batch_size, ")").c_str()
                        : "");
    res.data = read_data(cfg, opt, given);
    if (dp) dist::check_same_on_all_ranks(*opt.comm, "the data file (--data)", detail::str(res.data->fingerprint.pairs, " pairs, fingerprint ", fingerprint_hex(res.data->fingerprint.fnv1a64)));
    manual_seed(cfg.train.seed);  // init and dropout draw from the default generator
    res.model = build_model(cfg, kTrainingCopies);
    log_model(cfg, *res.model, opt.log);
    res.config = cfg;
    const TranslationData& d = *res.data;
    const FolderTraining t{.model = *res.model, .train = d.train, .valid = d.valid, .pad = d.tgt_vocab.pad(),
                           .metadata = {{"qkv.config", to_json(cfg).dump()},
                                        {kSrcVocabKey, vocab_fingerprint(d.src_vocab)},
                                        {kTgtVocabKey, vocab_fingerprint(d.tgt_vocab)}},
                           .write_files = [&] {
                               if (!opt.resume) write_run_files(opt.out_dir, cfg, d.src_vocab, d.tgt_vocab, d.subwords);
                           },
                           .undo_unstarted = false};
    std::optional<Trainer> trainer;
    if (train_in_folder(res, t, opt, out, !held.empty(), trainer) == FolderOutcome::restored_earlier) {
        res.restored_earlier = true;
        return res;
    }
    // The stopping rules given for this call are not part of the model's config.
    if (!dp || opt.comm->rank() == 0)
        write_run_files(opt.out_dir, cfg, res.data->src_vocab, res.data->tgt_vocab, res.data->subwords);
    res.trained = true;
    return res;
}

}  // namespace qkv::train
