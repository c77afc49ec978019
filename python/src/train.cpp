// qkv.train (train::run, the code path of `qkv train`), with the GIL released while it trains.
#include <pybind11/stl/filesystem.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <csignal>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "bind.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/run_config_fields.h"
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

/// One keyword's value in its row's type (runtime::config_fields(): the keywords are the rows'
/// `python` names, qkv train's flags with _ or -). A number setting refuses a bool (True is an int
/// to Python: max_steps=True ran 1 step); durations as duration_seconds; trim takes 'on'/'off' too;
/// a choice's name is checked, naming the keyword.
runtime::FieldValue keyword_value(const runtime::ConfigField& f, const std::string& k, pyb::handle v) {
    using runtime::FieldType;
    // An int beyond the C++ type (seed=-1, 2**70) is out of range, not of the wrong type.
    auto out_of_range = [&] {
        const std::string expected = f.type == FieldType::unsigned_integer
                                         ? std::string("an integer from 0 to 2**64 - 1")
                                         : runtime::field_range_text(f.type, f.flag_range.value_or(f.range));
        return pyb::value_error(detail::str("train: ", k, ": ", std::string(pyb::str(v)), " is out of range: expected ",
                                            expected));
    };
    const bool py_int = pyb::isinstance<pyb::int_>(v);
    switch (f.type) {
        case FieldType::integer:
            if (py_int && (v < pyb::int_(INT64_MIN) || v > pyb::int_(INT64_MAX))) throw out_of_range();
            return v.cast<int64_t>();
        case FieldType::unsigned_integer:
            if (py_int && (v < pyb::int_(0) || v > pyb::int_(UINT64_MAX))) throw out_of_range();
            return v.cast<uint64_t>();
        case FieldType::real: return v.cast<double>();
        case FieldType::duration: return duration_seconds(v, k);
        case FieldType::text: return v.cast<std::string>();
        case FieldType::choice: {
            const std::string name = v.cast<std::string>();
            train::RunConfig scratch;
            f.choice->set(scratch, name, k);  // an unknown name: its message, naming the keyword
            return name;
        }
        case FieldType::boolean:
            if (f.flag_kind == runtime::FlagKind::on_off && pyb::isinstance<pyb::str>(v)) {
                const auto t = v.cast<std::string>();
                if (t != "on" && t != "off")
                    throw pyb::value_error(detail::str("train: ", k, " must be 'on', 'off' or a bool, got '", t, "'"));
                return t == "on";
            }
            return v.cast<bool>();
    }
    throw pyb::cast_error();
}

train::RunOverrides overrides_from(const pyb::dict& kw) {
    train::RunOverrides o;
    for (auto kv : kw) {
        const std::string given = kv.first.cast<std::string>();
        std::string k = given;
        for (auto& ch : k)
            if (ch == '-') ch = '_';
        const runtime::ConfigField* f = runtime::config_field_by_python(k);
        // None means "not set", for known names only (a misspelt name is an error either way).
        if (!f)
            throw pyb::type_error(detail::str("train: unknown setting '", given,
                                              "' (the names of qkv train's flags, with _ or -)"));
        if (kv.second.is_none()) continue;
        if (pyb::isinstance<pyb::bool_>(kv.second) && f->type != runtime::FieldType::boolean)
            throw pyb::type_error(detail::str("train: setting '", given, "' has the wrong type (bool)"));
        try {
            const runtime::FieldValue v = keyword_value(*f, k, kv.second);
            // A switch given False is not given (as qkv train without the flag: the preset's value).
            if (f->flag_kind == runtime::FlagKind::switch_on && !std::get<bool>(v)) continue;
            // The flag's range, as `qkv train` checks it (its 0 has no flag form: max_steps=0 would
            // mean "no limit"); durations keep their own rules (0: no limit, documented).
            if (f->type != runtime::FieldType::duration && !runtime::field_in_range(v, f->flag_range.value_or(f->range)))
                throw pyb::value_error(detail::str("train: ", given, ": ", runtime::field_value_text(v),
                                                   " is out of range: expected ",
                                                   runtime::field_range_text(f->type, f->flag_range.value_or(f->range))));
            o.set(f->key, v);
        } catch (const pyb::cast_error&) {  // pybind11's message names C++ types, not the setting
            throw pyb::type_error(detail::str("train: setting '", given, "' has the wrong type (",
                                              pyb::type::of(kv.second).attr("__name__").cast<std::string>(), ")"));
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
        train::check_architecture_overrides(o, train::load_model_dir_config(out_dir, /*language_model_ok=*/true).architecture,
                                            out_dir);
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

/// The run-configuration table (runtime::config_fields()) for the tests that check its uses: per row
/// key, flags (CLI11 names), flag kind, keywords, type and the flag's range.
pyb::list config_fields_py() {
    static const char* types[] = {"integer", "unsigned_integer", "real", "duration", "boolean", "text", "choice"};
    static const char* kinds[] = {"value", "switch_on", "negatable", "on_off"};
    pyb::list rows;
    for (const auto& f : runtime::config_fields()) {
        const auto r = f.flag_range.value_or(f.range);
        pyb::dict d;
        d["key"] = f.key, d["flag"] = f.flag, d["flag_kind"] = kinds[int(f.flag_kind)];
        d["python"] = f.python, d["type"] = types[int(f.type)];
        d["lo"] = r.lo, d["hi"] = r.hi, d["lo_open"] = r.lo_open, d["hi_open"] = r.hi_open;
        d["choices"] = f.choice ? f.choice->names : std::vector<std::string>{};
        rows.append(d);
    }
    return rows;
}

void bind_train(pyb::module_& m) {
    m.def("_config_fields", &config_fields_py);
    m.def("_train", &train_py, arg("out_dir"), arg("preset"), arg("model"), arg("resume"), arg("overwrite"),
          arg("progress"), arg("quiet"), arg("on_step"), arg("on_validation"), arg("settings"));
}

}  // namespace qkv::py
