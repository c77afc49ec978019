# qkv.d2l (the notebooks' helpers), qkv.attention_trace and qkv.allocator_stats.
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

import qkv
from qkv import d2l

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def read_csv(path):
    return np.array([[float(x) for x in line.split(",")] for line in path.read_text().splitlines()
                     if line and not line.startswith("#") and line[0].isdigit()])


# ---- the seed's Nadaraya–Watson data ----

def test_nw_seed_is_the_fixture():
    d = d2l.nw_seed()
    data, hist = read_csv(FIX / "nw_seed_data.csv"), read_csv(FIX / "nw_seed_history.csv")
    assert d["x_train"].dtype == np.float32 and d["x_train"].shape == (150,)
    np.testing.assert_array_equal(d["x_train"], data[:, 0].astype(np.float32))
    np.testing.assert_array_equal(d["y_train"], data[:, 1].astype(np.float32))
    np.testing.assert_array_equal(d["loss"], hist[:, 1])
    np.testing.assert_array_equal(d["w"], hist[:, 2])
    assert d["x_test"].shape == (50,) and abs(d["x_test"][-1] - 4.9) < 1e-6


def test_nw_fit_reproduces_the_seed_losses():
    d = d2l.nw_seed()
    hist = qkv.NWKernelRegression(1.0).fit(d["x_train"], d["y_train"], epochs=20, lr=0.5)
    np.testing.assert_allclose([h[1] for h in hist], d["loss"], rtol=1e-4)
    np.testing.assert_allclose([h[2] for h in hist], d["w"], rtol=1e-4)


# ---- plotting ----

def test_show_heatmaps_grid_and_labels():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    w = np.random.default_rng(0).random((2, 3, 4, 5))
    fig = d2l.show_heatmaps(w, "Keys", "Queries", titles=["a", "b", "c"], xticklabels=list("vwxyz"),
                            yticklabels=list("abcd"))
    assert isinstance(fig, Figure)
    assert fig._repr_png_().startswith(b"\x89PNG")  # what Jupyter shows
    assert len(fig.axes) == 2 * 3 + 1  # the panels and one colour bar
    ax = fig.axes[0]
    assert ax.get_title() == "a" and ax.get_ylabel() == "Queries"
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abcd")
    np.testing.assert_array_equal(ax.images[0].get_array(), w[0, 0])
    assert fig.axes[3].get_xlabel() == "Keys"  # the last row's labels
    assert [t.get_text() for t in fig.axes[3].get_xticklabels()] == list("vwxyz")
    assert len(d2l.show_heatmaps(np.eye(3), "k", "q").axes) == 2  # a single matrix
    # each panel over its own range (D2L), or one scale with vmin / vmax
    assert fig.axes[1].images[0].get_clim() == (w[0, 1].min(), w[0, 1].max())
    one = d2l.show_heatmaps(w, "k", "q", vmin=0, vmax=1)
    assert all(ax.images[0].get_clim() == (0, 1) for ax in one.axes[:6])
    assert len(d2l.show_heatmaps(qkv.ones(4, 2, 2), "k", "q").axes) == 5  # (n, Q, K), a Tensor


def test_show_heatmaps_errors():
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="shape"):
        d2l.show_heatmaps(np.ones(3), "k", "q")
    with pytest.raises(ValueError, match="xticklabels has 2 labels for 3"):
        d2l.show_heatmaps(np.ones((2, 3)), "k", "q", xticklabels=["a", "b"])
    with pytest.raises(ValueError, match="titles"):
        d2l.show_heatmaps(np.ones((1, 2, 2, 2)), "k", "q", titles=["one"])


def test_plot_curves():
    pytest.importorskip("matplotlib")
    x = np.arange(5)
    fig = d2l.plot(x, [x ** 2, x ** 3], "x", "y", legend=["sq", "cube"], yscale="log")
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_yscale() == "log" and ax.get_xlabel() == "x"
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), x ** 3)
    assert len(d2l.plot([1.0, 2.0, 4.0]).axes[0].lines) == 1  # Y alone, against its index
    with pytest.raises(ValueError, match="3 x values and 2 y values"):
        d2l.plot([1, 2, 3], [1, 2])


# ---- data ----

def test_preprocess_and_tokenize_nmt():
    text = "Go.\tVa !\nRun!\tCours\u202f!\nI'm home.\tJe suis chez moi.\n"
    pre = d2l.preprocess_nmt(text)
    assert pre == "go .\tva !\nrun !\tcours !\ni'm home .\tje suis chez moi .\n"
    src, tgt = d2l.tokenize_nmt(pre)
    assert src == [["go", "."], ["run", "!"], ["i'm", "home", "."]] and tgt[2] == ["je", "suis", "chez", "moi", "."]
    assert d2l.tokenize_nmt(pre, num_examples=1) == ([["go", "."]], [["va", "!"]])


def test_read_data_nmt_by_argument_env_and_folder(tmp_path, monkeypatch):
    z = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("fra-eng/fra.txt", "Go.\tVa !\n")
    assert d2l.read_data_nmt(z) == "Go.\tVa !\n"
    assert d2l.read_data_nmt(tmp_path) == "Go.\tVa !\n"  # a folder holding fra-eng.zip
    monkeypatch.setenv("QKV_DATA", str(z))
    assert d2l.read_data_nmt() == "Go.\tVa !\n"
    txt = tmp_path / "fra.txt"
    txt.write_text("Hi.\tSalut !\n", encoding="utf-8")
    assert d2l.read_data_nmt(txt) == "Hi.\tSalut !\n"
    monkeypatch.setenv("QKV_DATA", str(tmp_path / "missing.zip"))
    with pytest.raises(FileNotFoundError, match=r"missing.zip \(from \$QKV_DATA\)"):
        d2l.read_data_nmt()
    bad = tmp_path / "other.zip"
    with zipfile.ZipFile(bad, "w") as f:
        f.writestr("x.txt", "")
    with pytest.raises(ValueError, match="no fra-eng/fra.txt"):
        d2l.read_data_nmt(bad)


def test_default_data_folder_from_a_notebook_folder(tmp_path, monkeypatch):
    # A notebook runs in notebooks/: ../../shared/data from there is the CLI's ../shared/data.
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "timemachine.txt").write_text("The Time Machine, by H. G. Wells\n")
    nb = tmp_path / "repo" / "notebooks"
    nb.mkdir(parents=True)
    monkeypatch.chdir(nb)
    monkeypatch.delenv("QKV_LM_DATA", raising=False)
    text = d2l.read_time_machine()
    assert d2l.preprocess_time_machine(text) == "the time machine by h g wells "
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="timemachine.txt not found"):
        d2l.read_time_machine()


def test_find_demo_model(tmp_path, monkeypatch):
    monkeypatch.delenv("QKV_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert d2l.find_demo_model() is None
    m = tmp_path / "out" / "translation"
    m.mkdir(parents=True)
    (m / "config.json").write_text("{}")
    assert d2l.find_demo_model() is None  # no checkpoint yet
    (m / "model.safetensors").write_bytes(b"")
    assert d2l.find_demo_model() == Path("out/translation")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert d2l.find_demo_model() == Path("../out/translation")
    r = tmp_path / "runs" / "qkv"  # make demo's folder is preferred to the fallback out/translation
    r.mkdir(parents=True)
    (r / "config.json").write_text("{}")
    (r / "model.safetensors").write_bytes(b"")
    assert d2l.find_demo_model() == Path("../runs/qkv")
    monkeypatch.setenv("QKV_MODEL", "none")
    assert d2l.find_demo_model() is None
    monkeypatch.setenv("QKV_MODEL", str(m))
    assert d2l.find_demo_model() == m


def test_write_tiny_corpus(tmp_path):
    p = d2l.write_tiny_corpus(tmp_path / "sub" / "tiny.txt")
    lines = p.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 60 and lines[0] == "Go.\tVa !"


# ---- BLEU ----

def test_bleu_as_d2l():
    assert d2l.bleu("il est calme .", "il est calme .", k=2) == 1.0
    # unigrams 3/4, bigrams 1/3 ("il est"), equal lengths: no brevity penalty
    assert d2l.bleu("il est bon .", "il est calme .", k=2) == pytest.approx(0.75 ** 0.5 * (1 / 3) ** 0.25)
    # one word for a reference of 2: brevity penalty exp(1 - 2/1), unigram 1/1
    assert d2l.bleu("va", "va !", k=2) == pytest.approx(np.exp(-1.0))
    assert d2l.bleu("x y", "va !", k=2) == 0.0


# ---- progress ----

def test_progress_text_mode_and_train_callback():
    out = io.StringIO()
    p = d2l.Progress(total=10, desc="train", file=out, html_output=False)
    p({"step": 5, "loss": 2.5, "tokens_per_s": 100.0})
    p({"step": 10, "loss": 1.25})
    p.close()
    assert p.history == [(5, 2.5), (10, 1.25)]
    text = out.getvalue()
    assert "\rtrain 5/10 [==========          ] loss=2.5" in text and "10/10" in text and text.endswith("\n")
    assert '<progress value="10" max="10"' in p._html()
    seen = list(d2l.Progress(range(3), file=io.StringIO(), html_output=False))
    assert seen == [0, 1, 2]
    with pytest.raises(ValueError, match="total"):
        d2l.Progress(total=-1)


# ---- attention weights and allocator counters from the library ----

def test_attention_trace_of_a_transformer(model_dir):
    t = qkv.attention_trace(str(model_dir), "i'm home .")
    src, out, dec_in = t["source_tokens"], t["output_tokens"], t["decoder_inputs"]
    assert src[-1] == "<eos>" and out[-1] == "<eos>" and dec_in[0] == "<bos>" and len(dec_in) == len(out)
    L, H = t["encoder"].shape[:2]
    assert (L, H) == (1, 2)  # conftest's SMALL model
    assert t["encoder"].shape == (L, H, len(src), len(src)) and t["encoder"].dtype == np.float32
    assert t["decoder_self"].shape == (L, H, len(out), len(out))
    assert t["cross"].shape == (L, H, len(out), len(src))
    for k in ("encoder", "decoder_self", "cross"):
        np.testing.assert_allclose(t[k].sum(-1), 1, atol=1e-5)
    assert np.all(np.triu(t["decoder_self"], k=1) == 0)  # masked: step t sees inputs 0..t
    # The same greedy translation, and the same averaged cross-attention, as Translator's.
    r = qkv.Translator(str(model_dir)).translate_batch(["i'm home ."], beam_size=1, return_attention=True)[0]
    assert t["translation"] == r.translation
    np.testing.assert_allclose(t["cross"][-1].mean(0), r.attention, atol=1e-6)


def test_attention_trace_errors(model_dir, tmp_path):
    with pytest.raises(ValueError, match="empty"):
        qkv.attention_trace(str(model_dir), "   ")
    with pytest.raises(qkv.Error):
        qkv.attention_trace(str(tmp_path), "go .")
    assert qkv.attention_trace(Path(model_dir), "go .")["source_tokens"][-1] == "<eos>"  # a PathLike


def test_allocator_stats_count_tensor_memory():
    qkv.reset_allocator_stats()
    before = qkv.allocator_stats()
    t = qkv.zeros(1 << 20)  # 4 MiB of float32
    after = qkv.allocator_stats()
    assert after["bytes_in_use"] - before["bytes_in_use"] >= 4 << 20
    assert after["peak_bytes"] >= after["bytes_in_use"]
    del t
    assert qkv.allocator_stats()["bytes_in_use"] < after["bytes_in_use"]
