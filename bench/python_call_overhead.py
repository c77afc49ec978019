#!/usr/bin/env python3
"""Per-call time of qkv.scaled_dot_product_attention from Python on the shapes of
bench/bench_sdpa_call.cpp (the same op called from C++), with qkv.Tensor inputs and with numpy
inputs (shared, not copied), and PyTorch's math composition softmax(q kᵀ/√d) v when torch is
installed. Median of 7 repeats of N calls; fp32.
    PYTHONPATH=build/python OMP_NUM_THREADS=1 /usr/bin/python3 bench/python_call_overhead.py
"""
import statistics
import time

import numpy as np

import qkv

try:
    import torch
except ImportError:
    torch = None

SHAPES = [(1, 1, 4, 8), (1, 2, 8, 16), (2, 4, 32, 32)]


def per_call_us(f, n):
    f()
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def main():
    print(f"{'shape (B,H,T,D)':<18}{'qkv Tensor':>12}{'qkv numpy':>12}{'torch math':>12}   (us per call)")
    for shape in SHAPES:
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        tq, tk, tv = (qkv.from_numpy(x) for x in (q, k, v))
        n = 20000 if shape[2] <= 8 else 2000
        a = per_call_us(lambda: qkv.scaled_dot_product_attention(tq, tk, tv), n)
        b = per_call_us(lambda: qkv.scaled_dot_product_attention(q, k, v), n)
        c = float("nan")
        if torch is not None:
            pq, pk, pv = (torch.from_numpy(x) for x in (q, k, v))
            s = 1 / shape[3] ** 0.5
            c = per_call_us(lambda: torch.softmax(pq @ pk.transpose(-1, -2) * s, -1) @ pv, n)
        print(f"{str(shape):<18}{a:12.2f}{b:12.2f}{c:12.2f}")
    if torch is None:
        print("torch: not installed (python3-torch absent), no PyTorch column")


if __name__ == "__main__":
    main()
