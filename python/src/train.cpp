// qkv.train (train::run, the code path of `qkv train`), with the GIL released while it trains.
#include <pybind11/stl/filesystem.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "bind.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/train/run.h"

namespace qkv::py {
namespace {

using pyb::arg;

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
            "batch_size", "batch_tokens", "bidirectional", "bucket_pool", "clip", "clip_norm", "data", "data_path", "dropout",
            "embed_size", "epochs", "ffn_num_hiddens", "label_smoothing", "log_every", "loss_on_padding", "lr",
            "max_pairs", "max_src_tokens", "max_steps", "max_tgt_tokens", "min_freq", "n_test", "n_valid",
            "num_blks", "num_heads", "num_hiddens", "num_layers", "num_steps", "pe_quirk", "precision",
            "schedule", "seed", "shard_optimizer", "shared_vocab", "strict", "subword", "test_pairs", "tie_weights",
            "src_lang", "tgt_lang", "src_file", "tgt_file", "keep_checkpoints",
            "time_budget", "time_budget_s", "trim", "val_every", "val_every_s", "valid_pairs", "vocab_size",
            "warmup", "warmup_steps"};
        if (!known.count(k))
            throw pyb::type_error(detail::str("train: unknown setting '", kv.first.cast<std::string>(),
                                              "' (the names of qkv train's flags, with _ or -)"));
        if (v.is_none()) continue;
        // True is an int to Python: a number setting must not take it (max_steps=True ran 1 step).
        static const std::set<std::string> switches = {"bidirectional", "loss_on_padding", "pe_quirk", "shard_optimizer",
                                                        "shared_vocab", "strict", "tie_weights", "trim"};
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
        else if (k == "batch_tokens") o.batch_tokens = v.cast<int64_t>();
        else if (k == "lr") o.lr = v.cast<double>();
        else if (k == "label_smoothing") o.label_smoothing = v.cast<double>();
        else if (k == "clip" || k == "clip_norm") o.clip_norm = v.cast<double>();
        else if (k == "val_every" || k == "val_every_s") o.val_every_s = duration_seconds(v, k);
        else if (k == "seed") o.seed = v.cast<uint64_t>();
        else if (k == "loss_on_padding") o.loss_on_padding = v.cast<bool>();
        else if (k == "schedule") o.schedule = train::parse_schedule(v.cast<std::string>());
        else if (k == "shard_optimizer") o.shard_optimizer = v.cast<bool>();
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

void bind_train(pyb::module_& m) {
    m.def("_train", &train_py, arg("out_dir"), arg("preset"), arg("model"), arg("resume"), arg("overwrite"),
          arg("progress"), arg("quiet"), arg("on_step"), arg("on_validation"), arg("settings"));
}

}  // namespace qkv::py
