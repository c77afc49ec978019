#!/usr/bin/env bash
# Data-parallel throughput on this machine (bench/RESULTS.md, "Data-parallel training"):
# `qkv train --preset PRESET` for STEPS steps as 1 process x 2 threads, 2 ranks x 1 thread with the
# gradients reduced during backward, and 2 ranks x 1 thread reduced after backward, alternated
# ROUNDS times. Prints each run's training tokens/s (metrics.jsonl's last step record, validation
# and data loading excluded) and the share of rank 0's training time spent waiting on the reduction.
# Usage: bench/dp_bench.sh [QKV] [PRESET] [STEPS] [ROUNDS]   (data: $QKV_DATA or ../shared/data/fra-eng.zip)
set -euo pipefail
QKV=${1:-build/bin/qkv}; PRESET=${2:-anchor}; STEPS=${3:-60}; ROUNDS=${4:-2}
DATA=${QKV_DATA:-../shared/data/fra-eng.zip}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
common=(train --preset "$PRESET" --data "$DATA" --max-steps "$STEPS" --val-every off --no-progress
        --log-every "$STEPS" --time-budget none --test-pairs 100)
run() {  # NAME EXTRA_TRAIN_FLAGS LAUNCH...
  local name=$1 extra=$2; shift 2
  "$@" "${common[@]}" $extra --out "$T/$name" > "$T/$name.out" 2> "$T/$name.err" || { cat "$T/$name.err"; exit 1; }
  local tps; tps=$(sed -n 's/.*"kind":"step".*"tokens_per_s":\([^,]*\),.*/\1/p' "$T/$name/metrics.jsonl" | tail -1)
  local wait; wait=$(sed -n 's/.*waited \([0-9.]*\) s on the gradient reduction (\([0-9.]*\) %.*/\1 s (\2 %)/p' "$T/$name.out")
  printf '%-28s %8.0f target tokens/s  %s\n' "$name" "$tps" "${wait:+waited $wait}"
  rm -rf "$T/$name"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  run "np1x2threads-$r" "" "$QKV" --threads 2
  run "np2x1thread-overlap-$r" "" mpirun -np 2 --bind-to none "$QKV" --threads 1
  run "np2x1thread-after-$r" "--grad-reduce after-backward" mpirun -np 2 --bind-to none "$QKV" --threads 1
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
