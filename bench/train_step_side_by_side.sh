#!/usr/bin/env bash
# One D2L Transformer training step, PyTorch (shared/bench/d2l_transformer_bench.py, its best
# configuration) beside qkv (bench_train_step), same shapes: batch 128 × 9, 256 hiddens, 2 blocks,
# 4 heads, FFN 64, Adam, clip 1, masked loss; vocabularies 194/214 and 10000/10000.
# Usage: bench/train_step_side_by_side.sh [build dir] [threads]   (run on an otherwise idle machine)
# PyTorch runs in its best configuration on this machine (docs: HELPER_COMMON / bench/RESULTS.md):
# OMP_WAIT_POLICY=passive (without it the step is ~2x slower) and a private OpenBLAS, since the
# system libblas is netlib reference BLAS. QKV_TORCH_BLAS_DIR names the directory holding that
# OpenBLAS (default: /tmp/oblas/root/usr/lib/x86_64-linux-gnu/openblas-pthread, an unpacked
# libopenblas0-pthread .deb); set it empty to use the system BLAS.
# QKV_TORCH_CORETYPE sets OPENBLAS_CORETYPE for the PyTorch command only, for CPUs that OpenBLAS
# 0.3.21 misdetects (session 5's Intel Xeon model 207: set it to Cooperlake; bench/RESULTS_avx512.md).
# QKV_FULL_MODEL=1 also times qkv with --full-model (blocks on every position, pads included).
# QKV_PRECISION=bf16: mixed precision on both sides (PyTorch --autocast bf16, qkv --precision bf16).
set -euo pipefail
BUILD="${1:-build}"
THREADS="${2:-2}"
PRECISION="${QKV_PRECISION:-fp32}"
case "$PRECISION" in fp32) AUTOCAST=off ;; bf16) AUTOCAST=bf16 ;; *) echo "QKV_PRECISION must be fp32 or bf16" >&2; exit 2 ;; esac
HERE="$(cd "$(dirname "$0")" && pwd)"
PYBENCH="${QKV_SHARED:-$HERE/../../shared}/bench/d2l_transformer_bench.py"
[ -f "$PYBENCH" ] || PYBENCH=/work/shared/bench/d2l_transformer_bench.py
BLAS_DIR="${QKV_TORCH_BLAS_DIR-/tmp/oblas/root/usr/lib/x86_64-linux-gnu/openblas-pthread}"
if [ -n "$BLAS_DIR" ] && [ ! -d "$BLAS_DIR" ]; then
  echo "QKV_TORCH_BLAS_DIR=$BLAS_DIR does not exist (set it empty for the system BLAS)" >&2; exit 1
fi
echo "== $(date -Is)  load: $(cut -d' ' -f1-3 /proc/loadavg)  threads: $THREADS"
for v in "194 214" "10000 10000"; do
  set -- $v
  echo "-- PyTorch, src/tgt vocab $1/$2"
  PYENV_VERSION=system OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    ${QKV_TORCH_CORETYPE:+OPENBLAS_CORETYPE=$QKV_TORCH_CORETYPE} \
    python3 "$PYBENCH" --threads "$THREADS" --src-vocab "$1" --tgt-vocab "$2" --autocast "$AUTOCAST" | grep -E "RESULT|torch"
done
echo "-- qkv (bench_train_step; ms/step = wall time per step, positions/s = B*T per second)"
"$BUILD/bench/bench_train_step" --threads "$THREADS" --precision "$PRECISION" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "BM_|^-|Benchmark|matrix products"
if [ "${QKV_FULL_MODEL:-0}" = 1 ]; then
  echo "-- qkv --full-model (every block on all B*T positions)"
  "$BUILD/bench/bench_train_step" --threads "$THREADS" --full-model --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "BM_|^-|Benchmark"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
