// qkv.Translator (translate_batch / score_batch over a model folder, the code path of
// `qkv translate`: train::translate_tokens) and qkv.train (train::run, the code path of
// `qkv train`), with the GIL released while they compute.
#include <pybind11/stl/filesystem.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "bind.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/beam_search.h"
#include "qkv/decode/greedy.h"
#include "qkv/nn/layers.h"
#include "qkv/ops/precision.h"
#include "qkv/ops/softmax.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run.h"
#include "qkv/train/translation_data.h"

namespace qkv::py {
namespace {

using pyb::arg;

/// `qkv` (apps/qkv/main.cpp) flushes subnormals by default (core/parallel.h: speed, and PyTorch's
/// set_flush_denormal); translating and training do the same here, so results equal the CLI's, and
/// put the calling thread's setting back afterwards.
class FlushDenormals {
public:
    FlushDenormals() : prev_(flush_denormal()) { set_flush_denormal(true); }
    ~FlushDenormals() { set_flush_denormal(prev_); }
    FlushDenormals(const FlushDenormals&)            = delete;
    FlushDenormals& operator=(const FlushDenormals&) = delete;

private:
    bool prev_;
};

struct TranslationResult {
    std::string translation;
    std::vector<std::string> hypotheses;
    std::vector<double> scores;
    pyb::object attention = pyb::none();
};

struct ScoreResult {
    std::vector<std::string> tokens;  // the model's target units + "<eos>"
    std::vector<double> log_probs;    // one per token
    double score = 0;                 // their sum
};

/// A model folder shared by threads: each call borrows one loaded copy of the model (decoding
/// keeps per-call state in the model's caches, so one copy serves one call at a time) and a
/// call that finds none free loads another. Copies are kept for later calls.
class Translator {
public:
    /// compute_type as `qkv translate --compute-type`: fp32, bf16 (bf16 products and attention) or
    /// int8 (Linear weights quantized per channel after loading).
    Translator(std::string dir, std::string compute_type) : dir_(std::move(dir)), compute_type_(std::move(compute_type)) {
        if (compute_type_ != "fp32" && compute_type_ != "bf16" && compute_type_ != "int8")
            throw pyb::value_error("compute_type: expected 'fp32', 'bf16' or 'int8', got '" + compute_type_ + "'");
        auto m  = load();
        config_ = m->config;
        free_.push_back(std::move(m));
    }
    const std::string& dir() const { return dir_; }
    const std::string& compute_type() const { return compute_type_; }
    /// The matrix-product precision its calls set (thread-local, for the call's duration).
    MatmulPrecision precision() const { return compute_type_ == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp32; }
    const train::RunConfig& config() const { return config_; }

    struct Lease {
        Translator* owner;
        std::unique_ptr<train::ModelDir> m;
        ~Lease() {
            if (m) owner->give_back(std::move(m));
        }
    };
    Lease borrow() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!free_.empty()) {
                auto m = std::move(free_.back());
                free_.pop_back();
                return {this, std::move(m)};
            }
        }
        return {this, load()};
    }
    void give_back(std::unique_ptr<train::ModelDir> m) {
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back(std::move(m));
    }
    size_t copies_loaded() {
        std::lock_guard<std::mutex> lock(mu_);
        return free_.size();
    }
    /// Calls computing now, each on its own copy of the model with the GIL released: counted only
    /// inside the GIL-free part, so a Python thread that reads a non-zero value ran while another
    /// thread was translating (the property python/tests/test_translate.py checks).
    int active_calls() const { return active_.load(); }
    /// Counts a call as active for its lifetime; made and destroyed without the GIL.
    class Active {
    public:
        explicit Active(Translator& t) : t_(t) { ++t_.active_; }
        ~Active() { --t_.active_; }
        Active(const Active&)            = delete;
        Active& operator=(const Active&) = delete;

    private:
        Translator& t_;
    };

private:
    std::unique_ptr<train::ModelDir> load() const {
        auto m = std::make_unique<train::ModelDir>(train::load_model_dir(dir_));
        if (compute_type_ == "int8") nn::quantize_linears_int8(*m->model);
        return m;
    }
    std::string dir_;
    std::string compute_type_;
    train::RunConfig config_;
    std::mutex mu_;
    std::vector<std::unique_ptr<train::ModelDir>> free_;
    std::atomic<int> active_{0};
};

/// Word tokens of each sentence as `qkv translate` makes them; throws ValueError naming the index
/// for text the CLI would refuse (a NUL byte). Blank sentences give an empty token list.
std::vector<std::vector<std::string>> tokenize_all(const std::vector<std::string>& sentences, const char* what) {
    std::vector<std::vector<std::string>> out;
    for (size_t i = 0; i < sentences.size(); ++i) {
        const size_t bad = data::invalid_utf8_offset(sentences[i]);
        const size_t nul = sentences[i].find('\0');
        if (bad != std::string::npos || nul != std::string::npos)
            throw pyb::value_error(detail::str(what, "[", i, "]: ", bad <= nul ? "invalid UTF-8" : "NUL byte",
                                               " at byte offset ", std::min(bad, nul)));
        auto t = data::tokenize_nmt(sentences[i]);
        bool blank = true;
        for (const auto& w : t)
            for (unsigned char ch : w)
                if (!std::isspace(ch)) blank = false;
        if (blank) t.clear();
        out.push_back(std::move(t));
    }
    return out;
}

std::vector<TranslationResult> translate_batch(Translator& tr, const std::vector<std::string>& sentences,
                                               int64_t beam_size, double length_penalty, int64_t max_len,
                                               int64_t num_hypotheses, bool return_scores, bool return_attention,
                                               int64_t batch_size, bool no_unk) {
    // The ranges of `qkv translate`'s flags (and the server's fields): a beam of 10^12 would only
    // fail allocating, a NaN length penalty would rank hypotheses at random.
    if (beam_size > 100)
        throw pyb::value_error(detail::str("beam_size: ", beam_size, " is above 100 (<= 0: config.json's)"));
    if (std::isnan(length_penalty) || length_penalty > 10)
        throw pyb::value_error(detail::str("length_penalty: ", length_penalty, " is not in [0, 10] (< 0: config.json's)"));
    if (max_len > 1000)
        throw pyb::value_error(detail::str("max_len: ", max_len, " is above 1000 (<= 0: config.json's)"));
    if (batch_size < 1 || batch_size > 100000)
        throw pyb::value_error(detail::str("batch_size: ", batch_size, " is not in [1, 100000]"));
    auto words = tokenize_all(sentences, "sentences");
    std::vector<TranslationResult> res(sentences.size());
    std::vector<std::vector<float>> att_data;
    std::vector<std::array<int64_t, 2>> att_shape;
    {
        pyb::gil_scoped_release nogil;
        FlushDenormals flush;
        const MatmulPrecisionGuard precision(tr.precision());
        auto lease            = tr.borrow();
        const Translator::Active active(tr);
        train::ModelDir& m    = *lease.m;
        train::TranslateOptions to;  // the defaults of `qkv translate` (config.json's decode section)
        to.max_len        = max_len > 0 ? max_len : m.config.decode.max_len;
        to.beam           = beam_size > 0 ? beam_size : m.config.decode.beam;
        to.length_penalty = length_penalty >= 0 ? length_penalty : m.config.decode.length_penalty;
        to.batch_size     = batch_size;
        to.no_unk         = no_unk;
        if (num_hypotheses < 1 || num_hypotheses > std::max<int64_t>(to.beam, 1))
            throw Error(detail::str("num_hypotheses: ", num_hypotheses, " must be between 1 and beam_size (", to.beam, ")"));
        std::vector<std::vector<std::string>> src;
        std::vector<size_t> row_of;
        for (auto& w : words) {
            row_of.push_back(w.empty() ? std::string::npos : src.size());
            if (!w.empty()) src.push_back(w);
        }
        const auto hyp = train::translate_tokens(m, src, to);
        for (size_t i = 0; i < words.size(); ++i)
            if (row_of[i] != std::string::npos) res[i].translation = train::join_tokens(hyp[row_of[i]]);
        if ((num_hypotheses > 1 || return_scores) && !src.empty()) {
            // The n best with their scores: beam_search over the same source encoding (beam K = 1
            // is greedy decoding, beam_search's contract).
            const auto units = train::source_units(m, src);
            decode::BeamOptions b;
            b.beam_size      = to.beam;
            b.num_return     = num_hypotheses;
            b.bos            = m.tgt_vocab.bos();
            b.eos            = m.tgt_vocab.eos();
            b.max_len        = to.max_len;
            b.length_penalty = to.length_penalty;
            if (no_unk) b.banned = {m.tgt_vocab.unk()};
            for (size_t start = 0; start < units.size(); start += size_t(batch_size)) {
                const size_t end = std::min(units.size(), start + size_t(batch_size));
                data::Sentences chunk(units.begin() + long(start), units.begin() + long(end));
                data::SeqArray a = train::encode_sources(chunk, m.src_vocab, m.config.data.num_steps);
                const auto hs    = decode::beam_search(*m.model, from_vector(a.ids, {a.rows, a.num_steps}),
                                                       from_vector(a.valid_len, {a.rows}), b);
                for (size_t r = 0; r < hs.size(); ++r)
                    for (size_t i = 0; i < words.size(); ++i)
                        if (row_of[i] == start + r) {
                            for (const auto& h : hs[r]) {
                                res[i].hypotheses.push_back(train::join_tokens(train::target_words(m, m.tgt_vocab.decode(h.tokens))));
                                res[i].scores.push_back(h.score);
                            }
                        }
            }
        }
        if (return_attention) {
            // Cross-attention of the last decoder layer, averaged over heads, one sentence at a time
            // with greedy decoding (what `qkv heatmap` draws): (target steps, source units).
            att_data.resize(words.size());
            att_shape.resize(words.size(), {0, 0});
            const auto units = train::source_units(m, src);
            for (size_t i = 0; i < words.size(); ++i) {
                if (row_of[i] == std::string::npos) continue;
                data::SeqArray a = train::encode_sources({units[row_of[i]]}, m.src_vocab, m.config.data.num_steps);
                models::DecoderAttentionTrace trace;
                decode::GreedyOptions g;
                g.bos     = m.tgt_vocab.bos();
                g.eos     = m.tgt_vocab.eos();
                g.max_len = to.max_len;
                g.trace   = &trace;
                if (no_unk) g.banned = {m.tgt_vocab.unk()};
                decode::greedy_decode(*m.model, from_vector(a.ids, {1, a.num_steps}), from_vector(a.valid_len, {1}), g);
                const int64_t steps = int64_t(trace.cross.size());
                const int64_t ts    = a.valid_len[0];
                att_shape[i]        = {steps, ts};
                att_data[i].assign(size_t(steps * ts), 0.f);
                for (int64_t s = 0; s < steps; ++s) {
                    if (trace.cross[size_t(s)].empty()) continue;
                    Tensor w = trace.cross[size_t(s)].back().contiguous().to(DType::f32);  // last layer
                    // (1, H, 1, Tk) for the Transformer, (1, Tk) for Bahdanau: average all but Tk.
                    const int64_t tk = w.size(-1);
                    const auto v     = w.to_vector<float>();
                    const int64_t n  = int64_t(v.size()) / tk;
                    for (int64_t j = 0; j < std::min(ts, tk); ++j) {
                        double acc = 0;
                        for (int64_t h = 0; h < n; ++h) acc += v[size_t(h * tk + j)];
                        att_data[i][size_t(s * ts + j)] = float(acc / double(n));
                    }
                }
            }
        }
    }
    if (return_attention)
        for (size_t i = 0; i < res.size(); ++i) {
            pyb::array_t<float> a({att_shape[i][0], att_shape[i][1]});
            std::copy(att_data[i].begin(), att_data[i].end(), a.mutable_data());
            res[i].attention = a;
        }
    return res;
}

std::vector<ScoreResult> score_batch(Translator& tr, const std::vector<std::string>& sources,
                                     const std::vector<std::string>& targets) {
    if (sources.size() != targets.size())
        throw pyb::value_error(detail::str("score_batch: ", sources.size(), " sources but ", targets.size(), " targets"));
    auto sw = tokenize_all(sources, "sources");
    auto tw = tokenize_all(targets, "targets");
    std::vector<ScoreResult> out(sources.size());
    pyb::gil_scoped_release nogil;
    FlushDenormals flush;
    const MatmulPrecisionGuard precision(tr.precision());
    auto lease         = tr.borrow();
    const Translator::Active active(tr);
    train::ModelDir& m = *lease.m;
    m.model->eval();
    NoGradGuard ng;
    const auto su = train::source_units(m, sw);
    for (size_t i = 0; i < sw.size(); ++i) {
        data::SeqArray a = train::encode_sources({su[i]}, m.src_vocab, m.config.data.num_steps);
        std::vector<std::string> units = m.subwords.active() ? m.subwords.tgt->encode(tw[i]) : tw[i];
        std::vector<int64_t> ids = m.tgt_vocab.encode(units);
        ids.push_back(m.tgt_vocab.eos());
        std::vector<int64_t> dec{m.tgt_vocab.bos()};
        dec.insert(dec.end(), ids.begin(), ids.end() - 1);
        const int64_t T = int64_t(dec.size());
        Tensor logits   = m.model->forward(from_vector(a.ids, {1, a.num_steps}), from_vector(a.valid_len, {1}),
                                           from_vector(dec, {1, T}));
        const auto lp   = log_softmax(logits, -1).contiguous().to(DType::f64).to_vector<double>();
        const int64_t V = logits.size(-1);
        ScoreResult& r  = out[i];
        for (int64_t t = 0; t < T; ++t) {
            const double v = lp[size_t(t * V + ids[size_t(t)])];
            r.tokens.push_back(m.tgt_vocab.decode({ids[size_t(t)]}).front());
            r.log_probs.push_back(v);
            r.score += v;
        }
    }
    return out;
}

// ---- qkv.train ----

/// A duration setting as qkv train's flag takes it: seconds as a number (0: no limit), or a string
/// "90", "90s", "20m", "1.5h", or "none"/"off" (no limit); train::parse_duration_or_off's rules
/// (no "0" string, nothing under train::kMinDurationSeconds, no inf/nan/negative), named by `name`.
double duration_seconds(pyb::handle v, const std::string& name) {
    const std::string expected = "seconds (a number), a duration such as '90s', '20m' or '1.5h', or 'none'";
    if (!pyb::isinstance<pyb::str>(v)) {
        // numpy's bool_ and arrays cast to double too; Python's bool and lists are refused.
        const bool array_like = pyb::hasattr(v, "dtype") &&
                                ((pyb::hasattr(v, "ndim") && v.attr("ndim").cast<int>() != 0) ||
                                 v.attr("dtype").attr("kind").cast<std::string>() == "b");
        if (array_like)
            throw pyb::type_error(detail::str("train: ", name, " must be ", expected, "; got ",
                                              std::string(pyb::str(v.get_type().attr("__name__")))));
        double seconds = 0;
        try {
            seconds = v.cast<double>();  // int, float, numpy scalars
        } catch (const pyb::cast_error&) {
            throw pyb::type_error(detail::str("train: ", name, " must be ", expected, "; got ",
                                              std::string(pyb::str(v.get_type().attr("__name__")))));
        }
        try {
            return train::check_duration_seconds(seconds, "train: " + name);
        } catch (const Error& e) {
            throw pyb::value_error(e.what());
        }
    }
    const std::string t = v.cast<std::string>();
    try {
        return train::parse_duration_or_off(t);
    } catch (const Error& e) {
        throw pyb::value_error(detail::str("train: ", name, " must be ", expected, "; got '", t, "' (", e.what(), ")"));
    }
}

train::RunOverrides overrides_from(const pyb::dict& kw) {
    train::RunOverrides o;
    for (auto kv : kw) {
        std::string k = kv.first.cast<std::string>();
        for (auto& ch : k)
            if (ch == '-') ch = '_';
        const pyb::handle v = kv.second;
        // None means "not set", for known names only (a misspelt name is an error either way).
        static const std::set<std::string> known = {
            "batch_size", "bidirectional", "bucket_pool", "clip", "clip_norm", "data", "data_path", "dropout",
            "embed_size", "epochs", "ffn_num_hiddens", "label_smoothing", "log_every", "loss_on_padding", "lr",
            "max_pairs", "max_src_tokens", "max_steps", "max_tgt_tokens", "min_freq", "n_test", "n_valid",
            "num_blks", "num_heads", "num_hiddens", "num_layers", "num_steps", "pe_quirk", "precision",
            "schedule", "seed", "shared_vocab", "strict", "subword", "test_pairs", "tie_weights",
            "src_lang", "tgt_lang", "src_file", "tgt_file", "keep_checkpoints",
            "time_budget", "time_budget_s", "trim", "val_every", "val_every_s", "valid_pairs", "vocab_size",
            "warmup", "warmup_steps"};
        if (!known.count(k))
            throw pyb::type_error(detail::str("train: unknown setting '", kv.first.cast<std::string>(),
                                              "' (the names of qkv train's flags, with _ or -)"));
        if (v.is_none()) continue;
        // True is an int to Python: a number setting must not take it (max_steps=True ran 1 step).
        static const std::set<std::string> switches = {"bidirectional", "loss_on_padding", "pe_quirk", "shared_vocab",
                                                        "strict", "tie_weights", "trim"};
        if (pyb::isinstance<pyb::bool_>(v) && !switches.count(k))
            throw pyb::type_error(detail::str("train: setting '", kv.first.cast<std::string>(),
                                              "' has the wrong type (bool)"));
        try {
        if (k == "epochs") o.epochs = v.cast<int64_t>();
        else if (k == "max_steps") o.max_steps = v.cast<int64_t>();
        else if (k == "time_budget" || k == "time_budget_s") o.time_budget_s = duration_seconds(v, k);
        else if (k == "log_every") o.log_every = v.cast<int64_t>();
        else if (k == "data" || k == "data_path") o.data_path = v.cast<std::string>();
        else if (k == "src_file") o.src_file = v.cast<std::string>();
        else if (k == "tgt_file") o.tgt_file = v.cast<std::string>();
        else if (k == "src_lang") o.src_lang = v.cast<std::string>();
        else if (k == "tgt_lang") o.tgt_lang = v.cast<std::string>();
        else if (k == "keep_checkpoints") o.keep_checkpoints = v.cast<int64_t>();
        else if (k == "num_steps") o.num_steps = v.cast<int64_t>();
        else if (k == "max_pairs") o.max_pairs = v.cast<int64_t>();
        else if (k == "max_src_tokens") o.max_src_tokens = v.cast<int64_t>();
        else if (k == "max_tgt_tokens") o.max_tgt_tokens = v.cast<int64_t>();
        else if (k == "test_pairs" || k == "n_test") o.n_test = v.cast<int64_t>();
        else if (k == "valid_pairs" || k == "n_valid") o.n_valid = v.cast<int64_t>();
        else if (k == "min_freq") o.min_freq = v.cast<int64_t>();
        else if (k == "strict") o.strict = v.cast<bool>();
        else if (k == "subword") o.subword = data::parse_subword_kind(v.cast<std::string>());
        else if (k == "vocab_size") o.vocab_size = v.cast<int64_t>();
        else if (k == "shared_vocab") o.shared_vocab = v.cast<bool>();
        else if (k == "num_hiddens") o.num_hiddens = v.cast<int64_t>();
        else if (k == "num_blks") o.num_blks = v.cast<int64_t>();
        else if (k == "num_heads") o.num_heads = v.cast<int64_t>();
        else if (k == "ffn_num_hiddens") o.ffn_num_hiddens = v.cast<int64_t>();
        else if (k == "embed_size") o.embed_size = v.cast<int64_t>();
        else if (k == "num_layers") o.num_layers = v.cast<int64_t>();
        else if (k == "dropout") o.dropout = v.cast<double>();
        else if (k == "bidirectional") o.bidirectional = v.cast<bool>();
        else if (k == "pe_quirk") o.pe_quirk = v.cast<bool>();
        else if (k == "tie_weights") o.tie_weights = v.cast<bool>();
        else if (k == "batch_size") o.batch_size = v.cast<int64_t>();
        else if (k == "warmup" || k == "warmup_steps") o.warmup_steps = v.cast<int64_t>();
        else if (k == "bucket_pool") o.bucket_pool = v.cast<int64_t>();
        else if (k == "lr") o.lr = v.cast<double>();
        else if (k == "label_smoothing") o.label_smoothing = v.cast<double>();
        else if (k == "clip" || k == "clip_norm") o.clip_norm = v.cast<double>();
        else if (k == "val_every" || k == "val_every_s") o.val_every_s = duration_seconds(v, k);
        else if (k == "seed") o.seed = v.cast<uint64_t>();
        else if (k == "loss_on_padding") o.loss_on_padding = v.cast<bool>();
        else if (k == "schedule") o.schedule = train::parse_schedule(v.cast<std::string>());
        else if (k == "precision") o.precision = parse_precision(v.cast<std::string>(), "precision");
        else if (k == "trim") {
            if (!pyb::isinstance<pyb::str>(v)) o.trim_batches = v.cast<bool>();
            else if (const auto t = v.cast<std::string>(); t == "on" || t == "off") o.trim_batches = t == "on";
            else throw pyb::value_error(detail::str("train: trim must be 'on', 'off' or a bool, got '", t, "'"));
        }
        else throw pyb::type_error(detail::str("train: unknown setting '", kv.first.cast<std::string>(),
                                               "' (the names of qkv train's flags, with _ or -)"));
        } catch (const pyb::cast_error&) {  // pybind11's message names C++ types, not the setting
            throw pyb::type_error(detail::str("train: setting '", kv.first.cast<std::string>(), "' has the wrong type (",
                                              pyb::str(pyb::type::of(v)).cast<std::string>(), ")"));
        }
    }
    return o;
}

/// Runs train::run on a worker thread while this (the calling) thread waits with the GIL released,
/// taking it back every 20 ms to let Python handle signals: a KeyboardInterrupt (Ctrl-C) sets the
/// run's interrupt flag, so it stops at the next step boundary with a checkpoint, and is raised
/// again once the run has returned. Callbacks run on the worker thread, with the GIL.
pyb::dict train_py(const std::string& out_dir, const std::string& preset, const std::string& model, bool resume,
                   bool overwrite, bool progress, bool quiet, const pyb::object& on_step, const pyb::object& on_validation,
                   const pyb::dict& settings) {
    // The CLI's up-front --out checks, in Python's terms (else a library message, or a folder
    // made under a name that is already a file's).
    if (out_dir.empty()) throw pyb::value_error("train: out is empty: name the folder to write the model to");
    if (std::filesystem::exists(out_dir) && !std::filesystem::is_directory(out_dir))
        throw pyb::value_error(detail::str("train: out '", out_dir, "' is an existing file, not a folder"));
    const train::RunOverrides o = overrides_from(settings);
    train::RunConfig cfg;
    if (resume) {
        train::check_architecture_overrides(o, train::load_model_dir_config(out_dir).architecture, out_dir);
        cfg = train::resume_config(out_dir, o);
    } else {
        cfg = train::configure_run(preset, train::parse_model_kind(model), o);
    }
    static volatile std::sig_atomic_t stop_flag;
    stop_flag = 0;
    train::RunOptions ro;
    ro.out_dir   = out_dir;
    ro.resume    = resume;
    ro.overwrite = overwrite;
    ro.progress  = progress;
    ro.log       = quiet ? nullptr : stderr;
    ro.interrupt = &stop_flag;
    std::exception_ptr cb_error;  // a callback's exception ends the run and is raised here
    std::mutex cb_mu;
    auto call = [&](const pyb::object& f, auto&&... args) {
        pyb::gil_scoped_acquire gil;
        try {
            f(args...);
        } catch (...) {
            std::lock_guard<std::mutex> lock(cb_mu);
            if (!cb_error) cb_error = std::current_exception();
            stop_flag = SIGINT;  // stop at the next step boundary, with a checkpoint
        }
    };
    if (!on_step.is_none())
        ro.on_logged_step = [&](const train::LoggedStep& s) {
            pyb::gil_scoped_acquire gil;
            pyb::dict d;
            d["step"]          = s.step;
            d["epoch"]         = s.epoch_pos;
            d["loss"]          = s.loss;
            d["lr"]            = s.lr;
            d["tokens_per_s"]  = s.tokens_per_s;
            d["train_seconds"] = s.train_seconds;
            call(on_step, d);
        };
    if (!on_validation.is_none())
        ro.on_validated = [&](int64_t step, double val_loss) {
            pyb::gil_scoped_acquire gil;
            pyb::dict d;
            d["step"]     = step;
            d["val_loss"] = val_loss;
            call(on_validation, d);
        };
    train::RunResult r;
    std::exception_ptr run_error;
    std::atomic<bool> done{false};
    bool interrupted = false;
    {
        pyb::gil_scoped_release nogil;
        std::thread worker([&] {
            FlushDenormals flush;
            try {
                r = train::run(cfg, ro, o);
            } catch (...) {
                run_error = std::current_exception();
            }
            done = true;
        });
        while (!done) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            pyb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) {  // the handler raised (KeyboardInterrupt): stop at a step boundary
                PyErr_Clear();
                interrupted = true;
                stop_flag   = SIGINT;
            }
        }
        worker.join();
    }
    if (cb_error) std::rethrow_exception(cb_error);
    if (run_error) std::rethrow_exception(run_error);
    if (interrupted) {
        PyErr_SetString(PyExc_KeyboardInterrupt,
                        detail::str("training stopped at step ", r.train.steps, "; checkpoint in ", out_dir,
                                    " (resume with qkv.train(out_dir, resume=True))").c_str());
        throw pyb::error_already_set();
    }
    pyb::dict d;
    d["trained"]       = r.trained;
    d["nothing_to_do"] = r.nothing_to_do;
    d["steps"]         = r.train.steps;
    d["stop_reason"]   = r.train.stop_reason;
    d["train_seconds"] = r.train.train_seconds;
    d["tokens_per_s"]  = r.train.tokens_per_s;
    pyb::list epochs;
    for (const auto& e : r.train.epochs) {
        pyb::dict ed;
        ed["epoch"]      = e.epoch;
        ed["train_loss"] = e.train_loss;
        ed["val_loss"]   = e.val_loss;
        epochs.append(ed);
    }
    d["epochs"]  = epochs;
    d["out_dir"] = out_dir;
    return d;
}

}  // namespace

void bind_translate(pyb::module_& m) {
    pyb::class_<TranslationResult>(m, "TranslationResult")
        .def_readonly("translation", &TranslationResult::translation)
        .def_readonly("hypotheses", &TranslationResult::hypotheses)
        .def_readonly("scores", &TranslationResult::scores)
        .def_readonly("attention", &TranslationResult::attention)
        .def("__repr__", [](const TranslationResult& r) { return "TranslationResult(" + std::string(pyb::repr(pyb::str(r.translation))) + ")"; });
    pyb::class_<ScoreResult>(m, "ScoreResult")
        .def_readonly("tokens", &ScoreResult::tokens)
        .def_readonly("log_probs", &ScoreResult::log_probs)
        .def_readonly("score", &ScoreResult::score);
    pyb::class_<Translator, std::shared_ptr<Translator>>(m, "Translator", R"(A trained model folder (qkv train --out DIR).

translate_batch runs `qkv translate`'s code path (train::translate_tokens): same tokenisation, same
defaults from config.json, same output. Thread-safe: concurrent calls from several Python threads
each borrow their own loaded copy of the model (a second copy is loaded the first time two calls
overlap), and the GIL is released while decoding, so threads translate in parallel.
compute_type as `qkv translate --compute-type`: "fp32" (default), "bf16" (bf16 matrix products and
attention, fp32 accumulation) or "int8" (Linear weights quantized per output channel, activations
per row at run time; CTranslate2's name for the same setting). ValueError for another value.)")
        .def(pyb::init([](const std::filesystem::path& dir, const std::string& compute_type) {
                 pyb::gil_scoped_release nogil;  // a str or any os.PathLike (pathlib.Path)
                 return std::make_shared<Translator>(dir.string(), compute_type);
             }),
             arg("model_dir"), arg("compute_type") = "fp32")
        .def_property_readonly("model_dir", &Translator::dir)
        .def_property_readonly("compute_type", &Translator::compute_type)
        .def_property_readonly("active_calls", &Translator::active_calls,
                               "Number of translate_batch / score_batch calls computing now, each on its own copy of "
                               "the model with the GIL released (0 when none; for monitoring).")
        .def_property_readonly("architecture", [](const Translator& t) { return std::string(train::model_kind_name(t.config().architecture)); })
        .def("translate_batch", &translate_batch, arg("sentences"), pyb::kw_only(), arg("beam_size") = 0,
             arg("length_penalty") = -1.0, arg("max_len") = 0, arg("num_hypotheses") = 1, arg("return_scores") = false,
             arg("return_attention") = false, arg("batch_size") = 500, arg("no_unk") = false,
             R"(One TranslationResult per sentence: .translation (the best hypothesis, as `qkv translate` prints it;
"" for a blank sentence); with num_hypotheses > 1 or return_scores, .hypotheses and .scores (beam search's
n best, length-penalised log-probabilities); with return_attention, .attention: a float32 array (target
steps, source units) of the last decoder layer's cross-attention averaged over heads (greedy decoding).
beam_size, length_penalty, max_len <= 0 / < 0 take config.json's decode settings, as the CLI does.)")
        .def("score_batch", &score_batch, arg("sources"), arg("targets"),
             "Teacher-forced log-probabilities of each target given its source: ScoreResult(.tokens (target units + "
             "<eos>), .log_probs, .score = their sum).");

    m.def("_train", &train_py, arg("out_dir"), arg("preset"), arg("model"), arg("resume"), arg("overwrite"),
          arg("progress"), arg("quiet"), arg("on_step"), arg("on_validation"), arg("settings"));
}

}  // namespace qkv::py
