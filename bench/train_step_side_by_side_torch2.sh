#!/usr/bin/env bash
# The D2L training step (vocabularies 194/214, 2 threads) beside PyTorch 2.6 in the trixie chroot
# (../shared/bench/torch2/), alternated: PyTorch fp32, qkv fp32, PyTorch autocast bf16, qkv bf16
# (bench/RESULTS.md, "Decoding and the D2L step beside PyTorch 2.6 on a quiet machine"). The
# chroot must see SHARED at the same path. Usage: [BUILD=build] [SHARED=../shared] [ROUNDS=2] $0
set -euo pipefail
S=$(realpath "${SHARED:-../shared}") B=${BUILD:-build}
T() { chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
      python3 "$S/bench/d2l_transformer_bench.py" --threads 2 --src-vocab 194 --tgt-vocab 214 --steps 20 --reps 3 --autocast "$1" 2>&1 | grep RESULT; }
Q() { "$B/bench/bench_train_step" --threads 2 --precision "$1" --benchmark_filter=194/214 --benchmark_min_time=3 2>/dev/null | grep BM_ | awk '{print $1, $2, $3}'; }
for r in $(seq 1 "${ROUNDS:-2}"); do
  echo "== round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "torch fp32: $(T off)"
  echo "qkv fp32: $(Q fp32)"
  echo "torch autocast: $(T bf16)"
  echo "qkv bf16: $(Q bf16)"
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
