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
#include "train/lm_run.h"
#include "train/replaced_run.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

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

namespace {

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

LmData load_lm_data(const RunConfig& run, const data::Vocab* given) {
    const int64_t num_steps = run.data.num_steps;
    const double valid_fraction = run.data.valid_fraction;
    const DataFingerprint& recorded = run.data.fingerprint;
    QKV_CHECK(num_steps >= 1, "language model: num_steps must be >= 1, got ", num_steps);
    QKV_CHECK(valid_fraction > 0 && valid_fraction < 0.5, "language model: valid_fraction must be in (0, 0.5), got ",
              valid_fraction);
    const std::string path = locate_lm_text(run.data.path);
    const std::string text = preprocess_lm_text(read_lm_text(path));
    LmData d;
    d.fingerprint_chars = int64_t(text.size());
    d.fingerprint_fnv1a64 = dist::fingerprint(text);
    if (given && recorded.characters > 0)
        QKV_CHECK(d.fingerprint_chars == recorded.characters && d.fingerprint_fnv1a64 == recorded.fnv1a64, "'",
                  path, "' is not the text this model was trained on: ", d.fingerprint_chars, " characters after "
                  "preprocessing, FNV-1a 64 ", fingerprint_hex(d.fingerprint_fnv1a64), "; config.json records ",
                  recorded.characters, " characters, ", fingerprint_hex(recorded.fnv1a64),
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
    const int64_t split = int64_t(double(n) * (1.0 - valid_fraction));
    d.train = windows(ids, 0, split, num_steps);
    d.valid = windows(ids, split, n, num_steps);
    if (d.train.n < 1 || d.valid.n < 1) {
        // The smallest length whose both parts hold a sequence of num_steps + 1.
        int64_t need = num_steps + 1;
        while (int64_t(double(need) * (1.0 - valid_fraction)) < num_steps + 1 ||
               need - int64_t(double(need) * (1.0 - valid_fraction)) < num_steps + 1)
            ++need;
        throw Error(detail::str("'", path, "' has ", n, " characters after preprocessing: too short; the held-out last ",
                                valid_fraction * 100, " % and the rest must each hold one sequence of ",
                                num_steps + 1, " characters (num_steps + 1), which takes at least ", need,
                                " characters"));
    }
    d.train_tokens = split, d.valid_tokens = n - split;
    d.summary = detail::str(path, ": ", n, " characters after D2L's preprocessing, vocabulary ", d.vocab.size(), "; ",
                            d.train.n, " training sequences of ", num_steps, " (", split, " characters), ", d.valid.n,
                            " validation sequences (the last ", n - split, ")");
    return d;
}

namespace {

/// --resume's checks before anything is read: the checkpoint is a language model's; what is left to
/// do (non-empty: nothing, the run already reached its stopping rule and its records are complete);
/// the recorded text still exists unless --data gives it.
std::string lm_resume_already_done(const RunConfig& cfg, const RunOptions& opt, const RunOverrides& given) {
    const fs::path dir(opt.out_dir);
    check_resume_checkpoint(opt.out_dir, /*lm=*/true);
    const TrainingProgress p = read_checkpoint_progress((dir / "checkpoint.safetensors").string());
    const std::string done = resume_already_done(cfg, p, given);
    if (!done.empty() && !has_missing_records(opt.out_dir, p)) return done;
    std::error_code ec;
    const std::string& path = cfg.data.path;
    if (!given.has("data.path") && !path.empty() && !fs::exists(path, ec))
        throw Error(detail::str("the text '", path, "' recorded in ", (dir / "config.json").string(),
                                " (data.path) does not exist; pass it with --data PATH (its fingerprint is checked)"));
    return "";
}

/// The run's first lines: threads and precision, the data, the model.
void log_lm_run(std::FILE* log, const RunConfig& cfg, const LmData& d, const models::TransformerLM& model) {
    if (!log) return;
    std::fprintf(log, "qkv train: language model, %d thread%s%s\n", get_num_threads(), get_num_threads() == 1 ? "" : "s",
                 cfg.train.precision == MatmulPrecision::bf16
                     ? detail::str("; mixed precision: bf16 matrix products, ", bf16_matmul_path(),
                                   "; attention on bf16 q, k, v, P and dS").c_str()
                     : "");
    std::fprintf(log, "data: %s\n", d.summary.c_str());
    const auto& m = cfg.lm;
    std::fprintf(log, "model: decoder-only Transformer, %lld parameters (C %lld, %lld blocks, %lld heads%s, FFN %lld, %s%s, dropout %g)\n",
                 (long long)model.num_parameters(), (long long)m.num_hiddens, (long long)m.num_blks,
                 (long long)m.num_heads,
                 m.num_kv_heads > 0 && m.num_kv_heads != m.num_heads ? detail::str(" / ", m.num_kv_heads, " key-value").c_str() : "",
                 (long long)m.ffn_num_hiddens, m.rope ? "RoPE" : "sinusoidal positions",
                 m.window > 0 ? detail::str(", window ", m.window).c_str() : "", m.dropout);
}

/// config.json and vocab.txt of a fresh run; on --resume, the data fingerprint recorded in an older
/// folder's config.json, and the text given with --data as its recorded path.
void write_lm_folder(RunConfig& cfg, const LmData& d, const RunOptions& opt, const RunOverrides& given) {
    const fs::path dir(opt.out_dir);
    const std::string cfg_file = (dir / "config.json").string();
    if (!opt.resume) fs::create_directories(dir);
    // Temporaries of these files' writes cut short by a kill of an earlier run (the trainer
    // removes those of the checkpoint, model and metrics).
    for (const char* f : {"config.json", "vocab.txt"}) util::remove_stale_temp_files((dir / f).string());
    if (!opt.resume) {
        cfg.data.path = fs::weakly_canonical(locate_lm_text(cfg.data.path)).string();
        cfg.data.fingerprint.characters = d.fingerprint_chars, cfg.data.fingerprint.fnv1a64 = d.fingerprint_fnv1a64;
        util::write_file_atomic(cfg_file, to_json(cfg).dump(2) + "\n");
        d.vocab.save((dir / "vocab.txt").string());
    } else if (cfg.data.fingerprint.characters == 0 || given.has("data.path")) {
        // A folder from before data.fingerprint gets it now; a text given with --data becomes
        // the recorded path (the fingerprint said it is the same text). The file's other
        // values (its stopping rules) stay.
        json j = json::parse(util::read_file(cfg_file));
        j["data"]["fingerprint"] = {{"characters", d.fingerprint_chars},
                                    {"fnv1a64", fingerprint_hex(d.fingerprint_fnv1a64)}};
        if (given.has("data.path")) j["data"]["path"] = fs::weakly_canonical(locate_lm_text(cfg.data.path)).string();
        util::write_file_atomic(cfg_file, j.dump(2) + "\n");
        if (cfg.data.fingerprint.characters == 0 && opt.log)
            std::fprintf(opt.log, "note: %s recorded no data fingerprint (an older qkv); the text was checked "
                                  "against the vocabulary only (the fingerprint is recorded now)\n", cfg_file.c_str());
    }
}

}  // namespace

RunResult run_language_model(RunConfig cfg, const RunOptions& opt, const RunOverrides& given) {
    if (opt.comm && opt.comm->size() > 1)  // each rank would train its own copy into the one folder
        throw ConfigError(detail::str("--model lm trains in one process, but mpirun started ", opt.comm->size(),
                                      " of it: data-parallel training is for the Transformer and Bahdanau models; run "
                                      "qkv train --model lm without mpirun"));
    check_forced_flash(cfg.lm.num_hiddens / cfg.lm.num_heads);
    const fs::path dir(opt.out_dir);
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
            res.config        = cfg;
            return res;
        }
    }
    if (opt.on_accepted) opt.on_accepted();
    data::Vocab saved;
    if (opt.resume) saved = data::Vocab::load((dir / "vocab.txt").string());
    const LmData d = load_lm_data(cfg, opt.resume ? &saved : nullptr);
    cfg.lm.vocab_size = d.vocab.size();
    cfg.train.label_smoothing = 0.0;  // exact NLL: perplexity = exp(validation loss)
    manual_seed(cfg.train.seed);
    auto model = std::make_shared<models::TransformerLM>(cfg.lm);
    log_lm_run(opt.log, cfg, d, *model);
    RunResult res;
    res.config = cfg;
    const auto view = std::make_shared<models::LMTrainingView>(model);  // the Trainer's EncoderDecoder
    const FolderTraining t{.model = *view, .train = d.train, .valid = d.valid, .pad = d.vocab.pad(),
                           .metadata       = {{kLmVocabKey, vocab_fingerprint(d.vocab)}},
                           .write_files    = [&] { write_lm_folder(res.config, d, opt, given); },
                           .undo_unstarted = true};
    std::optional<Trainer> trainer;
    const FolderOutcome outcome = train_in_folder(res, t, opt, out, replace, trainer);
    if (outcome == FolderOutcome::restored_earlier) res.restored_earlier = true;
    if (outcome != FolderOutcome::trained) return res;  // trained = false
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

}  // namespace qkv::train
