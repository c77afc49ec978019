#!/usr/bin/env python3
"""bench/dp_scaling_model.py --fit recovers the constants that made its input: rows written as
bench/netns_comm.sh writes them (LINK=tun: veth cells at no delay, relay cells at 0, 0.1 and
1 ms, probe-only rows with back-to-back small all-reduces), computed from known constants (latency
factors per N, a per-rank copy rate) by the model's own equations, must give those constants back
and a worst ratio of 1.00; a second set whose small all-reduces do not follow the delay must fall
back on the --alpha-us prior.
Usage: test_dp_fit.py REPO_ROOT"""
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
MODEL = os.path.join(ROOT, "bench", "dp_scaling_model.py")
PARAMS = 2282807
GRAD = 4 * PARAMS
NB = 3  # buckets of 1 MiB, then 4 MiB: 8.7 MiB -> 3
TRUE = dict(alpha0=2e-3, f_ar={2: 1.0, 4: 3.0}, f_step={2: 2.0, 4: 7.0}, eff=0.6, rank=1.2e9 / 8, overlap={2: -0.2, 4: -1.5},
            compute={2: 0.080, 4: 0.090})


def t_comm(n, rate, delay, hops, factor):
    bw = 2 * (n - 1) / n * GRAD / min(TRUE["eff"] * rate / 8, TRUE["rank"])
    return hops * 2 * (n - 1) * (TRUE["alpha0"] + factor[n] * delay) + bw


def rows(small_follows):
    out = ["n\trate_bps\tlink\tdelay_s\tallreduce_ms\tsmall_ms\tstep_ms\twait_ms\tcompute_ms\tparams\tone_ms\tload\tround"]
    for n in (2, 4):
        c = TRUE["compute"][n]
        for rate in (1e9, 10e9):
            for link, delay in (("veth", 0.0), ("tun", 0.0), ("tun", 1e-4), ("tun", 1e-3)):
                ar = t_comm(n, rate, delay, 1, TRUE["f_ar"])
                wait = max(0.0, t_comm(n, rate, delay, NB, TRUE["f_step"]) - TRUE["overlap"][n] * c)
                k = math.log2(n)  # recursive doubling: log2 N messages in a row
                small = k * (TRUE["alpha0"] + delay) if small_follows else 0.006
                ms = lambda x: f"{x * 1e3:.9f}"
                out.append("\t".join([str(n), f"{rate:.0f}", link, f"{delay:g}", ms(ar), "nan", ms(c + wait), ms(wait),
                                      ms(c), str(PARAMS), "90", "1.0", "1"]))
                out.append("\t".join([str(n), f"{rate:.0f}", link, f"{delay:g}", ms(ar), ms(small), "nan", "nan",
                                      "0", str(PARAMS), "90", "1.0", "p"]))
    return "\n".join(out) + "\n"


def fit(text, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, MODEL, "--fit", f.name, *extra], check=True, capture_output=True,
                              text=True).stdout
    finally:
        os.unlink(f.name)


def number(pattern, text):
    m = re.search(pattern, text)
    if not m:
        raise SystemExit(f"FAIL: no match for {pattern!r} in:\n{text}")
    return float(m.group(1))


def close(name, got, want, printed_step):
    # Exact up to the printed rounding: half a unit of the last printed digit.
    if abs(got - want) > printed_step / 2 + 1e-12:
        raise SystemExit(f"FAIL: {name} fitted {got}, made with {want}")


out = fit(rows(True))
close("alpha0 (us)", number(r"alpha0 = (\d+) us per message at no delay, fitted", out), TRUE["alpha0"] * 1e6, 1)
for n in (2, 4):
    close(f"one-way delays per hop, all-reduce, N={n}", number(rf"one large all-reduce .*?N={n} ([\d.]+)", out),
          TRUE["f_ar"][n], 0.01)
    close(f"one-way delays per hop, step, N={n}", number(rf"buckets .*?N={n} ([\d.]+)", out), TRUE["f_step"][n], 0.01)
close("link efficiency", number(r"link efficiency ([\d.]+)", out), TRUE["eff"], 0.001)
close("per-rank Gb/s", number(r"each rank's stream moves at most ([\d.]+) Gb/s", out), TRUE["rank"] * 8 / 1e9, 0.01)
close("overlap N=2", number(r"per N: N=2 (-?[\d.]+)", out), TRUE["overlap"][2], 0.01)
close("overlap N=4", number(r"N=4 (-?[\d.]+) \(the model", out), TRUE["overlap"][4], 0.01)
close("worst ratio", number(r"worst ratio .*?: ([\d.]+) \(within", out), 1.0, 0.01)
out = fit(rows(False), "--alpha-us", "40")
if "the prior (--alpha-us)" not in out or "alpha0 = 40 us" not in out:
    raise SystemExit(f"FAIL: small all-reduces that do not follow the delay must leave alpha0 at the prior:\n{out}")
print("test_dp_fit: ok")
