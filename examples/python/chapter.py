#!/usr/bin/env python3
"""D2L chapter 11 in Python with qkv: Nadaraya–Watson attention pooling (the seed experiment), the
4-token self-attention matrix, a tiny demo Transformer trained on fra-eng, translation, and the
attention heatmaps (matplotlib, Debian's python3-matplotlib; skipped with a note when missing).

    make python && python3 examples/python/chapter.py --out runs/chapter
    python3 examples/python/chapter.py --quick     # seconds: a smoke test on 6 memorised pairs

--data defaults to ../shared/data/fra-eng.zip (or $QKV_DATA); --quick needs no data.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

import qkv

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # plots are optional
    plt = None


def heatmap(path, w, xlabels, ylabels, title, xlabel="Keys", ylabel="Queries"):
    if plt is None:
        print(f"  (matplotlib missing: {path} not drawn; apt-get install python3-matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(1 + 0.5 * max(len(xlabels), 4), 1 + 0.45 * max(len(ylabels), 4)))
    im = ax.imshow(w, cmap="Reds", vmin=0, vmax=1)
    if len(xlabels) <= 30:
        ax.set_xticks(range(len(xlabels)), xlabels, rotation=60)
    if len(ylabels) <= 30:
        ax.set_yticks(range(len(ylabels)), ylabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"  wrote {path}")


def nadaraya_watson(out):
    print("== 11.2 Nadaraya–Watson attention pooling (seed experiment: f(x) = 2.333 sin x + x^0.666)")
    d = qkv.nw_data("seed", 150, seed=0)
    x_train, y_train, x_test, y_true = (d[k].numpy() for k in ("x_train", "y_train", "x_test", "y_true"))
    pred, w = qkv.nadaraya_watson(x_test, x_train, y_train)  # Gaussian kernel, width 1
    print(f"  non-parametric: test MSE {np.mean((pred.numpy() - y_true) ** 2):.4f}")
    model = qkv.NWKernelRegression(1.0)
    hist = model.fit(x_train, y_train, epochs=20, lr=0.5)
    print(f"  parametric: loss {hist[0][1]:.4f} -> {hist[-1][1]:.4f}, w = {model.w.item():.3f}")
    p2 = model(x_test, x_train, y_train).detach().numpy()
    print(f"  parametric: test MSE {np.mean((p2 - y_true) ** 2):.4f}")
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(x_test, y_true, label="truth")
        ax.plot(x_test, pred.numpy(), label="non-parametric")
        ax.plot(x_test, p2, label="parametric")
        ax.plot(x_train, y_train, "o", alpha=0.3, ms=3, label="train")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "nw-predictions.png", dpi=100)
        plt.close(fig)
        print(f"  wrote {out / 'nw-predictions.png'}")
    heatmap(out / "nw-attention.png", model.attention_weights.detach().numpy(), [], [],
            "parametric NW attention", "training inputs", "test inputs")


def self_attention(out):
    print("== 11.3 scaled dot-product self-attention over 4 tokens (Q = K = V = X, embedding dim 8)")
    tokens = ["I", "love", "deep", "learning"]
    X = qkv.randn(1, 4, 8, seed=0)
    _, w = qkv.scaled_dot_product_attention(X, X, X, return_weights=True)
    w = w.numpy()[0]
    print("  " + " " * 10 + "".join(f"{t:>10}" for t in tokens))
    for t, row in zip(tokens, w):
        print("  " + f"{t:<10}" + "".join(f"{x:10.4f}" for x in row))
    assert np.allclose(w.sum(1), 1, atol=1e-6)
    heatmap(out / "self-attention.png", w, tokens, tokens, "self-attention weights")


# Steps the quick mode trains: enough for the tiny model to reproduce its 6 training pairs (with 30
# steps and subword pieces it printed "go . => s" for every sentence, issue 44).
QUICK_STEPS = 300


def tiny_corpus(path):
    pairs = ["Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.", "I'm home.\tJe suis chez moi.",
             "We won.\tNous avons gagné.", "Thank you.\tMerci."]
    path.write_text("".join(pairs[i % 6] + "\n" for i in range(60)), encoding="utf-8")
    return path


# The book's four sentences (D2L 11.7.6) and their references.
SENTENCES = ["go .", "i lost .", "he's calm .", "i'm home ."]
REFERENCES = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]


def train_and_translate(out, data, steps, quick):
    if quick:
        print(f"== 11.7 quick mode: a tiny Transformer (16 hidden units, 1 block) trained {steps} steps on 6 sentence "
              "pairs repeated (the book's four among them). It memorises them: the lines below show the code "
              "path, not translation (run without --quick, with the fra-eng data, to train a translator)")
    else:
        print(f"== 11.7 training the demo Transformer on {data} ({steps} steps)")
    # quick: D2L's word tokens (subword pieces of these 6 pairs overflow num_steps 6 and never fit)
    settings = dict(num_hiddens=16, num_heads=2, num_blks=1, ffn_num_hiddens=16, batch_size=8, num_steps=6,
                    subword="none") if quick else {}

    def on_step(s):
        print(f"  step {s['step']:5d}  loss {s['loss']:.4f}  {s['tokens_per_s']:.0f} tokens/s")

    r = qkv.train(out / "model", data=str(data), max_steps=steps, log_every=max(1, steps // 5), preset="demo",
                  overwrite=True, quiet=True, on_step=on_step, **settings)
    print(f"  trained {r['steps']} steps in {r['train_seconds']:.1f} s")
    tr = qkv.Translator(str(out / "model"))
    sentences = SENTENCES
    results = tr.translate_batch(sentences, beam_size=2)
    for s, res in zip(sentences, results):
        print(f"  {s} => {res.translation}")
    same = sum(r.translation == ref for r, ref in zip(results, REFERENCES))
    print(f"  {same} of {len(sentences)} equal the book's references"
          + (" (sentences the quick model was trained on)" if quick else ""))
    res = tr.translate_batch([sentences[-1]], return_attention=True)[0]
    src = sentences[-1].split() + ["<eos>"]
    tgt = (res.translation.split() + ["<eos>"])[:res.attention.shape[0]]
    heatmap(out / "cross-attention.png", res.attention, src, tgt, "decoder cross-attention (last layer)",
            "source", "output step")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/chapter", help="folder for the plots and the model")
    ap.add_argument("--data", default=os.environ.get("QKV_DATA", "../shared/data/fra-eng.zip"))
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    ap.add_argument("--quick", action="store_true",
                    help=f"seconds: a tiny model trained (at most {QUICK_STEPS} steps) on 6 pairs it memorises; a "
                         "smoke test of the code path, not a translator")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    qkv.manual_seed(0)
    nadaraya_watson(out)
    self_attention(out)
    data = Path(a.data)
    if a.quick:
        data = tiny_corpus(out / "tiny-fra.txt")
        steps = min(a.steps, QUICK_STEPS)
    else:
        steps = a.steps
        if not data.exists():
            sys.exit(f"chapter.py: no data at {data} (give --data, set QKV_DATA, or use --quick)")
    train_and_translate(out, data, steps, a.quick)


if __name__ == "__main__":
    main()
