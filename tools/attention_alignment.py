#!/usr/bin/env python3
"""How diagonal is a trained Bahdanau model's attention? (issue 5's heatmap criterion, counted over
many sentences instead of one.) Runs `qkv heatmap` on N English sentences of MIN..MAX words taken
at an even stride from fra.txt (D2L's preprocessing: lower case, a space before , . ! ?), reads the
printed weights, and per sentence takes the argmax source position of every output token (its
<eos> included). Reports the share of sentences whose argmax is non-decreasing along the output
("monotone", the issue's rule), the share that is also not constant ("moving"), and the mean
Spearman correlation between output position and argmax source position.

  python3 tools/attention_alignment.py --model runs/bahdanau [--qkv build/bin/qkv]
      [--data ../shared/data/fra-eng.zip] [--n 200] [--min-words 3] [--max-words 8] [--check]

--check (issue 5's acceptance check): exit status 1 unless the argmax for "i'm home ." is
non-decreasing and moves, and the mean Spearman rho is at least 0.7 (what D2L's unidirectional
encoder stays far below, bench/RESULTS_gru.md §7).

The sentences may include training sentences (the split is qkv's, not reproduced here): this
measures the alignment the model learned, not generalisation.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile


def sentences(path, n, lo, hi):
    if os.path.isdir(path):
        for name in ("fra-eng.zip", "fra.txt", os.path.join("fra-eng", "fra.txt")):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            sys.exit(f"no fra-eng.zip or fra.txt in the folder {path}")
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            name = next(x for x in z.namelist() if x.endswith("fra.txt") and not x.startswith("__MACOSX"))
            text = z.read(name).decode("utf-8")
    else:
        text = open(path, encoding="utf-8").read()
    out, seen = [], set()
    for line in text.split("\n"):
        eng = line.split("\t")[0].replace("\u202f", " ").replace("\xa0", " ").lower()
        eng = "".join(" " + c if i > 0 and c in ",.!?" and eng[i - 1] != " " else c for i, c in enumerate(eng))
        if lo <= len(eng.split()) <= hi and eng not in seen:
            seen.add(eng)
            out.append(eng)
    stride = max(1, len(out) // n)
    return out[::stride][:n]


def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den > 0 else None


def argmax_rows(qkv, model, sentence, prefix):
    p = subprocess.run([qkv, "heatmap", "--model", model, "--out", prefix, sentence], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"qkv heatmap failed for {sentence!r}:\n{p.stderr}")
    rows = []
    for line in p.stdout.splitlines()[2:]:
        parts = line.split()
        if line.startswith("  ") and len(parts) >= 2 and re.match(r"^[0-9.]+$", parts[-1]):
            w = [float(x) for x in parts[1:]]
            rows.append(max(range(len(w)), key=w.__getitem__))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--qkv", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "qkv"))
    ap.add_argument("--data", default=os.environ.get("QKV_DATA", "../shared/data/fra-eng.zip"))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--min-words", type=int, default=3)
    ap.add_argument("--max-words", type=int, default=8)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless \"i'm home .\" has a non-decreasing, moving argmax and mean rho >= 0.7")
    a = ap.parse_args()
    if a.n < 1:
        sys.exit(f"--n must be at least 1, got {a.n}")
    if not os.path.exists(a.qkv):
        sys.exit(f"qkv binary not found: {a.qkv} (build first, or pass --qkv)")
    if not os.path.exists(a.data):
        sys.exit(f"data not found: {a.data} (pass --data or set QKV_DATA)")
    mono = moving = 0
    rhos = []
    sents = sentences(a.data, a.n, a.min_words, a.max_words)
    if not sents:
        sys.exit(f"no sentence of {a.min_words}-{a.max_words} words in {a.data}")
    with tempfile.TemporaryDirectory() as tmp:
        for s in sents:
            am = argmax_rows(a.qkv, a.model, s, os.path.join(tmp, "h"))
            if not am:
                sys.exit(f"qkv heatmap printed no cross-attention weights for {s!r}: is {a.model} a Bahdanau model?")
            m = all(x <= y for x, y in zip(am, am[1:]))
            mono += m
            moving += m and len(set(am)) > 1
            r = spearman(list(range(len(am))), am)
            if r is not None:
                rhos.append(r)
    n = len(sents)
    print(f"{a.model}: {n} sentences of {a.min_words}-{a.max_words} words: monotone {mono} ({100 * mono / n:.0f} %), "
          f"monotone and moving {moving} ({100 * moving / n:.0f} %), mean Spearman rho "
          + (f"{statistics.mean(rhos):.3f} over {len(rhos)} with a non-constant argmax" if rhos
             else "undefined (no sentence has a non-constant argmax)"))
    if a.check:
        with tempfile.TemporaryDirectory() as tmp:
            home = argmax_rows(a.qkv, a.model, "i'm home .", os.path.join(tmp, "h"))
        ok_home = all(x <= y for x, y in zip(home, home[1:])) and len(set(home)) > 1
        ok_rho = bool(rhos) and statistics.mean(rhos) >= 0.7
        print(f"check: \"i'm home .\" argmax {' '.join(map(str, home))}: "
              f"{'non-decreasing and moving' if ok_home else 'FAILS'}; mean rho >= 0.7: {'yes' if ok_rho else 'NO'}")
        sys.exit(0 if ok_home and ok_rho else 1)


if __name__ == "__main__":
    main()
