#!/usr/bin/env python3
"""Side-by-side attention benchmark: qkv's flash kernel (build/bench/bench_attention) against the
PyTorch 1.13 math-path anchor (/work/shared/bench/attn_bench.py), same shapes, same thread count,
same FLOP convention (forward 4*B*H*N*N*d, backward 2.5x forward, causal half). Prints a markdown
table of medians and ratios, for bench/RESULTS_attention.md.

PyTorch gets its best configuration for its own command only (OpenBLAS core-type overrides unset,
hugetlb malloc), as /work/shared/bench/README.md prescribes; nothing else in the environment changes.

Usage: attn_side_by_side.py [--bench build/bench/bench_attention] [--anchor .../attn_bench.py]
                            [--threads 2] [--reps 3] [--shapes 8,8,128,64 ...]
"""
import argparse, json, os, re, statistics, subprocess, sys

SHAPES = ["8,8,128,64", "4,8,512,64", "1,8,2048,64", "1,8,4096,64"]
# (anchor mode, anchor pass) -> qkv benchmark name, and the ratio the issue asks for.
CASES = [("math", "fwd", "BM_attention_flash_fwd", 3.0),
         ("math", "fwdbwd", "BM_attention_flash_fwdbwd", 2.0),
         ("causal", "fwd", "BM_attention_flash_causal_fwd", 5.0),
         ("causal", "fwdbwd", "BM_attention_flash_causal_fwdbwd", None)]


def run_anchor(anchor, threads, reps, shapes):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["PYENV_VERSION"] = "system"
    env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    cmd = ["python3", anchor, "--threads", str(threads), "--reps", str(reps), "--modes", "math",
           "causal", "--shapes", *shapes]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and cells[0] in ("math", "causal"):
            res[(cells[0], cells[1], cells[2])] = float(cells[5])  # attn GFLOP/s (median)
    return out, res


def run_qkv(bench, threads, reps, shapes):
    filt = "|".join("B:%s/H:%s/N:%s/d:%s/" % tuple(s.split(",")) for s in shapes)
    cmd = [bench, "--threads=%d" % threads, "--benchmark_repetitions=%d" % reps,
           "--benchmark_format=json", "--benchmark_filter=" + filt]
    data = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    samples = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        m = re.match(r"(BM_\w+)/B:(\d+)/H:(\d+)/N:(\d+)/d:(\d+)", b["name"])
        key = (m.group(1), ",".join(m.group(i) for i in range(2, 6)))
        samples.setdefault(key, []).append(b["GFLOP/s"])  # counter already in GFLOP/s
    return data["context"], {k: statistics.median(v) for k, v in samples.items()}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "bench_attention"))
    ap.add_argument("--anchor", default="/work/shared/bench/attn_bench.py")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    a = ap.parse_args()
    anchor_out, torch = run_anchor(a.anchor, a.threads, a.reps, a.shapes)
    ctx, qkv = run_qkv(a.bench, a.threads, a.reps, a.shapes)
    print(anchor_out.splitlines()[0])
    print("qkv bench_attention: %s, %d threads, %d repetitions (medians)" % (ctx.get("host_name", "?"), a.threads, a.reps))
    print()
    print("| B,H,N,d | pass | PyTorch math GFLOP/s | qkv flash GFLOP/s | ratio | issue target |")
    print("|---|---|---|---|---|---|")
    for shp in a.shapes:
        for mode, pas, name, target in CASES:
            t = torch.get((mode, pas, shp))
            q = qkv.get((name, shp))
            if t is None or q is None:
                continue
            label = ("causal " if mode == "causal" else "") + pas
            print("| %s | %s | %.1f | %.1f | %.2fx | %s |" % (shp, label, t, q, q / t,
                                                           ("%.0fx" % target) if target else "-"))


if __name__ == "__main__":
    sys.exit(main())
