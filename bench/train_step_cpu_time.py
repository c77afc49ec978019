#!/usr/bin/env python3
"""PyTorch side of the training-step comparison in CPU time rather than wall time, for a machine
that is busy with other work (wall time then measures the load, not the code). Builds exactly the
model, batches and step of shared/bench/d2l_transformer_bench.py (imported) and reports, per step,
process CPU time (time.process_time) and wall time, medians over reps. With --threads 1 the CPU
time is the single-core cost of a step; compare it with bench_train_step --threads 1's "CPU" column.

Usage: PYENV_VERSION=system python3 bench/train_step_cpu_time.py [--threads 1] [--src-vocab 194]
       [--tgt-vocab 214] [--steps 20] [--reps 5]
"""
import argparse, os, statistics, sys, time

import torch

for cand in (os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"),
             "/work/shared/bench"):
    if os.path.exists(os.path.join(cand, "d2l_transformer_bench.py")):
        sys.path.insert(0, cand)
        break
import d2l_transformer_bench as d2l  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--src-vocab", type=int, default=194)
    ap.add_argument("--tgt-vocab", type=int, default=214)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = d2l.Seq2Seq(a.src_vocab, a.tgt_vocab)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0015)
    batches = [d2l.random_batch(128, 9, a.src_vocab, a.tgt_vocab, g) for _ in range(4)]

    def step(b):
        src, dec_in, src_len, Y = b
        loss = d2l.masked_ce(model(src, dec_in, src_len), Y)
        opt.zero_grad()
        loss.backward()
        d2l.clip_gradients(model.parameters(), 1.0)
        opt.step()

    for i in range(10):
        step(batches[i % 4])
    cpu, wall = [], []
    for _ in range(a.reps):
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(a.steps):
            step(batches[i % 4])
        cpu.append((time.process_time() - c0) / a.steps)
        wall.append((time.perf_counter() - w0) / a.steps)
    print(f"torch {torch.__version__} threads={a.threads} vocab={a.src_vocab}/{a.tgt_vocab}: "
          f"CPU ms/step median {1e3 * statistics.median(cpu):.1f} (min {1e3 * min(cpu):.1f}), "
          f"wall ms/step median {1e3 * statistics.median(wall):.1f}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
