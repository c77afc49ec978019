#!/usr/bin/env python3
"""PyTorch 2.6's CPU attention on float16 tensors: ../shared/bench/torch2/torch2_attn.py with an
"fp16" dtype added (torch.float16 q, k, v, the same cases, timing and JSON lines). Runs inside the
trixie chroot beside that script, e.g.

  chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 "$PWD/bench/torch2_attn_fp16.py" \
      --dtypes fp16 --impls flash --passes fwd --threads 2

Options as torch2_attn.py's; --torch2-dir names the folder holding torch2_attn.py (default: the
shared one beside the project). --cpu-time (for a shared machine, as bench_attention --probe): each
case is timed by the process CPU time it consumed (one call after a warm-up call, or, for calls
under 2 CPU-seconds, as many as fill --min-sample-s of CPU time); ms_median / ms_min then hold CPU
milliseconds / threads and gflops is GFLOP per CPU-second x threads. Use --threads 1 with it.
"""
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
default_dir = os.path.normpath(os.path.join(here, "..", "..", "shared", "bench", "torch2"))
torch2_dir = default_dir
if "--torch2-dir" in sys.argv:
    i = sys.argv.index("--torch2-dir")
    torch2_dir = sys.argv[i + 1]
    del sys.argv[i:i + 2]
sys.path.insert(0, torch2_dir)

import torch  # noqa: E402
import torch2_attn  # noqa: E402

torch2_attn.DT["fp16"] = torch.float16


def bench_cpu(f, samples, min_sample_s):
    """CPU seconds per call / threads (see --cpu-time): the first call is the warm-up, and is the
    one sample when it took more than 2 CPU-seconds (float16's slow calls)."""
    threads = torch.get_num_threads()
    c0 = time.process_time()
    f()
    first = time.process_time() - c0
    if first > 2.0:
        return first / threads, first / threads, 1
    n, c0 = 0, time.process_time()
    while n == 0 or time.process_time() - c0 < min_sample_s:
        f()
        n += 1
    per = (time.process_time() - c0) / n / threads
    return per, per, n


if "--cpu-time" in sys.argv:
    sys.argv.remove("--cpu-time")
    torch2_attn.bench = bench_cpu
if __name__ == "__main__":
    torch2_attn.main()
