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
per-hop latency is alpha = alpha0 + tcp_factor x delay, alpha0 the stack's own latency per
message, delay the link's one-way delay and tcp_factor the one-way delays a hop of a training
step's bucket actually waits per configured one-way delay (1 in the textbook model); the
bandwidth is link_efficiency x the link rate (headers, the hosts' TCP work), and on the test bed
also at most rank_bps per rank (each rank's TCP stream is copied by the cores it shares with the
other ranks: a per-stream cap, as one core's copy rate caps one TCP stream on real hosts); overlap_share
as achieved (negative where the communication slows the compute it should hide behind).

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


def fit(path, alpha_prior_s):
    """Fits the model's constants to the TSV rows of bench/netns_comm.sh (LINK=tun: relay cells
    with delays, veth cells at no delay; rows with step "nan" are PROBE_ONLY=1 all-reduce runs),
    prints the fit and the model against every relay cell, and returns the constants:
    alpha0 (s per message at no delay: back-to-back small all-reduces against the delay),
    tcp_factor_ar (one-way delays per ring hop of one large all-reduce), tcp_factor_step (the same
    for a training step's bucketed reduction, from rank 0's wait), eff (achieved bandwidth over the
    link rate, per rate) and overlap (share of the compute that hides communication)."""
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    if not rows:
        raise SystemExit(f"--fit {path}: no rows")
    cells = {}  # (n, rate, link, delay) -> rows of the rounds
    for r in rows:
        cells.setdefault((int(r["n"]), float(r["rate_bps"]), r["link"], float(r["delay_s"])), []).append(r)

    def mean(key, field, train=None):
        """Mean over the rounds; train: only training rows (True) or probe-only rows (False)."""
        vals = [float(r[field]) for r in cells[key]
                if (train is None or (r["step_ms"] != "nan") == train) and r[field] != "nan"]
        return statistics.fmean(vals) if vals else float("nan")

    params = float(rows[0]["params"])
    grad_bytes = 4 * params
    nb = buckets_of(grad_bytes)
    relay = sorted(k for k in cells if k[2] == "tun")
    ns, rates = sorted({k[0] for k in relay}), sorted({k[1] for k in relay})
    trained = [k for k in relay if not math.isnan(mean(k, "step_ms", True))]
    probed = [k for k in relay if not math.isnan(mean(k, "small_ms"))]

    def slope_per(keys, field, train, per):
        """Least-squares slope of FIELD (ms) against the delay (s), per (N, rate), over PER(N)."""
        out = []
        for n in ns:
            for rate in rates:
                ks = [k for k in keys if k[0] == n and k[1] == rate]
                if len({k[3] for k in ks}) >= 2:
                    slope, icpt = least_squares_line([k[3] for k in ks], [mean(k, field, train) / 1e3 for k in ks])
                    out.append((n, rate, slope / per(n), icpt))
        return out

    # 1. alpha0: small all-reduces (recursive doubling: log2 N messages in a row) against the delay;
    # only where they follow the delay (slope >= 0.5 one-way delays per all-reduce). Where they do
    # not (on a loaded machine a waiting rank's next time slice, milliseconds, dominates them),
    # alpha0 is the given prior (--alpha-us: e.g. half the relay's smallest ping round trip).
    small = slope_per(probed, "small_ms", None, lambda n: 1.0)  # every row measures them
    follows = [icpt / sl for _, _, sl, icpt in small if sl >= 0.5]
    alpha0 = statistics.fmean(follows) if follows and len(follows) == len(small) else alpha_prior_s
    alpha_how = "fitted" if alpha0 is not alpha_prior_s else "the prior (--alpha-us): the small all-reduces do not follow the delay"
    # 2. one-way delays per ring hop: the large all-reduce, and a training step's wait; per N, as
    # on the test bed N ranks, their relays and daemons share the cores: where they outnumber them
    # an awaited message also waits for its rank's next time slice, so the factor grows with N.
    # The smallest N (ranks not outnumbering the cores) is what a host with its own cores sees.
    ar_f = slope_per(relay, "allreduce_ms", None, lambda n: 2 * (n - 1))
    st_f = slope_per(trained, "wait_ms", True, lambda n: nb * 2 * (n - 1))
    f_ar = {n: statistics.fmean(f for m, _, f, _ in ar_f if m == n) for n in ns}
    f_step = {n: statistics.fmean(f for m, _, f, _ in st_f if m == n) for n in ns}
    # 3. bandwidth: each rank's link moves eff x its rate (fitted where the link bounds: N = 2 at
    # the lowest rate); where the link does not bound (the highest rate), each rank's stream moves
    # at most rank_bps of its 2 (N-1)/N x the gradient bytes per all-reduce (pooled over N). A
    # shared capacity for all ranks together (2 (N-1) x the bytes) fits worse: the quiet cells give
    # ~163 MB/s per rank at N = 2 and ~133 at N = 4, i.e. 2.6 and 4.3 Gb/s in all (bench/RESULTS.md).
    # The no-delay relay cells, less the latency term.
    def t0_bw(n, rate):
        return mean((n, rate, "tun", 0.0), "allreduce_ms") / 1e3 - 2 * (n - 1) * alpha0

    eff = (2 * (ns[0] - 1) / ns[0] * grad_bytes / t0_bw(ns[0], rates[0])) / (rates[0] / 8)
    rank_bps = statistics.fmean(2 * (n - 1) / n * grad_bytes / t0_bw(n, rates[-1]) for n in ns)

    def t_comm(n, rate, delay, hops, factor):
        """factor: one-way delays per hop, per N."""
        bw = 2 * (n - 1) / n * grad_bytes / min(eff * rate / 8, rank_bps)
        return hops * 2 * (n - 1) * (alpha0 + factor[n] * delay) + bw

    # 4. overlap share: wait = t_step_comm - overlap x compute over the trained relay cells, the
    # compute being the same N's no-delay veth cells' (step - wait).
    compute0 = {n: statistics.fmean(mean(k, "compute_ms", True) / 1e3 for k in cells
                                    if k[0] == n and k[2] == "veth" and not math.isnan(mean(k, "step_ms", True)))
                for n in ns}
    def overlap_of(keys):
        num = den = 0.0
        for k in keys:
            c = compute0[k[0]]
            num += c * (t_comm(k[0], k[1], k[3], nb, f_step) - mean(k, "wait_ms", True) / 1e3)
            den += c * c
        return num / den

    overlap = overlap_of(trained)
    # Per N: on this machine N ranks share 2 cores, so how much the communication slows the
    # compute grows with N; one share for all N cannot hold (bench/RESULTS.md).
    overlap_n = {n: overlap_of([k for k in trained if k[0] == n]) for n in ns}
    print(f"fit ({len(rows)} rows, {len(cells)} cells; {params / 1e6:.2f} M parameters, {nb} buckets per step):")
    print(f"- alpha0 = {alpha0 * 1e6:.0f} us per message at no delay, {alpha_how} (back-to-back small all-reduces: "
          + ", ".join(f"N={n} {r / 1e9:g} Gb/s {i * 1e3:.3f} ms + {sl:.2f} x delay" for n, r, sl, i in small) + ")")
    per_n = lambda fs: ", ".join(f"N={n} {f:.2f}" for n, f in fs.items())
    print(f"- one-way delays per ring hop: one large all-reduce {per_n(f_ar)} ("
          + ", ".join(f"N={n} {r / 1e9:g} Gb/s {f:.2f}" for n, r, f, _ in ar_f) + "); a training step's "
          f"{nb} buckets {per_n(f_step)} (" + ", ".join(f"N={n} {r / 1e9:g} Gb/s {f:.2f}" for n, r, f, _ in st_f) + ")")
    print(f"- link efficiency {eff:.3f} (payload over the link rate, N={ns[0]} at {rates[0] / 1e9:g} Gb/s); "
          f"each rank's stream moves at most {rank_bps * 8 / 1e9:.2f} Gb/s ({rank_bps / 1e6:.0f} MB/s; the test bed's shared "
          f"cores: " + ", ".join(f"N={n} {2 * (n - 1) / n * grad_bytes / t0_bw(n, rates[-1]) / 1e6:.0f}" for n in ns)
          + " MB/s)")
    print(f"- overlap share achieved: {overlap:.2f} of the compute, one for all N; per N: "
          + ", ".join(f"N={n} {o:.2f}" for n, o in overlap_n.items()) + " (the model's prior: 0.66)")
    print("- compute per step (no-delay veth cells, step - wait): "
          + ", ".join(f"N={n} {c * 1e3:.0f} ms" for n, c in compute0.items()))
    print()
    print("| N | rate | delay ms | all-reduce ms measured (fit) | wait ms/step measured (fit) | step ms measured (fit) "
          "| all-reduce share of the step | efficiency measured (fit) | worst ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = worst_one = 0.0
    for k in trained:
        n, rate, _, delay = k
        ar, w, st = mean(k, "allreduce_ms"), mean(k, "wait_ms", True), mean(k, "step_ms", True)
        ar_p = t_comm(n, rate, delay, 1, f_ar) * 1e3
        w_p = max(0.0, t_comm(n, rate, delay, nb, f_step) - overlap_n[n] * compute0[n]) * 1e3
        st_p = compute0[n] * 1e3 + w_p
        r = max(max(x, 1 / x) for x in (ar / ar_p, st / st_p))
        worst = max(worst, r)
        st_one = compute0[n] * 1e3 + max(0.0, t_comm(n, rate, delay, nb, f_step) - overlap * compute0[n]) * 1e3
        worst_one = max(worst_one, st / st_one, st_one / st)
        print(f"| {n} | {rate / 1e9:g} Gb/s | {delay * 1e3:g} | {ar:.1f} ({ar_p:.1f}) | {w:.1f} ({w_p:.1f}) "
              f"| {st:.1f} ({st_p:.1f}) | {100 * w / st:.0f} % | {100 * (st - w) / st:.0f} % "
              f"({100 * compute0[n] * 1e3 / st_p:.0f} %) | {r:.2f} |")
    print(f"\nworst ratio (all-reduce and step, either way; the overlap share per N): {worst:.2f}"
          f" ({'within' if worst <= 1.25 else 'NOT within'} 25 %); steps with one overlap share for all N: "
          f"{worst_one:.2f}")
    return dict(alpha0=alpha0, tcp_factor_ar=f_ar[ns[0]], tcp_factor=f_step[ns[0]], eff=eff, rank_bps=rank_bps,
                overlap=overlap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", action="append",
                    help="NAME:PARAMS:STEP_MS (measured compute per step per rank)")
    ap.add_argument("--fit", help="bench/netns_comm.sh's TSV (TSV=FILE LINK=tun): fit the constants, compare, "
                                  "then print the presets' tables with them")
    ap.add_argument("--alpha-us", type=float, default=20.0, help="per-hop latency (TCP ~20-50, RDMA ~2-5)")
    ap.add_argument("--delay-us", type=float, default=0.0, help="the link's one-way delay, added to alpha")
    ap.add_argument("--tcp-factor", type=float, default=1.0, help="one-way delays per hop per configured delay")
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
        f = fit(a.fit, a.alpha_us * 1e-6)
        a.alpha_us = f["alpha0"] * 1e6
        a.tcp_factor = f["tcp_factor"]  # the smallest N's: ranks that do not outnumber the cores
        a.link_efficiency = f["eff"]
        # A negative share (communication slowing the compute on shared cores) is this machine's:
        # a host with its own cores and NIC hides at least nothing, so the tables use >= 0.
        a.overlap_share = max(0.0, f["overlap"])
        print(f"\nrestated with the fitted constants: alpha0 {a.alpha_us:.0f} us, tcp_factor {a.tcp_factor:.2f}, "
              f"link efficiency {a.link_efficiency:.3f}, overlap share {a.overlap_share:.2f}, delay {a.delay_us:g} us")
    if not a.preset:
        return
    ranks = [int(x) for x in a.ranks.split(",")]
    gbps = [float(x) for x in a.gbps.split(",")]
    alpha = (a.alpha_us + a.tcp_factor * a.delay_us) * 1e-6
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
