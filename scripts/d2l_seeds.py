#!/usr/bin/env python3
"""The d2l preset (D2L EN's Transformer run, spec §3) over several seeds, with the book's unmasked
loss (--loss-on-padding), scored as the book scores it: greedy translations of the four book
sentences with D2L's BLEU (k=2), with correct decoder positions and with D2L's position-0 quirk.

Targets (issue 4): median over seeds of the mean book BLEU >= 0.8, and the final train loss
within ±25 % of the book's 0.183 (the plotted value at x = 29.625: mean of the last 2 batch
losses). Prints a markdown table (also written to OUT/table.md) for bench/RESULTS_train.md.

Usage: PYENV_VERSION=system python3 scripts/d2l_seeds.py --qkv build/bin/qkv [--seeds 0 1 2 3 4]
       [--out runs/d2l_seeds] [--threads 2] [--data PATH]
Each seed's model folder OUT/seedN is trained anew (qkv train --overwrite) on every run.
"""
import argparse, json, os, statistics, subprocess, sys, time

BOOK_LOSS = 0.183


def run(cmd, env):
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS_KB %M"] + cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    rss = [int(l.split()[1]) for l in p.stderr.splitlines() if l.startswith("MAXRSS_KB")]
    return p.stdout, time.time() - t0, (rss[-1] / 1024 if rss else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default="build/bin/qkv")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", default="runs/d2l_seeds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="")
    a = ap.parse_args()
    env = dict(os.environ)
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for s in a.seeds:
        d = os.path.join(a.out, f"seed{s}")
        cmd = [a.qkv, "train", "--preset", "d2l", "--seed", str(s), "--loss-on-padding", "--log-every", "1",
               "--no-progress", "--threads", str(a.threads), "--out", d, "--overwrite"]
        if a.data:
            cmd += ["--data", a.data]
        _, wall, rss = run(cmd, env)
        steps, epochs = [], []
        with open(os.path.join(d, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                (steps if r["kind"] == "step" else epochs).append(r)
        last2 = statistics.mean(r["loss"] for r in steps[-2:])
        res = {}
        for quirk in (False, True):
            jpath = os.path.join(d, "eval_quirk.json" if quirk else "eval.json")
            ecmd = [a.qkv, "eval", "--model", d, "--no-progress", "--show", "0", "--threads", str(a.threads),
                    "--json", jpath] + (["--pe-quirk"] if quirk else [])
            run(ecmd, env)
            with open(jpath) as f:
                res[quirk] = json.load(f)
        rows.append(dict(seed=s, loss=last2, epoch_loss=epochs[-1]["train_loss"], val=epochs[-1]["val_loss"],
                         bleu=res[False]["book_mean_bleu"], bleu_q=res[True]["book_mean_bleu"],
                         book=res[False]["book"], book_q=res[True]["book"], wall=wall, rss=rss,
                         tps=statistics.mean(r["tokens_per_s"] for r in epochs)))
        r = rows[-1]
        print(f"seed {s}: loss {r['loss']:.3f}, book BLEU {r['bleu']:.3f} (quirk {r['bleu_q']:.3f}), "
              f"{wall:.0f} s, peak RSS {rss:.0f} MiB", flush=True)

    out = ["| seed | final train loss (last 2 batches) | last-epoch mean | val loss | book BLEU (PE t) | "
           "book BLEU (PE quirk) | translations (PE t) | wall s | peak RSS MiB |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tr = "; ".join(f"{b['source']} => {b['translation']}" for b in r["book"])
        out.append(f"| {r['seed']} | {r['loss']:.3f} | {r['epoch_loss']:.3f} | {r['val']:.3f} | {r['bleu']:.3f} | "
                   f"{r['bleu_q']:.3f} | {tr} | {r['wall']:.0f} | {r['rss']:.0f} |")
    med_bleu = statistics.median(r["bleu"] for r in rows)
    med_bleu_q = statistics.median(r["bleu_q"] for r in rows)
    med_loss = statistics.median(r["loss"] for r in rows)
    out.append(f"| **median** | **{med_loss:.3f}** | | | **{med_bleu:.3f}** | **{med_bleu_q:.3f}** | | "
               f"{statistics.median(r['wall'] for r in rows):.0f} | {max(r['rss'] for r in rows):.0f} (max) |")
    ok_bleu = med_bleu >= 0.8
    ok_loss = abs(med_loss - BOOK_LOSS) <= 0.25 * BOOK_LOSS
    out.append("")
    out.append(f"Targets: median book BLEU >= 0.8: {'met' if ok_bleu else 'NOT met'} ({med_bleu:.3f}); "
               f"median final loss within ±25 % of {BOOK_LOSS} ([{0.75*BOOK_LOSS:.3f}, {1.25*BOOK_LOSS:.3f}]): "
               f"{'met' if ok_loss else 'NOT met'} ({med_loss:.3f}).")
    text = "\n".join(out)
    print(text)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
