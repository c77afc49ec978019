"""What D2L's ``d2l`` package gives the attention chapter's notebooks, for qkv (notebooks/).

Plotting (matplotlib, Debian's python3-matplotlib; imported on first use):
  ``show_heatmaps(matrices, xlabel, ylabel, titles)`` (D2L 11.1.4) and ``plot(X, Y, ...)`` (D2L 2.4)
  return a ``matplotlib.figure.Figure`` that is not registered with pyplot: a notebook shows it
  once when it is a cell's value, a script saves it with ``fig.savefig(path)``.
Data (found by argument, then an environment variable, then ``../shared/data`` from the working
folder or its parent, as the CLI looks from the repository root and a notebook runs in notebooks/):
  ``read_data_nmt`` / ``preprocess_nmt`` / ``tokenize_nmt`` (D2L 10.5, fra-eng, ``$QKV_DATA``),
  ``read_time_machine`` / ``preprocess_time_machine`` (D2L 9.2, ``$QKV_LM_DATA``),
  ``nw_seed()`` (the seed's Nadaraya–Watson data and PyTorch's per-epoch losses).
Translation: ``bleu`` (D2L 10.7.6), the book's four sentences (``BOOK_ENGLISH``, ``BOOK_FRENCH``),
``find_demo_model()`` (the folder ``make demo`` trains).
Progress: ``Progress`` draws a bar in Jupyter (an HTML ``<progress>`` updated in place) and a text
line elsewhere; it is a ``qkv.train(on_step=...)`` callback and wraps iterables.
"""
import collections
import html
import math
import os
import re
import sys
import zipfile
from pathlib import Path

import numpy as np

from . import _nw_seed

__all__ = ["BOOK_ENGLISH", "BOOK_FRENCH", "Progress", "bleu", "find_data", "find_demo_model", "full_run", "nw_seed",
           "plot", "preprocess_nmt", "preprocess_time_machine", "read_data_nmt", "read_time_machine", "show_heatmaps",
           "tokenize_nmt", "weights_numpy", "write_tiny_corpus"]

# D2L 11.4.4 / 11.7.6: the sentences the book translates, and their references.
BOOK_ENGLISH = ["go .", "i lost .", "he's calm .", "i'm home ."]
BOOK_FRENCH = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]


# ---- arrays ------------------------------------------------------------------------------------

def weights_numpy(w):
    """A qkv Tensor (detached first if it records a gradient), numpy array or nested list as a numpy array."""
    if hasattr(w, "detach") and hasattr(w, "numpy"):
        return np.array(w.detach().numpy())
    return np.asarray(w)


# ---- plotting ----------------------------------------------------------------------------------

_figure_class = None


def _figure(figsize):
    # Not pyplot's: no global state, so Jupyter shows it once, as a cell's value (or display(fig)),
    # through _repr_png_, whether or not pyplot's inline backend is active.
    global _figure_class
    if _figure_class is None:
        import io
        from matplotlib.figure import Figure

        class D2LFigure(Figure):
            def _repr_png_(self):
                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=90)
                return buf.getvalue()

        _figure_class = D2LFigure
    return _figure_class(figsize=figsize, layout="constrained")


def show_heatmaps(matrices, xlabel, ylabel, titles=None, figsize=(2.5, 2.5), cmap="Reds", xticklabels=None,
                  yticklabels=None, vmin=None, vmax=None, aspect="equal"):
    """D2L's ``show_heatmaps``: ``matrices`` (rows, cols, Q, K) — or (n, Q, K), one row of n panels, or
    one (Q, K) matrix — drawn as a grid of heatmaps with a colour bar. ``titles``: one per column.
    ``xticklabels`` / ``yticklabels``: token labels for the K / Q axes. ``figsize`` is per panel.
    As in D2L each panel is coloured over its own range and the colour bar is the last panel's;
    ``vmin`` / ``vmax`` give all panels one scale. ``aspect``: square cells ("equal", D2L's) or cells
    stretched to fill ``figsize`` ("auto", for long matrices). Returns the Figure. Raises ValueError for another rank
    or a label list of the wrong length."""
    m = weights_numpy(matrices).astype(np.float64)
    if m.ndim == 2:
        m = m[None, None]
    elif m.ndim == 3:
        m = m[None]
    if m.ndim != 4:
        raise ValueError(f"show_heatmaps: matrices must be (Q, K), (n, Q, K) or (rows, cols, Q, K); got shape {m.shape}")
    rows, cols, q, k = m.shape
    for name, labels, n in (("xticklabels", xticklabels, k), ("yticklabels", yticklabels, q)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"show_heatmaps: {name} has {len(labels)} labels for {n} {'keys' if n == k else 'queries'}")
    if titles is not None and len(titles) != cols:
        raise ValueError(f"show_heatmaps: {len(titles)} titles for {cols} columns")
    fig = _figure((figsize[0] * cols + 0.8, figsize[1] * rows))
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            pcm = ax.imshow(m[i, j], cmap=cmap, vmin=vmin, vmax=vmax, aspect=aspect)
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None:
                ax.set_title(titles[j])
            if xticklabels is not None:
                ax.set_xticks(range(k), xticklabels, rotation=90)
            if yticklabels is not None:
                ax.set_yticks(range(q), yticklabels)
    fig.colorbar(pcm, ax=axes, shrink=0.6)
    return fig


def plot(X, Y=None, xlabel=None, ylabel=None, legend=None, xlim=None, ylim=None, xscale="linear", yscale="linear",
         fmts=("-", "m--", "g-.", "r:"), figsize=(3.5, 2.5), title=None):
    """D2L's ``plot``: one curve per row of Y against X (or against its index when Y is None: X holds the
    curves). X and Y: a list, a 1-D array or a list of 1-D arrays; a loss history ``[(epoch, loss, ...)]``
    may be given as ``plot([e for e, *_ in h], [l for _, l, *_ in h])``. Returns the Figure."""
    def rows(v):
        v = [weights_numpy(r) for r in v] if isinstance(v, (list, tuple)) and len(v) and np.ndim(v[0]) > 0 \
            else [weights_numpy(v)]
        return [np.asarray(r, dtype=np.float64).reshape(-1) for r in v]
    if Y is None:
        Y, X = rows(X), None
    else:
        Y = rows(Y)
    Xs = [np.arange(len(y)) for y in Y] if X is None else rows(X)
    if len(Xs) == 1 and len(Y) > 1:
        Xs = Xs * len(Y)
    if len(Xs) != len(Y):
        raise ValueError(f"plot: {len(Xs)} x series for {len(Y)} y series")
    fig = _figure(figsize)
    ax = fig.subplots()
    for i, (x, y) in enumerate(zip(Xs, Y)):
        if len(x) != len(y):
            raise ValueError(f"plot: series {i} has {len(x)} x values and {len(y)} y values")
        ax.plot(x, y, fmts[i % len(fmts)])
    ax.set_xlabel(xlabel or "")
    ax.set_ylabel(ylabel or "")
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    if xlim is not None:
        ax.set_xlim(xlim)
    if ylim is not None:
        ax.set_ylim(ylim)
    if legend:
        ax.legend(legend)
    if title:
        ax.set_title(title)
    ax.grid(True)
    return fig


# ---- data --------------------------------------------------------------------------------------

def find_data(name, path=None, env="QKV_DATA"):
    """The file ``name`` (e.g. "fra-eng.zip"): ``path`` when given (a file, or a folder holding ``name``),
    else ``$env`` (the same), else ``../shared/data/name`` from the working folder or its parent.
    Raises FileNotFoundError listing where it looked."""
    def resolve(p):
        p = Path(p)
        return p / name if p.is_dir() else p
    if path is not None:
        tried, why = [resolve(path)], "given path"
    elif os.environ.get(env):
        tried, why = [resolve(os.environ[env])], f"from ${env}"
    else:
        tried, why = [Path("..") / "shared" / "data" / name, Path("../..") / "shared" / "data" / name], \
            f"the default; no path given and ${env} unset"
    for p in tried:
        if p.is_file():
            return p
    raise FileNotFoundError(f"{name} not found: looked for {', '.join(map(str, tried))} ({why}); pass the path or "
                            f"set {env}")


def read_data_nmt(path=None):
    """The text of fra-eng's fra.txt (D2L 10.5.1): ``path`` a fra-eng.zip, a fra.txt or a folder holding
    fra-eng.zip (else $QKV_DATA, then ../shared/data). Raises FileNotFoundError, or ValueError for a
    zip without fra-eng/fra.txt."""
    p = path
    if p is not None and Path(p).is_dir() and not (Path(p) / "fra-eng.zip").is_file():
        p = Path(p) / "fra.txt"
    f = find_data("fra-eng.zip", p)
    if zipfile.is_zipfile(f):
        with zipfile.ZipFile(f) as z:
            if "fra-eng/fra.txt" not in z.namelist():
                raise ValueError(f"{f}: the archive has no fra-eng/fra.txt")
            return z.read("fra-eng/fra.txt").decode("utf-8")
    return Path(f).read_text(encoding="utf-8")


def preprocess_nmt(text):
    """D2L 10.5.1: non-breaking spaces become spaces, lower case, a space before , . ! ? that follow a word."""
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    return "".join(" " + c if i > 0 and c in ",.!?" and text[i - 1] != " " else c for i, c in enumerate(text))


def tokenize_nmt(text, num_examples=None):
    """D2L 10.5.2: (source, target) lists of word lists from the first ``num_examples`` lines holding a tab."""
    source, target = [], []
    for i, line in enumerate(text.split("\n")):
        if num_examples is not None and i >= num_examples:
            break
        parts = line.split("\t")
        if len(parts) >= 2:
            source.append(parts[0].split(" "))
            target.append(parts[1].split(" "))
    return source, target


def read_time_machine(path=None):
    """The raw text of H. G. Wells's *The Time Machine* (D2L 9.2): ``path``, else $QKV_LM_DATA, else
    ../shared/data/timemachine.txt. Raises FileNotFoundError."""
    return find_data("timemachine.txt", path, env="QKV_LM_DATA").read_text(encoding="utf-8")


def preprocess_time_machine(text):
    """D2L 9.2.1 (and ``qkv train --model lm``): letters lower-cased, every run of other characters one space."""
    return re.sub("[^A-Za-z]+", " ", text).lower()


def nw_seed():
    """The seed's Nadaraya–Watson experiment as PyTorch ran it: dict of x_train, y_train (150, float32,
    sorted), x_test (0, 0.1, ..., 4.9), y_true = 2.333 sin x + x^0.666 on x_test, and PyTorch's history:
    loss (20: the MSE before each epoch's step) and w (20: after it)."""
    x_test = (np.arange(50) * 0.1).astype(np.float32)
    return {"x_train": np.array(_nw_seed.X_TRAIN, dtype=np.float32),
            "y_train": np.array(_nw_seed.Y_TRAIN, dtype=np.float32),
            "x_test": x_test,
            "y_true": (2.333 * np.sin(x_test) + x_test ** 0.666).astype(np.float32),
            "loss": np.array(_nw_seed.LOSS), "w": np.array(_nw_seed.W)}


def write_tiny_corpus(path):
    """Writes 60 lines of fra-eng pairs (the book's four sentences and two more, repeated) to ``path``
    (its folder made if missing) and returns it as a Path: what a notebook trains on when fra-eng.zip is
    not found."""
    pairs = ["Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.", "I'm home.\tJe suis chez moi.",
             "We won.\tNous avons gagné.", "Thank you.\tMerci."]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(pairs[i % len(pairs)] + "\n" for i in range(60)), encoding="utf-8")
    return p


def full_run():
    """True when $QKV_NOTEBOOK_FULL is set to something other than "" or "0": the notebooks' long runs."""
    return os.environ.get("QKV_NOTEBOOK_FULL", "") not in ("", "0")


def find_demo_model(path=None):
    """The model folder ``make demo`` trains (scripts/demo_translation.sh: runs/qkv from the
    repository root, or out/translation when runs/qkv held another preset's model): ``path``, else
    $QKV_MODEL ("none": no model), else runs/qkv, then out/translation, from the working folder or
    its parent. Returns the folder (a Path) when it holds a trained model
    (config.json and a checkpoint), else None."""
    env = os.environ.get("QKV_MODEL", "")
    if path is None and env == "none":
        return None
    cands = [Path(path)] if path is not None else [Path(env)] if env else \
        [Path(p) / d for p in (".", "..") for d in ("runs/qkv", "out/translation")]
    for c in cands:
        if (c / "config.json").is_file() and any(c.glob("*.safetensors")):
            return c
    return None


# ---- translation -------------------------------------------------------------------------------

def bleu(pred_seq, label_seq, k):
    """D2L 10.7.6: BLEU of one space-separated prediction against one reference, n-grams up to ``k``,
    with D2L's brevity penalty exp(min(0, 1 - len_label / len_pred)) and weights 1/2^n."""
    pred_tokens, label_tokens = pred_seq.split(" "), label_seq.split(" ")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    score = math.exp(min(0, 1 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        num_matches, label_subs = 0, collections.defaultdict(int)
        for i in range(len_label - n + 1):
            label_subs[" ".join(label_tokens[i:i + n])] += 1
        for i in range(len_pred - n + 1):
            if label_subs[" ".join(pred_tokens[i:i + n])] > 0:
                num_matches += 1
                label_subs[" ".join(pred_tokens[i:i + n])] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


# ---- progress ----------------------------------------------------------------------------------

def _in_jupyter():
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class Progress:
    """A progress bar: an HTML ``<progress>`` element updated in place in Jupyter, a line rewritten with
    ``\\r`` on ``file`` (default stderr) elsewhere. ``total`` steps; ``update(n, **info)`` sets the count
    and the values shown after it (``loss=1.23``); calling it with a dict (``qkv.train``'s ``on_step``
    argument: step, loss, tokens_per_s, ...) shows step and loss; iterating ``Progress(iterable)``
    counts the items; ``history`` lists the (step, loss) pairs given that way. ``close()`` ends the line
(text mode)."""

    def __init__(self, iterable=None, total=None, desc="", file=None, html_output=None):
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        if total is not None and total < 0:
            raise ValueError(f"Progress: total must be >= 0, got {total}")
        self.total, self.desc, self.n, self.info = total, desc, 0, {}
        self.file = file if file is not None else sys.stderr
        self.html = _in_jupyter() if html_output is None else html_output
        self._handle = None
        self.history = []

    def text(self):
        """The current state as one line: 'desc 30/100 [=====     ] loss=1.234'."""
        parts = [self.desc] if self.desc else []
        if self.total:
            frac = min(self.n / self.total, 1.0)
            parts.append(f"{self.n}/{self.total} [{'=' * int(frac * 20):<20}]")
        else:
            parts.append(str(self.n))
        parts += [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.info.items()]
        return " ".join(parts)

    def _html(self):
        bar = f'<progress value="{self.n}" max="{self.total}" style="width:20em"></progress> ' if self.total else ""
        return f"<div>{bar}<code>{html.escape(self.text())}</code></div>"

    def update(self, n=None, **info):
        self.n = self.n + 1 if n is None else n
        self.info.update(info)
        if self.html:
            from IPython.display import HTML, display
            if self._handle is None:
                self._handle = display(HTML(self._html()), display_id=True)
            else:
                self._handle.update(HTML(self._html()))
        else:
            print("\r" + self.text(), end="", file=self.file, flush=True)

    def __call__(self, d):
        """qkv.train's on_step callback: d['step'] and d['loss']."""
        self.history.append((int(d["step"]), float(d["loss"])))
        self.update(int(d["step"]), loss=float(d["loss"]))

    def close(self):
        if not self.html:
            print(file=self.file, flush=True)

    def __iter__(self):
        if self.iterable is None:
            raise TypeError("Progress: nothing to iterate (give an iterable)")
        for item in self.iterable:
            yield item
            self.update()
        self.close()
