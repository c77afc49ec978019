# qkv.train: the settings of `qkv train`, callbacks, Ctrl-C -> KeyboardInterrupt with a checkpoint
# that resumes, errors.
import json
import re
import os
import signal

import numpy as np
import pytest

import qkv
from conftest import SMALL_KW


def test_train_callbacks_and_model_folder(tmp_path, fra_txt):
    steps, vals = [], []
    r = qkv.train(tmp_path / "m", {"data": str(fra_txt), "max-steps": 6, "log_every": 2}, preset="demo",
                  progress=False, quiet=True, on_step=steps.append, on_validation=vals.append, **SMALL_KW)
    assert r["steps"] == 6 and r["trained"]
    assert [s["step"] for s in steps] == [2, 4, 6]
    assert all(s["loss"] > 0 and s["tokens_per_s"] > 0 for s in steps)
    assert vals and all("val_loss" in v for v in vals)
    for f in ("model.safetensors", "checkpoint.safetensors", "config.json", "metrics.jsonl"):
        assert (tmp_path / "m" / f).stat().st_size > 0
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["model"]["num_hiddens"] == 16
    assert qkv.Translator(str(tmp_path / "m")).translate_batch(["go ."])[0].translation is not None


def test_ctrl_c_stops_with_checkpoint_then_resume(tmp_path, fra_txt):
    out = tmp_path / "m"
    seen = []

    def on_step(s):
        seen.append(s["step"])
        if s["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, delivered to the process

    with pytest.raises(KeyboardInterrupt, match="checkpoint") as e:
        qkv.train(out, data=str(fra_txt), max_steps=500, log_every=1, quiet=True, on_step=on_step, **SMALL_KW)
    stopped = int(re.search(r"stopped at step (\d+)", str(e.value)).group(1))
    # The run stops at the first step boundary after the main thread sees the signal (it looks
    # every 20 ms), long before its 500 steps.
    assert 2 <= stopped < 500 and seen[-1] == stopped
    assert (out / "checkpoint.safetensors").stat().st_size > 0
    r = qkv.train(out, data=str(fra_txt), max_steps=stopped + 3, log_every=1, resume=True, quiet=True,
                  on_step=lambda s: seen.append(s["step"]))
    assert r["steps"] == stopped + 3 and r["trained"], r
    assert seen[-3:] == [stopped + 1, stopped + 2, stopped + 3]  # continues where it stopped


def test_callback_exception_is_raised_after_checkpoint(tmp_path, fra_txt):
    def boom(s):
        raise ValueError("from the callback")

    with pytest.raises(ValueError, match="from the callback"):
        qkv.train(tmp_path / "m", data=str(fra_txt), max_steps=20, log_every=1, quiet=True, on_step=boom, **SMALL_KW)
    assert (tmp_path / "m" / "checkpoint.safetensors").exists()


def test_bad_settings(tmp_path, fra_txt):
    with pytest.raises(TypeError, match="unknown setting 'num_hidens'"):
        qkv.train(tmp_path / "m", data=str(fra_txt), num_hidens=8)
    with pytest.raises(TypeError, match="unknown setting 'num_hidens'"):  # None does not hide a typo
        qkv.train(tmp_path / "m", data=str(fra_txt), num_hidens=None)
    with pytest.raises(qkv.Error, match="precision: expected fp32 or bf16, got 'fp16'"):
        qkv.train(tmp_path / "m", data=str(fra_txt), precision="fp16", quiet=True)
    # a value of the wrong type names the setting (not pybind11's C++ type names)
    for kw in ({"precision": 16}, {"lr": "abc"}, {"max_steps": "x"}):
        name = next(iter(kw))
        with pytest.raises(TypeError, match=f"setting '{name}' has the wrong type"):
            qkv.train(tmp_path / "m", data=str(fra_txt), quiet=True, **kw)
    with pytest.raises(ValueError, match="trim must be 'on', 'off' or a bool, got 'yes'"):
        qkv.train(tmp_path / "m", data=str(fra_txt), trim="yes", quiet=True)
    # the flags' ranges, named by keyword: 0 is no "no limit" for max_steps, as --max-steps 0 is refused
    for kw, msg in [({"max_steps": 0}, r"max_steps: 0 is out of range: expected an integer from 1 to"),
                    ({"warmup": 0, "schedule": "warmup_inv_sqrt"}, r"warmup: 0 is out of range"),
                    ({"dropout": 0.995}, r"dropout: 0.995 is out of range: expected a number from 0 to 0.99"),
                    ({"lr": 0}, r"lr: 0 is out of range: expected a number > 0"),
                    ({"seed": -1}, r"seed: -1 is out of range: expected an integer from 0 to 2\*\*64 - 1"),
                    ({"seed": 2**70}, r"seed: 1180591620717411303424 is out of range")]:
        with pytest.raises(ValueError, match=msg):
            qkv.train(tmp_path / "m", data=str(fra_txt), quiet=True, **kw)
    assert not (tmp_path / "m").exists()


def test_the_output_folder_is_given_once(tmp_path, fra_txt, monkeypatch):
    with pytest.raises(TypeError, match="given more than once"):
        qkv.train(tmp_path / "a", data=str(fra_txt), out=str(tmp_path / "b"), max_steps=1, quiet=True, **SMALL_KW)
    with pytest.raises(TypeError, match="given more than once"):
        qkv.train(tmp_path / "a", {"out_dir": str(tmp_path / "b")}, data=str(fra_txt), max_steps=1, quiet=True)
    with pytest.raises(TypeError, match="out_dir must be a str or os.PathLike"):
        qkv.train(3, data=str(fra_txt), max_steps=1, quiet=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # None (the default) is runs/qkv, as for qkv train without --out; not a folder named "None"
    monkeypatch.chdir(tmp_path)
    qkv.train(None, data=str(fra_txt), max_steps=1, quiet=True, **SMALL_KW)
    assert (tmp_path / "runs" / "qkv" / "model.safetensors").exists() and not (tmp_path / "None").exists()


def test_precision_bf16_is_recorded(tmp_path, fra_txt):
    qkv.train(tmp_path / "b", data=str(fra_txt), max_steps=3, quiet=True, precision="bf16", **SMALL_KW)
    assert json.loads((tmp_path / "b" / "config.json").read_text())["train"]["precision"] == "bf16"
    with pytest.raises(qkv.Error, match="num_heads|num-heads|divide"):
        qkv.train(tmp_path / "m", data=str(fra_txt), num_hiddens=10, num_heads=4, quiet=True)


def test_own_corpus_settings_and_out_errors(tmp_path, fra_txt):
    # qkv train's corpus settings by name: a TSV with its languages, a file pair, kept checkpoints
    tsv = tmp_path / "fr-en.tsv"
    lines = fra_txt.read_text(encoding="utf-8").splitlines()
    tsv.write_text("".join("%s\t%s\n" % tuple(reversed(l.split("\t"))) for l in lines), encoding="utf-8")
    qkv.train(tmp_path / "m", data=str(tsv), src_lang="fr", tgt_lang="en", subword="none", keep_checkpoints=1,
              max_steps=2, quiet=True, **SMALL_KW)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (cfg["data"]["src_lang"], cfg["data"]["tgt_lang"], cfg["train"]["keep_checkpoints"]) == ("fr", "en", 1)
    (tmp_path / "a.fr").write_text("".join(l.split("\t")[1] + "\n" for l in lines), encoding="utf-8")
    (tmp_path / "a.en").write_text("".join(l.split("\t")[0] + "\n" for l in lines), encoding="utf-8")
    qkv.train(tmp_path / "p", src_file=str(tmp_path / "a.fr"), tgt_file=str(tmp_path / "a.en"), subword="none",
              max_steps=1, quiet=True, **SMALL_KW)
    assert json.loads((tmp_path / "p" / "config.json").read_text())["data"]["src_file"].endswith("a.fr")
    with pytest.raises(qkv.Error, match="expected a language code"):
        qkv.train(tmp_path / "bad", data=str(tsv), src_lang="french!", max_steps=1, quiet=True, **SMALL_KW)
    # out: an existing file, empty, or a folder that cannot be made (was: a C++ filesystem error)
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="is an existing file, not a folder"):
        qkv.train(f, data=str(fra_txt), max_steps=1, quiet=True, **SMALL_KW)
    assert f.read_text() == "x"
    with pytest.raises(ValueError, match="out is empty"):
        qkv.train("", data=str(fra_txt), max_steps=1, quiet=True, **SMALL_KW)
    with pytest.raises(OSError):
        qkv.train(str(f / "sub"), data=str(fra_txt), max_steps=1, quiet=True, **SMALL_KW)


def test_switches_and_callbacks_have_their_types(tmp_path, fra_txt):
    # resume="no" was true, on_step=5 was accepted, max_steps=True ran one step
    for kw, says in (({"resume": "no"}, "resume must be True or False"), ({"quiet": 1}, "quiet must be True or False"),
                     ({"on_step": 5}, "on_step must be a callable or None"),
                     ({"max_steps": True}, "setting 'max_steps' has the wrong type \\(bool\\)")):
        with pytest.raises(TypeError, match=says):
            qkv.train(tmp_path / "m", data=str(fra_txt), **{"max_steps": 1, "quiet": True, **kw})
    assert not (tmp_path / "m").exists()


def test_durations_as_the_flags_write_them(tmp_path, fra_txt):
    # time_budget / val_every take "20m", "90s", "none" as --time-budget does, or seconds.
    for i, (budget, seconds) in enumerate((("20m", 1200.0), ("1.5h", 5400.0), ("none", 0.0), (90, 90.0))):
        qkv.train(tmp_path / f"d{i}", data=str(fra_txt), max_steps=1, quiet=True, time_budget=budget,
                  val_every="off", **SMALL_KW)
        cfg = json.loads((tmp_path / f"d{i}" / "config.json").read_text())
        assert cfg["train"]["time_budget_s"] == seconds
        assert cfg["train"]["val_every_s"] == 0.0
    with pytest.raises(ValueError, match=r"time_budget must be seconds .* or 'none'; got '20 minutes'"):
        qkv.train(tmp_path / "bad", data=str(fra_txt), max_steps=1, quiet=True, time_budget="20 minutes", **SMALL_KW)
    assert not (tmp_path / "bad").exists()
    # The CLI's rules, named by the Python key: nothing under 1 s (a validation after every step),
    # no "0" string (0 is "no limit"), no inf, nan or negative (inf was written to config.json as null).
    for key, value, error, says in (
            ("time_budget", 0.5, ValueError, r"^train: time_budget under 1 s is not allowed, got 0.5 s"),
            ("val_every", 1e-9, ValueError, r"^train: val_every under 1 s is not allowed"),
            ("val_every", "0", ValueError, r"val_every must be .*got '0' \(a duration of 0 is not allowed"),
            ("time_budget", "0.5s", ValueError, r"time_budget must be .*a duration under 1 s is not allowed"),
            ("time_budget", float("inf"), ValueError, r"^train: time_budget must be a number of seconds >= 0"),
            ("time_budget", float("nan"), ValueError, r"^train: time_budget must be a number of seconds >= 0"),
            ("time_budget", -5, ValueError, r"^train: time_budget must be a number of seconds >= 0 \(0: no limit\), "
                                            r"got -5"),
            ("time_budget", "0x10", ValueError, r"cannot read duration '0x10'"),
            ("val_every", [5], TypeError, r"^train: val_every must be seconds .*; got list"),
            ("val_every", np.array([5]), TypeError, r"^train: val_every must be seconds .*; got ndarray"),
            ("val_every", np.bool_(True), TypeError, r"^train: val_every must be seconds .*; got bool_"),
            ("time_budget", 1e20, ValueError, r"^train: time_budget over 1e\+08 s \(3 years\) is not allowed"),
            ("time_budget", "1e20s", ValueError, r"a duration over 1e\+08 s \(3 years\) is not allowed")):
        with pytest.raises(error, match=says):
            qkv.train(tmp_path / "bad", data=str(fra_txt), max_steps=1, quiet=True, **{key: value}, **SMALL_KW)
        assert not (tmp_path / "bad").exists()
    # A number 0 is no limit, as documented; numpy numbers are numbers.
    qkv.train(tmp_path / "z", data=str(fra_txt), max_steps=1, quiet=True, time_budget=-0.0, val_every=np.int64(60),
              **SMALL_KW)
    cfg = json.loads((tmp_path / "z" / "config.json").read_text())
    assert cfg["train"]["time_budget_s"] == 0.0 and cfg["train"]["val_every_s"] == 60.0
    assert '"time_budget_s": -0.0' not in (tmp_path / "z" / "config.json").read_text()


def test_preset_model_and_config_types(tmp_path, fra_txt):
    with pytest.raises(TypeError, match=r"^train: model must be a name \(str\).*settings are given flat"):
        qkv.train(tmp_path / "m", {"model": {"num_heads": 3}}, data=str(fra_txt))
    with pytest.raises(TypeError, match=r"^train: preset must be a name"):
        qkv.train(tmp_path / "m", preset=3, data=str(fra_txt))
    with pytest.raises(TypeError, match=r"^train: config must be a dict"):
        qkv.train(tmp_path / "m", [("max_steps", 1)], data=str(fra_txt))
    assert not (tmp_path / "m").exists()


# The run-configuration table (include/qkv/runtime/run_config_fields.h): every row with a flag is a
# flag of `qkv train` that enforces its range at both ends, and every keyword of a row is one
# qkv.train accepts, so a row added without its uses fails here.
def test_config_table_rows_are_flags_and_keywords(tmp_path):
    import subprocess
    from conftest import qkv_bin
    rows = qkv._qkv._config_fields()
    assert len(rows) > 40
    helptext = subprocess.run([qkv_bin(), "train", "--help"], capture_output=True, text=True).stdout
    for row in rows:
        for name in filter(None, row["flag"].split(",")):
            name = name.lstrip("!")
            assert re.search(rf"(^|[ ,]){re.escape(name)}([ ,]|$)", helptext, re.M), f"{row['key']}: {name} not in qkv train --help"
    # every keyword is known (None: "not set"); the unknown preset is refused only after them
    keywords = {k: None for row in rows for k in row["python"].split()}
    assert keywords
    with pytest.raises(qkv.Error, match="unknown preset 'nope'"):
        qkv.train(tmp_path / "m", preset="nope", quiet=True, **keywords)
    with pytest.raises(TypeError, match="unknown setting 'no_such_keyword'"):
        qkv.train(tmp_path / "m", preset="nope", quiet=True, no_such_keyword=1)
    # the flags' ranges, both ends: a usage error naming the flag
    for row in rows:
        flag = row["flag"].split(",")[0]
        if not flag or row["flag_kind"] != "value" or row["type"] not in ("integer", "real"):
            continue
        for bound, outside in ((row["lo"], -1), (row["hi"], 1)):
            if bound in (float("inf"), float("-inf")):
                continue
            if row["type"] == "integer":
                bad = str(int(bound) + outside)
            elif (outside < 0 and row["lo_open"]) or (outside > 0 and row["hi_open"]):
                bad = repr(bound)
            else:
                bad = repr(bound + outside * max(abs(bound), 1) * 1e-6)
            r = subprocess.run([qkv_bin(), "train", flag, bad, "--out", str(tmp_path / "never")],
                               capture_output=True, text=True)
            assert r.returncode == 2 and flag in r.stderr and "expected" in r.stderr, (flag, bad, r.stderr)
            assert not (tmp_path / "never").exists()


# The language model is one more model kind of the same call (model="lm"): its preset, its own
# settings (num_kv_heads, positions), a folder qkv generate reads, resume; a translation setting is
# refused naming it.
def test_language_model(tmp_path):
    import subprocess
    from conftest import qkv_bin
    text = tmp_path / "text.txt"
    text.write_text("The Time Traveller (for so it will be convenient to speak of him) was expounding.\n" * 60)
    steps = []
    r = qkv.train(tmp_path / "lm", model="lm", preset="lm-tiny", data=str(text), max_steps=4, num_kv_heads=1,
                  positions="sinusoidal", log_every=2, on_step=steps.append, quiet=True)
    assert r["trained"] and r["steps"] == 4
    assert [s["step"] for s in steps] == [2, 4]
    cfg = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert cfg["model_kind"] == "lm" and cfg["model"]["num_kv_heads"] == 1
    assert cfg["model"]["positions"] == "sinusoidal" and "preset" not in cfg
    g = subprocess.run([qkv_bin(), "generate", "--model", str(tmp_path / "lm"), "--prompt", "the",
                        "--max-new-tokens", "5"], capture_output=True, text=True)
    assert g.returncode == 0 and g.stdout.startswith("the"), g.stderr
    r = qkv.train(tmp_path / "lm", model="lm", resume=True, max_steps=6, quiet=True)
    assert r["trained"] and r["steps"] == 6
    with pytest.raises(qkv.Error, match="--subword does not apply to --model lm"):
        qkv.train(tmp_path / "lm2", model="lm", data=str(text), subword="bpe", quiet=True)
    assert not (tmp_path / "lm2").exists()
