#!/usr/bin/env python3
"""PyTorch side of bench_matmul's BM_linear_then_cross_entropy / BM_linear_cross_entropy:
F.cross_entropy(F.linear(x, W, b), t), forward + backward, fp32, the same shapes (N rows, C 256,
V classes) and the same targets ((i * 7919) % V). Prints the median and min of --reps timed runs
after 2 warm-ups. Run PyTorch in its best configuration (bench/RESULTS_avx512.md §0), e.g.
CT=Cooperlake /tmp/torchenv.sh python3 bench/output_loss_torch.py --threads 2
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=20)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(1)
for N, V in [(1060, 17496), (1400, 8000)]:
    C = 256
    x = torch.randn(N, C, requires_grad=True)
    w = (torch.randn(V, C) * 0.05).requires_grad_()
    b = (torch.randn(V) * 0.05).requires_grad_()
    t = torch.tensor([(i * 7919) % V for i in range(N)])
    times = []
    for r in range(args.reps + 2):
        x.grad = w.grad = b.grad = None
        t0 = time.perf_counter()
        F.cross_entropy(F.linear(x, w, b), t).backward()
        dt = time.perf_counter() - t0
        if r >= 2:
            times.append(dt)
    print(f"N {N} V {V}: median {statistics.median(times)*1e3:.1f} ms, min {min(times)*1e3:.1f} ms "
          f"({args.threads} threads, torch {torch.__version__})")
