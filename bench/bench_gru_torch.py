#!/usr/bin/env python3
"""PyTorch side of bench/bench_gru.cpp: the same shapes and steps with D2L's classes (written in
tools/gen_gru_fixtures.py from the spec), on the CPU with a fixed thread count.

  PYENV_VERSION=system env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
      python3 bench/bench_gru_torch.py [--threads 2] [--iters 20]

Debian's torch takes its GEMMs from the system libblas.so.3; when that is netlib's reference BLAS,
prefix LD_LIBRARY_PATH=<dir with OpenBLAS's libblas.so.3> for a meaningful baseline
(bench/RESULTS_gru.md §2).

Prints wall-clock and process-CPU ms per iteration (medians of --iters after 3 warm-up
iterations) and target tokens/s for:
  gru_train        nn.GRU(256, 256, 2, dropout 0.2) forward + backward on X (9, 128, 256)
  bahdanau_step    D2L's Bahdanau model (vocab 194/214, E = H = 256, 2 layers, dropout 0.2), one
                   training step: forward, unmasked mean cross-entropy, backward, clip 1, Adam
"""
import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gen_gru_fixtures import EncoderDecoder, Seq2SeqAttentionDecoder, Seq2SeqEncoder  # noqa: E402

B, T, H, VS, VT = 128, 9, 256, 194, 214


def timed(fn, iters):
    """Median wall-clock and process-CPU milliseconds per call (CPU time is the steadier figure
    on a shared machine; with 1 thread it is the time the step needs when it has a core)."""
    for _ in range(3):
        fn()
    wall, cpu = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    gru = nn.GRU(H, H, 2, dropout=0.2)
    X = torch.randn(T, B, H, requires_grad=True)
    G = torch.randn(T, B, H)

    def gru_step():
        gru.zero_grad()
        out, _ = gru(X)
        out.backward(G)

    model = EncoderDecoder(Seq2SeqEncoder(VS, H, H, 2, 0.2), Seq2SeqAttentionDecoder(VT, H, H, 2, 0.2))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    src = torch.randint(0, VS, (B, T))
    dec = torch.randint(0, VT, (B, T))
    lab = torch.randint(0, VT, (B, T))
    vl = torch.tensor([2 + b % 8 for b in range(B)])

    def model_step():
        opt.zero_grad()
        loss = F.cross_entropy(model(src, dec, vl).reshape(-1, VT), lab.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    for name, fn in [("gru_train", gru_step), ("bahdanau_step", model_step)]:
        wall, cpu = timed(fn, a.iters)
        print(f"{name:15s} wall {wall:8.2f} ms ({B * T / wall * 1e3:8.0f} tokens/s)   "
              f"cpu {cpu:8.2f} ms ({B * T / cpu * 1e3:8.0f} tokens/s)")


if __name__ == "__main__":
    main()
