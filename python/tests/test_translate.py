# qkv.Translator against `qkv translate` on the same tiny model (conftest.model_dir), its extras
# (n-best, scores, attention, score_batch), errors, and the GIL released while it decodes
# (checked by a handshake, not by timing).
import re
import subprocess
import warnings
import threading
import time

import numpy as np
import pytest

import qkv
from conftest import qkv_bin

SENTENCES = ["go .", "i lost .", "he's calm .", "i'm home .", "we won .", "thank you .", "i won .",
             "we lost calm .", "", "go home ."]


def cli_translate(model_dir, sentences, *flags):
    r = subprocess.run([qkv_bin(), "translate", "--model", str(model_dir), *flags, "--file", "-"],
                       input="\n".join(sentences) + "\n", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


@pytest.mark.parametrize("flags,kwargs", [((), {}), (("--beam", "3"), dict(beam_size=3)),
                                          (("--beam", "2", "--length-penalty", "0", "--max-len", "4"),
                                           dict(beam_size=2, length_penalty=0.0, max_len=4))])
def test_translate_batch_equals_cli(model_dir, flags, kwargs):
    tr = qkv.Translator(model_dir)  # a pathlib.Path (os.PathLike) or a str
    got = [r.translation for r in tr.translate_batch(SENTENCES, **kwargs)]
    assert got == cli_translate(model_dir, SENTENCES, *flags)
    assert any(got)  # 30 steps of training give words, not only empty lines


@pytest.mark.parametrize("compute_type", ["bf16", "int8"])
def test_compute_type_equals_cli(model_dir, compute_type):
    tr = qkv.Translator(str(model_dir), compute_type=compute_type)
    assert tr.compute_type == compute_type
    got = [r.translation for r in tr.translate_batch(SENTENCES, beam_size=2)]
    assert got == cli_translate(model_dir, SENTENCES, "--beam", "2", "--compute-type", compute_type)
    scores = tr.score_batch(["i lost ."], ["j'ai perdu ."])
    assert np.isfinite(scores[0].score)
    with pytest.raises(ValueError, match="compute_type: expected 'fp32', 'bf16' or 'int8', got 'fp16'"):
        qkv.Translator(str(model_dir), compute_type="fp16")


def test_hypotheses_scores_attention(model_dir):
    tr = qkv.Translator(str(model_dir))
    res = tr.translate_batch(["i lost .", "we won ."], beam_size=3, num_hypotheses=2, return_scores=True,
                             return_attention=True)
    for r in res:
        assert len(r.hypotheses) == 2 and len(r.scores) == 2
        assert r.scores[0] >= r.scores[1]
        assert r.hypotheses[0] == r.translation  # beam search's best is the CLI's output
        a = r.attention
        assert a.dtype == np.float32 and a.ndim == 2 and a.shape[1] == 4  # 3 words + <eos>
        np.testing.assert_allclose(a.sum(1), 1, rtol=1e-5)  # each step's weights over the source
    for n in (3, 0, -1):
        with pytest.raises(ValueError, match=rf"num_hypotheses: {n} is not in \[1, beam_size\] = \[1, 2\]"):
            tr.translate_batch(["go ."], beam_size=2, num_hypotheses=n)


def test_score_batch(model_dir):
    tr = qkv.Translator(str(model_dir))
    best = tr.translate_batch(["i lost ."])[0].translation
    s = tr.score_batch(["i lost .", "i lost ."], [best, "merci !"])
    for r in s:
        assert r.tokens[-1] == "<eos>" and len(r.tokens) == len(r.log_probs)
        assert r.score == pytest.approx(sum(r.log_probs)) and r.score < 0
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        tr.score_batch(["a", "b"], ["c"])


def test_errors_carry_the_cli_message(tmp_path):
    missing = tmp_path / "nothing"
    with pytest.raises(qkv.Error) as e:
        qkv.Translator(str(missing))
    r = subprocess.run([qkv_bin(), "translate", "--model", str(missing), "go ."], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip() == "qkv: error: " + str(e.value)


def test_not_a_list_of_str_is_a_type_error_naming_it(model_dir):
    tr = qkv.Translator(str(model_dir))
    with pytest.raises(TypeError, match=r"sentences: expected a list of str, got a str \(one text: pass \[text\]\)"):
        tr.translate_batch("go .")
    with pytest.raises(TypeError, match=r"sentences\[1\]: expected str, got int"):
        tr.translate_batch(["go .", 3])
    with pytest.raises(TypeError, match=r"sentences\[0\]: expected str, got bytes"):
        tr.translate_batch([b"go ."])
    with pytest.raises(TypeError, match="sentences: expected a list of str, got NoneType"):
        tr.translate_batch(None)
    with pytest.raises(TypeError, match="sentences: expected a list of str, got bytearray"):
        tr.translate_batch(bytearray(b"go ."))
    with pytest.raises(ValueError, match=r"sentences\[1\]: not encodable as UTF-8"):
        tr.translate_batch(["go .", "\udcff bad"])
    with pytest.raises(TypeError, match=r"targets\[0\]: expected str, got NoneType"):
        tr.score_batch(["go ."], [None])
    # tuples are sequences too
    assert tr.translate_batch(("go .",))[0].translation == tr.translate_batch(["go ."])[0].translation


def test_nul_byte_names_the_sentence(model_dir):
    tr = qkv.Translator(str(model_dir))
    with pytest.raises(ValueError, match=r"sentences\[1\]: NUL byte"):
        tr.translate_batch(["go .", "a\0b"])


def most_active_calls_seen(tr, call, threads, want, bound_s=120):
    """Runs call() in a loop on `threads` threads while this thread reads tr.active_calls, until it
    has read `want` (or bound_s passed: only a failure's bound, never reached when the GIL is
    released). Returns the largest value read. tr.active_calls counts only inside the part of a call
    that runs without the GIL, so this thread (which reads it with the GIL) can see a call there
    only if that call released the GIL; how fast the machine is changes how long, not what."""
    seen, most, stop = threading.Event(), [0], time.monotonic() + bound_s
    errors = []

    def work():
        try:
            while not seen.is_set() and time.monotonic() < stop:
                call()
        except BaseException as e:  # noqa: B902 (reported below)
            errors.append(e)
            seen.set()

    ts = [threading.Thread(target=work) for _ in range(threads)]
    [t.start() for t in ts]
    while not seen.is_set() and any(t.is_alive() for t in ts):
        n = tr.active_calls
        most[0] = max(most[0], n)
        if n >= want:
            seen.set()
    seen.set()
    [t.join() for t in ts]
    assert not errors, errors
    return most[0]


def test_gil_released_while_translating(model_dir):
    """A Python thread runs while another thread is inside translate_batch (and score_batch)."""
    tr = qkv.Translator(str(model_dir))
    batch = [s for s in SENTENCES if s] * 20
    assert tr.active_calls == 0
    assert most_active_calls_seen(tr, lambda: tr.translate_batch(batch, beam_size=4), threads=1, want=1) == 1
    assert most_active_calls_seen(tr, lambda: tr.score_batch(batch, batch), threads=1, want=1) == 1
    assert tr.active_calls == 0


def test_two_threads_translate_at_the_same_time(model_dir):
    """Two threads are inside translate_batch at once, each on its own copy of the model: calls do
    not wait for one another (whether that is faster depends on the cores, and is bench work)."""
    tr = qkv.Translator(str(model_dir))
    batch = [s for s in SENTENCES if s] * 20
    want = tr.translate_batch(batch, beam_size=4)
    results = []
    def call():
        results.append([r.translation for r in tr.translate_batch(batch, beam_size=4)])
    assert most_active_calls_seen(tr, call, threads=2, want=2) == 2
    assert all(r == [w.translation for w in want] for r in results)


def test_decode_settings_out_of_range_are_value_errors(model_dir):
    tr = qkv.Translator(str(model_dir))
    # the CLI's ranges at both ends: a negative or zero beam or length is no "use the default"
    for kw, msg in [({"beam_size": 10**12}, r"beam_size: 1000000000000 is not in \[1, 100\]"),
                    ({"beam_size": 0}, r"beam_size: 0 is not in \[1, 100\]"),
                    ({"beam_size": -3}, r"beam_size: -3 is not in"),
                    ({"length_penalty": float("nan")}, "length_penalty: nan is not in"),
                    ({"length_penalty": 11.0}, "length_penalty: 11 is not in"),
                    ({"length_penalty": -0.5}, "length_penalty: -0.5 is not in"),
                    ({"max_len": 5000}, r"max_len: 5000 is not in \[1, 1000\]"),
                    ({"max_len": -1}, "max_len: -1 is not in"),
                    ({"batch_size": 0}, "batch_size: 0 is not in")]:
        with pytest.raises(ValueError, match=msg):
            tr.translate_batch(["go ."], **kw)
    assert tr.translate_batch(["go ."], beam_size=100)[0].translation is not None
    # True is an int in Python, not a beam size; strings and floats are not ints either
    for kw, msg in [({"beam_size": True}, "beam_size: expected an int or None, got bool"),
                    ({"max_len": 2.5}, "max_len: expected an int or None, got float"),
                    ({"num_hypotheses": False}, "num_hypotheses: expected an int, got bool"),
                    ({"batch_size": "8"}, "batch_size: expected an int, got str"),
                    ({"batch_size": None}, "batch_size: expected an int, got NoneType"),
                    ({"length_penalty": True}, "length_penalty: expected a number or None, got bool")]:
        with pytest.raises(TypeError, match=msg):
            tr.translate_batch(["go ."], **kw)
    assert tr.translate_batch(["go ."], length_penalty=1)[0].translation is not None  # an int is a number
    # numpy's integers are ints; an int beyond 64 bits is out of range, named
    assert tr.translate_batch(["go ."], max_len=np.int64(3))[0].translation is not None
    with pytest.raises(ValueError, match=r"max_len: \d+ is out of range"):
        tr.translate_batch(["go ."], max_len=2 ** 70)
    # None is config.json's setting, as leaving the flag out of `qkv translate` is
    assert ([r.translation for r in tr.translate_batch(SENTENCES, beam_size=None, max_len=None, length_penalty=None)]
            == cli_translate(model_dir, SENTENCES))


def test_a_source_longer_than_the_model_reads_warns_as_the_cli_does(model_dir):
    tr = qkv.Translator(str(model_dir))
    long = "i lost . i lost . i lost ."  # 9 tokens: over what the model reads (num_steps - 1 and <eos>)
    with pytest.warns(UserWarning) as caught:
        r = tr.translate_batch(["go .", long], return_attention=True)
    notes = [str(w.message) for w in caught]
    assert len(notes) == 1, notes
    assert notes[0].startswith("sentences[1] has 9 source tokens but the model reads "), notes
    assert notes[0].endswith(" are not read, nor is <eos>"), notes
    # the same text as `qkv translate` prints after "warning: sentence 1"
    cli = subprocess.run([qkv_bin(), "translate", "--model", str(model_dir), long], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert f"qkv translate: warning: sentence 1 {notes[0][len('sentences[1] '):]}" in cli.stderr, cli.stderr
    assert r[1].translation
    # plain translations (texts split into sentences) say it too
    with pytest.warns(UserWarning, match=r"^sentences\[1\] has 9 source tokens"):
        tr.translate_batch(["go .", long])
    # a source that fits says nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tr.translate_batch(["go ."])


def test_finished_says_when_max_len_cut_the_translation(model_dir):
    tr = qkv.Translator(str(model_dir))
    with pytest.warns(UserWarning) as caught:
        cut = tr.translate_batch(["i'm home .", "he's calm ."], max_len=1)
    assert [r.finished for r in cut] == [False, False]
    # one warning naming both, worded as `qkv translate` words it (runtime::length_limit_note)
    notes = [str(w.message) for w in caught]
    assert notes == ["2 sentences (sentences[0], sentences[1]) reached the length limit of 1 token (max_len) before "
                     "the end of the sentence: the translation is cut there; raise max_len"], notes
    cli = subprocess.run([qkv_bin(), "translate", "--model", str(model_dir), "--max-len", "1", "i'm home ."],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert ("qkv translate: warning: 1 sentence (1) reached the length limit of 1 token (--max-len) before the end "
            "of the sentence: the translation is cut there; raise --max-len") in cli.stderr, cli.stderr
    # at the most max_len allows, raising it is not advised
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        most = tr.translate_batch(["i'm home ."], max_len=1000)
    for w in caught:
        assert "raise max_len" not in str(w.message), str(w.message)
    assert most[0].finished == (not caught)
    assert [len(r.translation.split()) for r in cut] == [1, 1]
    # a translation finished when its best hypothesis emitted <eos>: the attention map then has a
    # row for it (steps = words + 1), which one cut at max_len lacks
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = tr.translate_batch(SENTENCES[:8], max_len=4, return_attention=True)
    for r in res:
        assert r.finished == (r.attention.shape[0] == len(r.translation.split()) + 1), r
    # the warning names exactly the unfinished ones
    cut = [i for i, r in enumerate(res) if not r.finished]
    said = [int(i) for w in caught for i in re.findall(r"sentences\[(\d+)\]", str(w.message))]
    assert said == cut[:5], (said, cut)
