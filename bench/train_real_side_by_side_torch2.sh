#!/usr/bin/env bash
# The real translator's training speed (`qkv train --preset real`, issue 46 item 5) beside PyTorch
# 2.6 (bench/torch_real_translator.py, the same model, data and recipe) in the trixie chroot
# (../shared/bench/torch2/), one thread each on one core, alternated per round: qkv fp32, PyTorch
# fp32, qkv bf16 (--precision bf16), PyTorch autocast bf16. Each run trains SECONDS of training time
# from a fresh start; the figure is target tokens per second of training time (non-<pad> target
# tokens, both programs count them so): qkv's from metrics.jsonl's step lines, PyTorch's from its
# summary line. NICE (default -19) keeps other work on the machine from taking the core's time.
# Needs root (chroot, nice) and DATA = `qkv data --preset real --out DATA` under a path the chroot
# sees (/work is bind-mounted there). Usage:
#   [BUILD=build] [ROUNDS=2] [SECONDS_=180] [CORE=0] [NICE=-19] $0 DATA WORKDIR
set -euo pipefail
DATA=$(realpath "$1"); W=$(realpath -m "$2"); B=$(realpath "${BUILD:-build}")
ROUNDS=${ROUNDS:-2}; SECS=${SECONDS_:-180}; CORE=${CORE:-0}; NICE=${NICE:--19}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
run() { nice -n "$NICE" taskset -c "$CORE" "$@"; }
Q() {  # precision, out
  rm -rf "$2"
  OMP_WAIT_POLICY=passive run "$B/bin/qkv" --threads 1 train --preset real --data "${QKV_DATA:-$here/../../shared/data/fra-eng.zip}" \
    --precision "$1" --time-budget "${SECS}s" --val-every none --no-progress --log-every 10 --out "$2" > "$2.log" 2>&1
  # Windows of 10 steps carry about the same tokens, so the harmonic mean of their rates is the
  # whole run's tokens over its training time, as PyTorch's figure.
  sed -n 's/.*"kind":"step".*"tokens_per_s":\([0-9.]*\).*/\1/p' "$2/metrics.jsonl" \
    | awk '{s += 1 / $1; n++} END {printf "%.0f target tokens/s (%d windows of 10 steps)", n / s, n}'
}
T() {  # autocast flag or "", out
  run chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 python3 \
    "$here/torch_real_translator.py" --data "$DATA" --out "$2" --threads 1 --time-budget "$SECS" --test-limit 8 \
    $1 > "$2.log" 2>&1
  sed -n 's/.*training time: \([0-9]*\) target tokens\/s.*/\1 target tokens\/s (mean)/p' "$2.log"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), core $CORE, 1 thread each, ${SECS} s of training per run"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "qkv fp32:       $(Q fp32 "$W/qkv_fp32_$r")"
  echo "torch fp32:     $(T "" "$W/torch_fp32_$r")"
  echo "qkv bf16:       $(Q bf16 "$W/qkv_bf16_$r")"
  echo "torch autocast: $(T --autocast "$W/torch_autocast_$r")"
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
