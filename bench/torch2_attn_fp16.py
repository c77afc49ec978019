#!/usr/bin/env python3
"""PyTorch 2.6's CPU attention on float16 tensors: ../shared/bench/torch2/torch2_attn.py with an
"fp16" dtype added (torch.float16 q, k, v, the same cases, timing and JSON lines). Runs inside the
trixie chroot beside that script, e.g.

  chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 "$PWD/bench/torch2_attn_fp16.py" \
      --dtypes fp16 --impls flash --passes fwd --threads 2

Options as torch2_attn.py's; --torch2-dir names the folder holding torch2_attn.py (default: the
shared one beside the project).
"""
import os
import sys

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
if __name__ == "__main__":
    torch2_attn.main()
