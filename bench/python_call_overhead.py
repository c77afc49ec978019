#!/usr/bin/env python3
"""Per-call time of qkv.scaled_dot_product_attention from Python on the shapes of
bench/bench_sdpa_call.cpp (the same op called from C++), with qkv.Tensor inputs and with numpy
inputs (shared, not copied), and PyTorch's math composition softmax(q kᵀ/√d) v when torch is
installed, on small shapes (call overhead) and on bench_attention's shapes (throughput). Median of
7 repeats of N calls; fp32. Forward only, no autograd recording (inputs do not require grad).
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
# bench/bench_attention.cpp's shapes (flash_fwd/B:4, the D2L Transformer's attention, a long row)
ATTENTION_SHAPES = [(4, 8, 512, 64), (64, 4, 10, 32), (1, 8, 2048, 64)]


def per_call_us(f, n):
    """Median over 7 repeats of (wall, CPU) microseconds per call (CPU time: robust on a busy machine,
    as Google Benchmark's CPU column)."""
    f()
    wall, cpu = [], []
    for _ in range(7):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            f()
        wall.append((time.perf_counter() - t0) / n * 1e6)
        cpu.append((time.process_time() - c0) / n * 1e6)
    return statistics.median(wall), statistics.median(cpu)


def main():
    print(f"{'shape (B,H,T,D)':<18}{'qkv Tensor':>16}{'qkv numpy':>16}{'torch math':>16}   (us per call, wall / CPU)")
    for shape in SHAPES + ATTENTION_SHAPES:
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        tq, tk, tv = (qkv.from_numpy(x) for x in (q, k, v))
        elems = shape[0] * shape[1] * shape[2] * shape[2] * shape[3]
        n = 20000 if shape[2] <= 8 else 2000 if elems < 10**7 else max(3, int(4e8 // elems))
        a = per_call_us(lambda: qkv.scaled_dot_product_attention(tq, tk, tv), n)
        b = per_call_us(lambda: qkv.scaled_dot_product_attention(q, k, v), n)
        c = (float("nan"), float("nan"))
        if torch is not None:
            pq, pk, pv = (torch.from_numpy(x) for x in (q, k, v))
            s = 1 / shape[3] ** 0.5
            c = per_call_us(lambda: torch.softmax(pq @ pk.transpose(-1, -2) * s, -1) @ pv, n)
        print(f"{str(shape):<18}" + "".join(f"{x[0]:8.2f}/{x[1]:<7.2f}" for x in (a, b, c)))
    if torch is None:
        print("torch: not installed (python3-torch absent), no PyTorch column")


if __name__ == "__main__":
    main()
