#!/usr/bin/env bash
# qkv serve under load (bench/RESULTS.md "qkv serve"): concurrency 1, 8, 64 with batching on
# (the defaults) and off (--max-batch-tokens 1: one request at a time), then an open-loop
# overload at 2x the measured batched capacity. Loopback only; every run is bounded by DURATION.
# Usage: bench/serve_bench.sh QKV MODEL_DIR [DURATION_S=60] [OUT_DIR=/tmp/qkv_serve_bench]
# Sentences: the first 1,000 held-out English sentences of the model's data (qkv eval --show).
set -euo pipefail
QKV=$1 MODEL=$2 DUR=${3:-60} OUT=${4:-/tmp/qkv_serve_bench}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
"$QKV" eval --model "$MODEL" --limit 1000 --show 1000 --no-progress 2> /dev/null \
  | sed -n 's/^  \(.*\) => .*   \[ref: .*\]$/\1/p' > "$OUT/held.txt"
"$QKV" translate --model "$MODEL" --file "$OUT/held.txt" > "$OUT/expected.txt"
echo "$(wc -l < "$OUT/held.txt") held-out sentences" >&2
serve() {  # serve NAME FLAGS...: starts qkv serve, sets PID and PORT
  local name=$1; shift
  rm -f "$OUT/$name.port"
  "$QKV" serve --model "$MODEL" --port 0 --port-file "$OUT/$name.port" "$@" 2> "$OUT/$name.log" &
  PID=$!
  for _ in $(seq 1 1000); do grep -q "qkv serve: ready" "$OUT/$name.log" 2> /dev/null && break; sleep 0.02; done
  PORT=$(cat "$OUT/$name.port")
}
load() { /usr/bin/python3 "$HERE/serve_load.py" --port "$PORT" --pid "$PID" --sentences "$OUT/held.txt" \
           --expected "$OUT/expected.txt" --duration "$DUR" "$@"; }
for mode in on off; do
  flags=()
  [ "$mode" = off ] && flags=(--max-batch-tokens 1 --max-wait-ms 0)
  for c in 1 8 64; do
    serve "$mode-$c" "${flags[@]}"
    load --concurrency "$c" > "$OUT/$mode-$c.json"
    echo "batching $mode, concurrency $c: $(cat "$OUT/$mode-$c.json")"
    kill -TERM "$PID"; wait "$PID"
  done
done
# Overload: open loop at twice the batched capacity measured at concurrency 64, default queue.
cap=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sentences_per_s"])' "$OUT/on-64.json")
rate=$(/usr/bin/python3 -c "print(2 * $cap)")
for q in 256 64; do
  serve "overload-q$q" --max-queue "$q"
  load --rate "$rate" --concurrency 512 > "$OUT/overload-q$q.json"
  echo "overload at $rate requests/s (2 x $cap), --max-queue $q: $(cat "$OUT/overload-q$q.json")"
  kill -TERM "$PID"; wait "$PID"
  echo "server exit code after overload: $?"
done
