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

Usage: bench/dp_scaling_model.py --preset anchor:15.18e6:STEP_MS --preset full:5.74e6:STEP_MS
       [--alpha-us 20] [--bucket-mb 4] [--overlap-share 0.66] [--bytes-per-grad 4]
       [--check MEASURED_COMM_MS:PARAMS:BW_GBPS:ALPHA_US]   (2-rank check on one machine)
"""
import argparse
import math


def t_comm_s(n, grad_bytes, bw_bytes_per_s, alpha_s, bucket_bytes):
    if n == 1:
        return 0.0
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    return buckets * 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * grad_bytes / bw_bytes_per_s


def efficiency(t_compute, t_comm, overlap_share):
    exposed = max(0.0, t_comm - overlap_share * t_compute)
    return t_compute / (t_compute + exposed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", action="append", required=True,
                    help="NAME:PARAMS:STEP_MS (measured compute per step per rank)")
    ap.add_argument("--alpha-us", type=float, default=20.0, help="per-hop latency (TCP ~20-50, RDMA ~2-5)")
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--overlap-share", type=float, default=0.66,
                    help="share of the step compute that can hide communication (the backward pass)")
    ap.add_argument("--bytes-per-grad", type=float, default=4.0, help="4: fp32 gradients, 2: bf16")
    ap.add_argument("--ranks", default="2,4,8,16,32,64,128,256,512")
    ap.add_argument("--gbps", default="10,25,100")
    ap.add_argument("--check", help="MEASURED_COMM_MS:PARAMS:BW_GBPS:ALPHA_US: compare the model with a "
                                    "measured 2-rank all-reduce time")
    a = ap.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    gbps = [float(x) for x in a.gbps.split(",")]
    alpha = a.alpha_us * 1e-6
    bucket = a.bucket_mb * 2**20
    for spec in a.preset:
        name, params, step_ms = spec.split(":")
        params, t_c = float(params), float(step_ms) / 1000
        grad_bytes = params * a.bytes_per_grad
        print(f"\n### {name}: {params / 1e6:.2f} M parameters, {grad_bytes / 2**20:.1f} MiB of gradients, "
              f"compute {t_c * 1000:.1f} ms/step/rank, alpha {a.alpha_us:g} us, buckets {a.bucket_mb:g} MiB\n")
        print("| N | " + " | ".join(f"{g:g} Gb/s comm ms | eff. no overlap | eff. overlap" for g in gbps) + " |")
        print("|---|" + "---|---|---|" * len(gbps))
        below = {}
        for n in ranks:
            cells = []
            for g in gbps:
                tc = t_comm_s(n, grad_bytes, g * 1e9 / 8, alpha, bucket)
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
