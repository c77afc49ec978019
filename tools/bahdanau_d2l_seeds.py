#!/usr/bin/env python3
"""The Bahdanau d2l-preset acceptance run (issue 5): train D2L EN's Bahdanau model with
`qkv train --model bahdanau --preset d2l --loss-on-padding` for several seeds, then report per
seed the mean D2L BLEU (k=2) of the four book sentences, the final train loss, and whether the
attention for "i'm home ." moves monotonically (the argmax source position per output token is
non-decreasing), and the medians. Criteria: median mean-BLEU >= 0.7; final train loss within
±25% of the book's 0.106 (spec §3).

  python3 tools/bahdanau_d2l_seeds.py [--qkv build/bin/qkv] [--data ../shared/data/fra-eng.zip]
                                      [--seeds 0 1 2 3 4] [--out /tmp/bahdanau_seeds] [--threads 2]
                                      [--train-arg=--bidirectional ...]

Prints a markdown table (paste into bench/RESULTS_gru.md). Exit status 1 when a criterion fails.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

BOOK_LOSS = 0.106


def run(cmd):
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def heatmap_monotone(qkv, model_dir):
    out = run([qkv, "heatmap", "--model", model_dir, "i'm home .", "--out", os.path.join(model_dir, "att")])
    rows = []
    for line in out.splitlines()[2:]:
        parts = line.split()
        if len(parts) < 2 or not re.match(r"^[0-9.]+$", parts[-1]):
            continue
        weights = [float(x) for x in parts[1:]]
        rows.append((parts[0], max(range(len(weights)), key=weights.__getitem__)))
    argmax = [a for _, a in rows]
    ok = all(a <= b for a, b in zip(argmax, argmax[1:]))
    return ok, len(set(argmax)) > 1, " ".join(f"{tok}:{a}" for tok, a in rows), out.splitlines()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default="build/bin/qkv")
    ap.add_argument("--data", default="../shared/data/fra-eng.zip")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", default="/tmp/bahdanau_seeds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reuse", action="store_true",
                    help="reuse OUT/seedN (model + train.out) from an earlier run; only redo the heatmaps "
                         "(without it each OUT/seedN is trained anew: qkv train --overwrite)")
    ap.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for qkv train, e.g. --train-arg=--bidirectional (repeatable)")
    a = ap.parse_args()
    results = []
    for seed in a.seeds:
        d = os.path.join(a.out, f"seed{seed}")
        log = os.path.join(d, "train.out")
        if a.reuse and os.path.exists(log):
            out = open(log).read()
        else:
            out = run([a.qkv, "train", "--model", "bahdanau", "--preset", "d2l", "--loss-on-padding", "--data",
                       a.data, "--out", d, "--overwrite", "--seed", str(seed), "--threads", str(a.threads),
                       "--no-progress"] + a.train_arg)
            with open(log, "w") as f:
                f.write(out)
        loss = float(re.search(r"last epoch train loss ([0-9.]+)", out).group(1))
        bleu = float(re.search(r"mean bleu ([0-9.]+)", out).group(1))
        tps = float(re.search(r"([0-9.]+) target tokens/s", out).group(1))
        book = re.findall(r"^  (.+ => .*), bleu ([0-9.]+)$", out, re.M)
        mono, moving, argmax, trans = heatmap_monotone(a.qkv, d)
        results.append((seed, bleu, loss, mono and moving, argmax, trans, book, tps, mono))
        print(f"seed {seed}: mean bleu {bleu:.3f}, final train loss {loss:.4f}, monotone {mono}, "
              f"moving {moving} ({argmax})",
              file=sys.stderr, flush=True)
    print("| seed | mean BLEU (4 book sentences) | final train loss | \"i'm home .\" attention argmax "
          "(token:source position) | monotone | translations |")
    print("|---|---|---|---|---|---|")
    for seed, bleu, loss, diag, argmax, trans, book, _, mono in results:
        tr = "; ".join(f"{t} ({b})" for t, b in book)
        kind = "yes" if diag else "yes (constant)" if mono else "no"
        print(f"| {seed} | {bleu:.3f} | {loss:.4f} | {argmax} | {kind} | {tr} |")
    mb = statistics.median(r[1] for r in results)
    ml = statistics.median(r[2] for r in results)
    nm = sum(r[8] for r in results)
    nd = sum(r[3] for r in results)
    print(f"\nmedian mean BLEU {mb:.3f} (criterion >= 0.7); median final train loss {ml:.4f} "
          f"(book {BOOK_LOSS}, ±25%: {0.75 * BOOK_LOSS:.4f}..{1.25 * BOOK_LOSS:.4f}); monotone heatmaps "
          f"{nm}/{len(results)} ({nd} of them moving along the source); mean {statistics.mean(r[7] for r in results):.0f} non-pad target tokens/s")
    ok = mb >= 0.7 and all(abs(r[2] - BOOK_LOSS) <= 0.25 * BOOK_LOSS for r in results)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
