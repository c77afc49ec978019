#!/usr/bin/env bash
# Runs one libFuzzer target: first every seed in CORPUS once, then SECONDS of fuzzing (0: seeds only).
# New inputs go to WORK (created), never to the committed CORPUS. A crash, leak, timeout (> 10 s for
# one input) or an allocation over 2 GiB (malloc_limit_mb: "unbounded allocation") fails the run; the
# input is saved as WORK/../<name>-crash-* (libFuzzer prints it and how to replay it).
# Usage: run_fuzz.sh FUZZER CORPUS WORK SECONDS [extra libFuzzer flags]
set -euo pipefail
fuzzer=$1 corpus=$2 work=$3 seconds=$4
shift 4
mkdir -p "$work"
name=$(basename "$work")
artifacts="$(dirname "$work")/$name-"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(-timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=2048 -artifact_prefix="$artifacts" -print_final_stats=1)
# Every seed once (-runs=0 only loads and executes the given inputs).
"$fuzzer" "${common[@]}" -runs=0 "$corpus"
if (( seconds > 0 )); then
    "$fuzzer" "${common[@]}" -max_total_time="$seconds" "$@" "$work" "$corpus"
fi
