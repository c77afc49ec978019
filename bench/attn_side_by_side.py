#!/usr/bin/env python3
"""Side-by-side attention benchmark: qkv's flash kernel (build/bench/bench_attention) against the
PyTorch 1.13 math-path anchor (/work/shared/bench/attn_bench.py), same shapes, same thread count,
same FLOP convention (forward 4*B*H*N*N*d, backward 2.5x forward, causal half). Prints a markdown
table of medians and ratios, for bench/RESULTS_attention.md.

PyTorch gets its best configuration for its own command only (OpenBLAS core-type overrides unset,
hugetlb malloc), as /work/shared/bench/README.md prescribes; nothing else in the environment changes.

Usage: attn_side_by_side.py [--bench build/bench/bench_attention] [--anchor .../attn_bench.py]
                            [--threads 2] [--reps 3] [--shapes 8,8,128,64 ...]
                            [--torch-blas-dir /usr/lib/x86_64-linux-gnu/openblas-pthread]
                            [--torch-coretype Cooperlake]
--torch-blas-dir prepends a directory holding libblas.so.3 to PyTorch's LD_LIBRARY_PATH (for the
anchor command only): Debian's torch calls whatever libblas.so.3 the system alternative selects,
and the netlib reference BLAS makes its matmuls ~1 GFLOP/s.
--torch-coretype sets OPENBLAS_CORETYPE for the PyTorch command only, where OpenBLAS 0.3.21
misdetects the CPU: on the Intel Xeon (family 6, model 207) of session 5 it picked a kernel that
ran 2048^3 sgemm at 55 GFLOP/s on 2 threads, against 265 with Cooperlake (bench/RESULTS_avx512.md).

--cpu-time: for a machine shared with other jobs. Runs attn_bench.py's own cases (make_case,
imported) and `bench_attention --probe` on the same work and rates both by the process CPU time
they consumed (GFLOP per CPU-second x threads): preemption by other processes then costs neither
side, only their cache pollution remains. Use --threads 1 with it (with more threads, time spent
spinning at barriers counts as CPU time and favours neither side predictably).
"""
import argparse, json, os, re, statistics, subprocess, sys

SHAPES = ["8,8,128,64", "4,8,512,64", "1,8,2048,64", "1,8,4096,64"]
# (anchor mode, anchor pass) -> qkv benchmark name, and the ratio the issue asks for.
CASES = [("math", "fwd", "BM_attention_flash_fwd", 3.0),
         ("math", "fwdbwd", "BM_attention_flash_fwdbwd", 2.0),
         ("causal", "fwd", "BM_attention_flash_causal_fwd", 5.0),
         ("causal", "fwdbwd", "BM_attention_flash_causal_fwdbwd", None)]


def run_anchor(python, anchor, threads, reps, shapes, blas_dir, coretype=""):
    env = dict(os.environ)
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    env["PYENV_VERSION"] = "system"
    env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    cmd = [python, anchor, "--threads", str(threads), "--reps", str(reps), "--modes", "math",
           "causal", "--shapes", *shapes]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("anchor failed:\n" + r.stderr)
    out = r.stdout
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


TORCH_CPU_SNIPPET = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
import attn_bench
threads, reps = int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
for shp in sys.argv[4:]:
    B, H, N, d = map(int, shp.split(","))
    for mode, pas in (("math", "fwd"), ("math", "fwdbwd"), ("causal", "fwd"), ("causal", "fwdbwd")):
        f = attn_bench.make_case(mode, pas, B, H, N, d)
        f()
        att, _ = attn_bench.flops(mode, pas, B, H, N, d)
        n = max(1, int(2e9 / att))  # about 2 GFLOP of work per sample
        rates = []
        for _ in range(reps):
            c0 = time.process_time()
            for _ in range(n):
                f()
            rates.append(att * n / (time.process_time() - c0) / 1e9 * threads)
        rates.sort()
        print("CPU", mode, pas, shp, rates[len(rates) // 2], flush=True)
"""

PROBES = {("math", "fwd"): "fwd", ("math", "fwdbwd"): "fwdbwd", ("causal", "fwd"): "causal_fwd",
          ("causal", "fwdbwd"): "causal_fwdbwd"}


def cpu_time_table(a):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if a.torch_coretype:
        env["OPENBLAS_CORETYPE"] = a.torch_coretype
    env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    if a.torch_blas_dir:
        env["LD_LIBRARY_PATH"] = a.torch_blas_dir
    r = subprocess.run([a.python, "-c", TORCH_CPU_SNIPPET, os.path.dirname(os.path.abspath(a.anchor)),
                        str(a.threads), str(a.reps), *a.shapes], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("torch cpu-time run failed:\n" + r.stderr)
    torch = {}
    for line in r.stdout.splitlines():
        _, mode, pas, shp, rate = line.split()
        torch[(mode, pas, shp)] = float(rate)
    print("GFLOP per CPU-second x threads, %d thread(s), median of %d; torch%s" %
          (a.threads, a.reps, " with libblas.so.3 from " + a.torch_blas_dir if a.torch_blas_dir else ""))
    print()
    print("| B,H,N,d | pass | PyTorch math | qkv flash | ratio | issue target |")
    print("|---|---|---|---|---|---|")
    for shp in a.shapes:
        B, H, N, d = map(int, shp.split(","))
        for mode, pas, _, target in CASES:
            flop = 4.0 * B * H * N * N * d * (0.5 if mode == "causal" else 1) * (3.5 if pas == "fwdbwd" else 1)
            reps_work = max(1, int(2e9 / flop))
            rates = []
            for _ in range(a.reps):
                out = subprocess.run([a.bench, "--threads=%d" % a.threads, "--probe=" + PROBES[(mode, pas)],
                                      "--shape=" + shp, "--reps=%d" % reps_work],
                                     check=True, capture_output=True, text=True).stdout
                rates.append(float(re.search(r"([\d.]+) GFLOP/s per cpu-second", out).group(1)))
            q = statistics.median(rates)
            t = torch[(mode, pas, shp)]
            label = ("causal " if mode == "causal" else "") + pas
            print("| %s | %s | %.1f | %.1f | %.2fx | %s |" % (shp, label, t, q, q / t,
                                                           ("%.0fx" % target) if target else "-"))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "bench_attention"))
    ap.add_argument("--anchor", default="/work/shared/bench/attn_bench.py")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    ap.add_argument("--torch-blas-dir", default="")
    ap.add_argument("--torch-coretype", default="", help="OPENBLAS_CORETYPE for the PyTorch command only")
    # Debian's python3 (with python3-torch); a pyenv python would put its own bin first on PATH.
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3")
    ap.add_argument("--cpu-time", action="store_true")
    a = ap.parse_args()
    if a.cpu_time:
        return cpu_time_table(a)
    anchor_out, torch = run_anchor(a.python, a.anchor, a.threads, a.reps, a.shapes, a.torch_blas_dir, a.torch_coretype)
    ctx, qkv = run_qkv(a.bench, a.threads, a.reps, a.shapes)
    print(anchor_out.splitlines()[0] + (" (libblas.so.3 from %s)" % a.torch_blas_dir if a.torch_blas_dir else "")
          + (" OPENBLAS_CORETYPE=%s" % a.torch_coretype if a.torch_coretype else ""))
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
