#!/usr/bin/env python3
"""The shared PyTorch anchor script (../shared/bench/fra_full_anchor.py) with subnormal floats
flushed to zero: torch.set_flush_denormal(True) before the script runs, so PyTorch gets the same
floating-point setting as the qkv program's default (--denormals flush). Every argument goes to
the script unchanged. Results: bench/RESULTS_avx512.md section 15.

  CT=Cooperlake /path/to/torchenv python3 bench/torch_anchor_flush.py \
      --zip ../shared/data/fra-eng.zip --out runs/torch_anchor_flush

The anchor script's path: $QKV_TORCH_ANCHOR, else ../shared/bench/fra_full_anchor.py beside this
repository.
"""
import os
import runpy
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
script = os.environ.get("QKV_TORCH_ANCHOR") or os.path.join(here, "..", "..", "shared", "bench",
                                                            "fra_full_anchor.py")
if not os.path.isfile(script):
    sys.exit(f"torch_anchor_flush.py: the PyTorch anchor script is not at {script}; "
             "set QKV_TORCH_ANCHOR to its path")
# Set on the main thread before the script creates its intra-op threads, which inherit it.
if not torch.set_flush_denormal(True):
    sys.exit("torch_anchor_flush.py: this CPU does not support flushing subnormals (SSE3 needed)")
print("torch.set_flush_denormal(True)", flush=True)
sys.argv = [script] + sys.argv[1:]
runpy.run_path(script, run_name="__main__")
