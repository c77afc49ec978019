#!/usr/bin/env python3
"""Scaling model for qkv's data-parallel training (`mpirun -np N qkv train`) on many machines.

Per step, every rank computes forward+backward on its share and then all-reduces the fp32
gradients (ring all-reduce: each rank sends and receives 2 (N-1)/N of the gradient bytes, in
2 (N-1) latency-bound hops per bucket; Patarasuk & Yuan 2009, the NCCL/Horovod cost model):

    t_comm(N) = buckets * 2 (N-1) * alpha + 2 (N-1)/N * bytes / bandwidth

With overlap (buckets reduced while backward runs), the part of t_comm that fits inside the
backward pass (about 2/3 of the compute) is hidden:

    exposed = max(0, t_comm - overlap_share * t_compute)      (no overlap: exposed = t_comm)
    efficiency = t_compute / (t_compute + exposed)

Weak scaling: each rank keeps the per-rank batch that t_compute was measured with (the global
batch grows with N, or --accum-steps keeps it: see the README). Prints a Markdown table per
preset and the largest N with efficiency >= 90 %.

Measured constants (--fit, from bench/netns_comm.sh's TSV rows on the multi-host test bed): the
per-hop latency is alpha = tcp_factor * (alpha0 + delay), alpha0 the stack's own latency per
message, delay the link's one-way delay and tcp_factor the one-way delays TCP spends per hop
(slow start after idle, acknowledgements: more than 1); the bandwidth is link_efficiency x the
link rate (headers, the hosts' TCP work); overlap_share as achieved (negative where the
communication thread slows the compute it should hide behind).

Usage: bench/dp_scaling_model.py --preset anchor:15.18e6:STEP_MS --preset full:5.74e6:STEP_MS
       [--alpha-us 20] [--delay-us 0] [--tcp-factor 1] [--link-efficiency 1] [--bucket-mb 4]
       [--overlap-share 0.66] [--bytes-per-grad 4]
       [--check MEASURED_COMM_MS:PARAMS:BW_GBPS:ALPHA_US]   (2-rank check on one machine)
       bench/dp_scaling_model.py --fit CELLS.tsv [--preset ...]   (fit, compare, restate the table)
"""
import argparse
import csv
import math
import statistics


def t_comm_s(n, grad_bytes, bw_bytes_per_s, alpha_s, bucket_bytes):
    if n == 1:
        return 0.0
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    return buckets * 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * grad_bytes / bw_bytes_per_s


def efficiency(t_compute, t_comm, overlap_share):
    exposed = max(0.0, t_comm - overlap_share * t_compute)
    return t_compute / (t_compute + exposed)


def buckets_of(grad_bytes, first_bucket_bytes=2**20, bucket_bytes=4 * 2**20):
    """qkv's gradient buckets per step (train::GradientReducer: 1 MiB first, then 4 MiB)."""
    return 1 + max(0, math.ceil((grad_bytes - first_bucket_bytes) / bucket_bytes))


def least_squares_line(xs, ys):
    """(slope, intercept) of y = slope x + intercept."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def fit(path):
    """Fits alpha0, tcp_factor, link efficiency per rate and the overlap share to the TSV rows of
    bench/netns_comm.sh (LINK=tun: relay cells with delays, veth cells at no delay), prints the
    fit and the model against every cell, and returns the constants."""
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    if not rows:
        raise SystemExit(f"--fit {path}: no rows")
    cells = {}  # (n, rate, link, delay) -> rows of the rounds
    for r in rows:
        key = (int(r["n"]), float(r["rate_bps"]), r["link"], float(r["delay_s"]))
        cells.setdefault(key, []).append(r)

    def mean(key, field):
        return statistics.fmean(float(r[field]) for r in cells[key])

    params = float(rows[0]["params"])
    grad_bytes = 4 * params
    nb = buckets_of(grad_bytes)
    relay = sorted(k for k in cells if k[2] == "tun")
    ns, rates = sorted({k[0] for k in relay}), sorted({k[1] for k in relay})
    # 1. alpha0: the small all-reduce against the delay, per N: slope = one-way delays per small
    # all-reduce, intercept = its time at no delay; alpha0 = intercept / slope.
    alpha0s, smalls = [], {}
    for n in ns:
        ks = [k for k in relay if k[0] == n]
        slope, icpt = least_squares_line([k[3] for k in ks], [mean(k, "small_ms") / 1e3 for k in ks])
        smalls[n] = (slope, icpt)
        alpha0s.append(icpt / slope)
    alpha0 = statistics.fmean(alpha0s)
    # 2. tcp_factor: the large all-reduce's time against the delay, per N and rate; slope / 2(N-1).
    factors = []
    for n in ns:
        for rate in rates:
            ks = [k for k in relay if k[0] == n and k[1] == rate]
            slope, _ = least_squares_line([k[3] for k in ks], [mean(k, "allreduce_ms") / 1e3 for k in ks])
            factors.append(slope / (2 * (n - 1)))
    tcp_factor = statistics.fmean(factors)
    # 3. the bandwidth per rate: the no-delay relay cells, less the latency term, pooled over N.
    eff = {}
    for rate in rates:
        num = den = 0.0
        for n in ns:
            v = 2 * (n - 1) / n * grad_bytes
            lat = 2 * (n - 1) * tcp_factor * alpha0
            t0 = mean((n, rate, "tun", 0.0), "allreduce_ms") / 1e3
            num, den = num + v * (t0 - lat), den + v * v
        eff[rate] = (den / num) / (rate / 8)  # bytes/s over the link's bytes/s

    def t_allreduce(n, rate, delay, hops_per_msg=1):
        return hops_per_msg * 2 * (n - 1) * tcp_factor * (alpha0 + delay) + \
            2 * (n - 1) / n * grad_bytes / (eff[rate] * rate / 8)

    # 4. overlap share: wait = t_step_comm - overlap x compute, least squares over the relay cells
    # (compute: the same N's no-delay veth cells, step - wait).
    compute0 = {n: statistics.fmean(mean(k, "compute_ms") / 1e3 for k in cells if k[0] == n and k[2] == "veth")
                for n in ns}

    def t_step_comm(n, rate, delay):
        return nb * 2 * (n - 1) * tcp_factor * (alpha0 + delay) + 2 * (n - 1) / n * grad_bytes / (eff[rate] * rate / 8)

    num = den = 0.0
    for k in relay:
        c = compute0[k[0]]
        num += c * (t_step_comm(*k[:2], k[3]) - mean(k, "wait_ms") / 1e3)
        den += c * c
    overlap = num / den
    print(f"fit ({len(rows)} rows, {len(cells)} cells; {params / 1e6:.2f} M parameters, {nb} buckets):")
    print(f"- alpha0 = {alpha0 * 1e6:.0f} us per message at no delay (small all-reduce: "
          + ", ".join(f"N={n}: {smalls[n][1] * 1e3:.2f} ms + {smalls[n][0]:.2f} x delay" for n in ns) + ")")
    print(f"- tcp_factor = {tcp_factor:.2f} one-way delays per ring hop (per N and rate: "
          + ", ".join(f"{f:.2f}" for f in factors) + ")")
    print("- link efficiency: " + ", ".join(f"{r / 1e9:g} Gb/s: {eff[r]:.3f} ({eff[r] * r / 1e9:.2f} Gb/s)" for r in rates))
    print(f"- overlap share achieved: {overlap:.2f} of the compute (the model's prior: 0.66)")
    print()
    print("| N | rate | delay ms | all-reduce ms measured (fit) | wait ms/step measured (fit) | step ms measured (fit) "
          "| all-reduce share measured | efficiency measured (fit) | worst ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for k in relay:
        n, rate, _, delay = k
        ar, w, st = mean(k, "allreduce_ms"), mean(k, "wait_ms"), mean(k, "step_ms")
        ar_f = t_allreduce(n, rate, delay) * 1e3
        w_f = max(0.0, t_step_comm(n, rate, delay) - overlap * compute0[n]) * 1e3
        st_f = compute0[n] * 1e3 + w_f
        ratios = [ar / ar_f, st / st_f]
        r = max(max(x, 1 / x) for x in ratios)
        worst = max(worst, r)
        print(f"| {n} | {rate / 1e9:g} Gb/s | {delay * 1e3:g} | {ar:.1f} ({ar_f:.1f}) | {w:.1f} ({w_f:.1f}) "
              f"| {st:.1f} ({st_f:.1f}) | {100 * w / st:.0f} % | {100 * (st - w) / st:.0f} % "
              f"({100 * compute0[n] * 1e3 / st_f:.0f} %) | {r:.2f} |")
    print(f"\nworst ratio (all-reduce and step, either way): {worst:.2f}"
          f" ({'within' if worst <= 1.25 else 'NOT within'} 25 %)")
    return dict(alpha0=alpha0, tcp_factor=tcp_factor, eff=eff, overlap=overlap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", action="append",
                    help="NAME:PARAMS:STEP_MS (measured compute per step per rank)")
    ap.add_argument("--fit", help="bench/netns_comm.sh's TSV (TSV=FILE LINK=tun): fit the constants, compare, "
                                  "then print the presets' tables with them")
    ap.add_argument("--alpha-us", type=float, default=20.0, help="per-hop latency (TCP ~20-50, RDMA ~2-5)")
    ap.add_argument("--delay-us", type=float, default=0.0, help="the link's one-way delay, added to alpha")
    ap.add_argument("--tcp-factor", type=float, default=1.0, help="one-way delays per hop (alpha x this)")
    ap.add_argument("--link-efficiency", type=float, default=1.0, help="achieved bandwidth / link rate")
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--overlap-share", type=float, default=0.66,
                    help="share of the step compute that can hide communication (the backward pass)")
    ap.add_argument("--bytes-per-grad", type=float, default=4.0, help="4: fp32 gradients, 2: bf16")
    ap.add_argument("--ranks", default="2,4,8,16,32,64,128,256,512")
    ap.add_argument("--gbps", default="10,25,100")
    ap.add_argument("--check", help="MEASURED_COMM_MS:PARAMS:BW_GBPS:ALPHA_US: compare the model with a "
                                    "measured 2-rank all-reduce time")
    a = ap.parse_args()
    if a.fit:
        f = fit(a.fit)
        a.alpha_us = f["alpha0"] * 1e6
        a.tcp_factor = f["tcp_factor"]
        a.link_efficiency = f["eff"][min(f["eff"])]  # the slowest rate: the one the link, not the host, bounds
        a.overlap_share = f["overlap"]
        print(f"\nrestated with the fitted constants: alpha0 {a.alpha_us:.0f} us, tcp_factor {a.tcp_factor:.2f}, "
              f"link efficiency {a.link_efficiency:.3f}, overlap share {a.overlap_share:.2f}, delay {a.delay_us:g} us")
    if not a.preset:
        return
    ranks = [int(x) for x in a.ranks.split(",")]
    gbps = [float(x) for x in a.gbps.split(",")]
    alpha = a.tcp_factor * (a.alpha_us + a.delay_us) * 1e-6
    bucket = a.bucket_mb * 2**20
    for spec in a.preset:
        name, params, step_ms = spec.split(":")
        params, t_c = float(params), float(step_ms) / 1000
        grad_bytes = params * a.bytes_per_grad
        print(f"\n### {name}: {params / 1e6:.2f} M parameters, {grad_bytes / 2**20:.1f} MiB of gradients, "
              f"compute {t_c * 1000:.1f} ms/step/rank, alpha {alpha * 1e6:.0f} us per hop, buckets {a.bucket_mb:g} MiB, "
              f"bandwidth {a.link_efficiency:.2f} x the link, overlap share {a.overlap_share:.2f}\n")
        print("| N | " + " | ".join(f"{g:g} Gb/s comm ms | eff. no overlap | eff. overlap" for g in gbps) + " |")
        print("|---|" + "---|---|---|" * len(gbps))
        below = {}
        for n in ranks:
            cells = []
            for g in gbps:
                tc = t_comm_s(n, grad_bytes, a.link_efficiency * g * 1e9 / 8, alpha, bucket)
                e0, e1 = efficiency(t_c, tc, 0.0), efficiency(t_c, tc, a.overlap_share)
                cells.append(f"{tc * 1000:.1f} | {e0 * 100:.0f} % | {e1 * 100:.0f} %")
                for key, e in ((f"{g:g} Gb/s, no overlap", e0), (f"{g:g} Gb/s, overlap", e1)):
                    if e < 0.9 and key not in below:
                        below[key] = n
            print(f"| {n} | " + " | ".join(cells) + " |")
        print()
        for g in gbps:
            for mode in ("no overlap", "overlap"):
                key = f"{g:g} Gb/s, {mode}"
                print(f"- {key}: efficiency drops below 90 % at N = {below.get(key, '> ' + str(ranks[-1]))}")
    if a.check:
        measured_ms, params, bw, al = (float(x) for x in a.check.split(":"))
        pred = t_comm_s(2, params * a.bytes_per_grad, bw * 1e9 / 8, al * 1e-6, bucket) * 1000
        print(f"\ncheck: 2 ranks, {params / 1e6:.2f} M parameters at {bw:g} Gb/s, alpha {al:g} us: model "
              f"{pred:.2f} ms, measured {measured_ms:.2f} ms (ratio {measured_ms / pred:.2f})")


if __name__ == "__main__":
    main()
