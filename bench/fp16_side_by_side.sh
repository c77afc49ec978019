#!/usr/bin/env bash
# float16 attention side by side: qkv's op on float16 tensors (bench_attention's
# BM_attention_sdpa_dtype_fwd, float32 and bfloat16 beside it) and PyTorch 2.6's
# F.scaled_dot_product_attention on torch.float16 (bench/torch2_attn_fp16.py in the trixie
# chroot), alternated ROUNDS times in one window, forward, full and causal, on the side-by-side
# shapes, THREADS threads each. Prints every command and `uptime` before it (the machine is shared).
# CPU=1 rates both sides by CPU time (for a loaded machine; use THREADS=1): Google Benchmark's
# cpu_time (the process's, with one thread) for qkv, torch2_attn_fp16.py --cpu-time for PyTorch.
#   [CPU=1] bench/fp16_side_by_side.sh [ROUNDS=3] [THREADS=2] [BUILD=build]  > log
# bench/fp16_side_by_side_table.py LOG makes the table of bench/RESULTS.md from the log.
set -euo pipefail
ROUNDS=${1:-3}
THREADS=${2:-2}
BUILD=${3:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
QKV_CMD=("$BUILD/bench/bench_attention" "--threads=$THREADS" "--benchmark_filter=BM_attention_sdpa_dtype_fwd"
         "--benchmark_min_time=0.5" "--benchmark_format=json")
TORCH_CMD=(chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8
           GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 "$HERE/torch2_attn_fp16.py" --threads "$THREADS"
           --dtypes fp16 fp32 --impls flash --passes fwd --modes full causal --samples 2
           ${CPU:+--cpu-time --min-sample-s 0.5})
for r in $(seq 1 "$ROUNDS"); do
    echo "## round $r qkv $(date -u +%T) $(uptime)"
    echo "\$ ${QKV_CMD[*]}"
    "${QKV_CMD[@]}" 2>/dev/null
    echo "## round $r torch $(date -u +%T) $(uptime)"
    echo "\$ ${TORCH_CMD[*]}"
    "${TORCH_CMD[@]}" 2>&1
done
echo "## done $(date -u +%T) $(uptime)"
